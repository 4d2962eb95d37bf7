package registryapi

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/cmdlog"
	"github.com/agentmesh/mesh/internal/storetest"
	"github.com/agentmesh/mesh/store"
)

// TestRegistrationsExpireOnlyByTheirOwnDeadline: a registration expires
// only if its command carried a deadline (one made before deadlines
// existed never does), only once the sweeping command's clock passed it,
// and never after its agent took a token or its owner registered again.
// Taking a token logs the activation once.
func TestRegistrationsExpireOnlyByTheirOwnDeadline(t *testing.T) {
	db := storetest.DB(t)
	old := newHarnessOn(t, db) // no activation window: as before deadlines existed
	old.do("POST", "/v1/agents/register", jsonBody(map[string]any{"agent_id": "veteran", "capabilities": []string{}}))

	const window = time.Hour
	h := newHarnessOn(t, db, func(c *Config) { c.ActivationWindow = window })
	h.do("POST", "/v1/agents/register", jsonBody(map[string]any{"agent_id": "idle", "capabilities": []string{}}))
	apiKey, _ := h.registerPlain("busy") // takes its token
	seq := h.seq()
	h.token("busy", apiKey)
	if h.seq() != seq {
		t.Fatal("a second token logged a second activation")
	}
	key := identity.GenerateKey()
	body := jsonBody(map[string]any{"agent_id": "returning", "capabilities": []string{}, "pubkey": identity.EncodePublicKey(key.Public().(ed25519.PublicKey))})
	h.want(h.signed(key, "POST", "/v1/agents/register", body), 201, "")
	h.clock.Advance(time.Minute)
	h.want(h.signed(key, "POST", "/v1/agents/register", body), 200, "") // its owner is back

	p := cmdlog.NewLocal(h.log)
	sweep := func() int {
		t.Helper()
		n, err := h.dir.SweepExpired(context.Background(), p, h.clock.Now())
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := sweep(); n != 0 {
		t.Fatalf("%d expired before the window ended", n)
	}
	h.clock.Advance(window)
	seq = h.seq()
	if n := sweep(); n != 1 || h.seq() != seq+1 {
		t.Fatalf("%d expired in %d entries, want idle alone in one", n, h.seq()-seq)
	}
	for id, want := range map[string]int{"idle": 404, "veteran": 200, "busy": 200, "returning": 200} {
		if r := h.do("GET", "/v1/agents/"+id, ""); r.status != want {
			t.Errorf("%s: %d, want %d", id, r.status, want)
		}
	}
	// An expiry that names a registration no longer due logs nothing.
	a, _ := h.dir.Agent("veteran")
	_, err := p.Propose(context.Background(), Kind, h.clock.Now().UnixNano(), Command{Expire: &ExpireOp{Agents: []AgentReg{{AgentID: "veteran", Reg: a.Reg}, {AgentID: "busy", Reg: 1}}}})
	if err == nil {
		t.Fatal("an expiry of registrations in use was applied")
	}
}

// TestAFullExpirySweepFitsADiskStore: an expiry of the most
// registrations one command drops (sweepBatch), each bound to a key
// (their DHT records tombstoned) and of the longest id, commits in one transaction of a store on
// disk with the default memtable, which Badger refuses past 15% of it.
func TestAFullExpirySweepFitsADiskStore(t *testing.T) {
	db, err := store.Open(store.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	const window = time.Hour
	h := newHarnessOn(t, db, func(c *Config) { c.ActivationWindow = window })
	for i := range sweepBatch {
		key := identity.GenerateKey()
		id := fmt.Sprintf("idle-%03d-", i)
		id += strings.Repeat("x", maxIDLen-len(id)) // keys as long as they come
		body := jsonBody(map[string]any{"agent_id": id, "capabilities": []string{"echo"},
			"endpoint": fmt.Sprintf("https://idle-%03d.example/%s", i, strings.Repeat("p", 200)), "pubkey": identity.EncodePublicKey(key.Public().(ed25519.PublicKey))})
		h.want(h.signed(key, "POST", "/v1/agents/register", body), 201, "")
	}
	h.clock.Advance(window)
	seq := h.seq()
	n, err := h.dir.SweepExpired(context.Background(), cmdlog.NewLocal(h.log), h.clock.Now())
	if err != nil || n != sweepBatch || h.seq() != seq+1 {
		t.Fatalf("%d of %d expired in %d entries (%v), want all in one", n, sweepBatch, h.seq()-seq, err)
	}
}
