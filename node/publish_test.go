package node

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/admission"
	"github.com/agentmesh/mesh/internal/testkit"
	"github.com/agentmesh/mesh/registryapi"
)

// commitRegistrations registers count agents with keys straight through
// the directory's log (what the HTTP handler proposes, without HTTP), in
// one burst, and returns their ids.
func commitRegistrations(t *testing.T, dir *Node, count int) []string {
	t.Helper()
	ids := make([]string, count)
	at := dir.cfg.Now()
	for i := range ids {
		ids[i] = fmt.Sprintf("burst-%05d", i)
		key := identity.GenerateKey()
		pub := identity.EncodePublicKey(key.Public().(ed25519.PublicKey))
		body, _ := json.Marshal(map[string]any{"agent_id": ids[i], "capabilities": []string{"echo"}, "pubkey": pub})
		sig := identity.Sign(key, "POST", "/v1/agents/register", body, at)
		h, _ := identity.ParseSigHeader(sig)
		cmd := registryapi.Command{At: at.UnixNano(), Sig: &registryapi.SigClaim{Pubkey: pub, Nonce: h.Nonce},
			Register: &registryapi.RegisterOp{AgentID: ids[i], Capabilities: []string{"echo"}, Pubkey: pub, APIKeyHash: "x",
				Signed: &registryapi.Signed{Method: "POST", Path: "/v1/agents/register", Body: string(body), MeshSig: sig}}}
		// The log itself, past the write budgets: the test is about the publisher.
		if _, err := dir.proposer.Propose(admission.Unmetered(context.Background()), registryapi.Kind, cmd.At, cmd); err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

// waitPuts waits until the directory has stored at least want DHT values
// (some may be published twice: a registration during a republish), and
// checks that none failed.
func waitPuts(t *testing.T, dir *Node, want int) {
	t.Helper()
	puts := func(result string) int { return int(testutil.ToFloat64(dir.publisher.puts.WithLabelValues(result))) }
	testkit.Eventually(t, 2*time.Minute, func() bool { return puts(putOK)+puts(putLocal) >= want || puts(putFailed) > 0 },
		"the directory stored %d DHT values, want %d", puts(putOK)+puts(putLocal), want)

	if n := puts(putFailed); n != 0 {
		t.Fatalf("%d DHT puts failed", n)
	}
}

// TestPublisherPublishesEveryAgent: more agents than the publisher ever
// queued at once (4,096 before) all reach the DHT, when they register in a
// burst and when the directory republishes them at start. The count of
// puts may reach twice the agents before the last agent's are done (the
// republish at start puts agents registered meanwhile a second time), so
// each agent is looked up until it is found.
func TestPublisherPublishesEveryAgent(t *testing.T) {
	t.Parallel()
	testkit.Slow(t, "4,200 registrations and a restart (TestPublisherRetriesFailedPuts covers the puts in the fast loop)")
	m := newMesh(t)
	const agents = 4200
	ids := commitRegistrations(t, m.boot, agents)
	inDHT := func(when string) {
		t.Helper()
		for _, id := range ids {
			testkit.Eventually(t, 2*time.Minute, func() bool {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				a, err := m.boot.LookupDHT(ctx, id)
				return err == nil && a.ID == id
			}, "%s is not in the DHT %s", id, when)
		}
	}
	waitPuts(t, m.boot, 2*agents) // under the did and the agent id
	inDHT("after the burst")
	m.boot = m.restart(m.boot)
	waitPuts(t, m.boot, 2*agents)
	inDHT("after the restart")
}

// TestPublisherRetriesFailedPuts: a DHT put that fails is tried again,
// with backoff, until the value is stored, not only at the next
// republish hours later.
func TestPublisherRetriesFailedPuts(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	p := m.boot.publisher
	var mu sync.Mutex
	tries := map[string]int{}
	p.mu.Lock()
	put := p.putValue
	p.putValue = func(ctx context.Context, key string, value []byte) error {
		mu.Lock()
		tries[key]++
		n := tries[key]
		mu.Unlock()
		if n <= 2 {
			return errors.New("no DHT server answered")
		}
		return put(ctx, key, value)
	}
	p.retryAfter = 50 * time.Millisecond
	p.mu.Unlock()

	id := commitRegistrations(t, m.boot, 1)[0]
	puts := func(result string) int { return int(testutil.ToFloat64(p.puts.WithLabelValues(result))) }
	testkit.Eventually(t, 10*time.Second, func() bool { return puts(putOK)+puts(putLocal) >= 2 }, "the failed puts were not tried again")
	if n := puts(putFailed); n != 4 {
		t.Errorf("%d puts failed, want 4 (two keys, twice each)", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if a, err := m.boot.LookupDHT(ctx, id); err != nil || a.ID != id {
		t.Fatalf("the agent is not in the DHT after the retries: %v", err)
	}
}
