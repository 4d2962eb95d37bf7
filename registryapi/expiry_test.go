package registryapi

import (
	"context"
	"crypto/ed25519"
	"testing"
	"time"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/cmdlog"
	"github.com/agentmesh/mesh/internal/storetest"
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
