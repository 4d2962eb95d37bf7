package node

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/testkit"
	"github.com/agentmesh/mesh/registryapi"
)

// TestMeshRegistrySurface drives the registry through different nodes of
// one mesh: whatever node a client talks to, it sees the same directory.
func TestMeshRegistrySurface(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	b, c, d := m.join(), m.join(), m.join()

	key := identity.GenerateKey()
	apiKey := m.register(b, "agent-b", key) // forwarded by b to the directory
	// Read your writes on b; everyone else within moments.
	if st, v := call(t, b, "GET", "/v1/agents/agent-b", ""); st != 200 || v["did"] == nil {
		t.Fatalf("register on b, read on b: %d %v", st, v)
	}
	for _, n := range []*Node{c, d, m.boot} {
		testkit.Eventually(t, 5*time.Second, func() bool { st, _ := call(t, n, "GET", "/v1/agents/agent-b", ""); return st == 200 },
			"agent registered on b not visible on %s", n.URL())

	}

	// The directory's seq travels between nodes only.
	if resp, err := http.Post(c.URL()+"/v1/agents/register", "application/json", strings.NewReader(`{"agent_id":"plain-d"}`)); err != nil || resp.Header.Get(seqHeader) != "" {
		t.Fatalf("forwarded answer: %v %v", err, resp.Header)
	} else {
		resp.Body.Close()
	}
	// Answers name the node the client called, even when forwarded.
	if st, v := call(t, c, "POST", "/v1/agents/register", `{"agent_id":"plain-c"}`); st != 201 || v["handle"] != c.URL()+"/agent/plain-c" {
		t.Fatalf("register through c: %d %v", st, v)
	}
	// A token issued through c verifies on d (and b).
	tok := m.token(c, "agent-b", apiKey)
	// The agent goes offline everywhere, then a heartbeat on c brings it back on b.
	m.clock.Advance(registryapi.DefaultOnlineWindow + time.Second)
	if _, v := call(t, b, "GET", "/v1/agents/agent-b", ""); v["online"] != false {
		t.Fatalf("still online after the window: %v", v)
	}
	seq := m.boot.clog.Seq()
	if st, v := call(t, c, "POST", "/v1/agents/me/heartbeat", "", "Authorization", "Bearer "+tok); st != 200 {
		t.Fatalf("heartbeat on c: %d %v", st, v)
	}
	if _, v := call(t, c, "GET", "/v1/agents/agent-b", ""); v["online"] != true {
		t.Fatalf("c does not read its own heartbeat: %v", v)
	}
	if m.boot.clog.Seq() != seq {
		t.Fatal("a heartbeat went into the directory's log")
	}
	// b copies the beats at its next catch-up, one at least every 5 s (a
	// wait of exactly 5 s raced that poll, and lost it under -race).
	testkit.Eventually(t, 20*time.Second, func() bool { _, v := call(t, b, "GET", "/v1/agents/agent-b", ""); return v["online"] == true },
		"heartbeat on c not seen on b")

	// Errors cross unchanged: the same id registered by another key through d.
	other := identity.GenerateKey()
	st, body := rawCall(t, d, "POST", "/v1/agents/register", `{"agent_id":"agent-b"}`)
	stB, bodyB := rawCall(t, m.boot, "POST", "/v1/agents/register", `{"agent_id":"agent-b"}`)
	if st != 409 || st != stB || body != bodyB {
		t.Fatalf("conflict through d: %d %s; at the directory: %d %s", st, body, stB, bodyB)
	}
	if st, v := m.signedCall(d, other, "POST", "/v1/agents/agent-b/feedback", `{"success":true,"latency_ms":400,"quality":5}`); st != 200 || v["counted"] != true {
		t.Fatalf("feedback on d: %d %v", st, v)
	}
	// The rollup read on b equals the directory's.
	testkit.Eventually(t, 5*time.Second, func() bool {
		_, vb := call(t, b, "GET", "/v1/agents/agent-b/reputation", "")
		_, vd := call(t, m.boot, "GET", "/v1/agents/agent-b/reputation", "")
		return vb["n"] == 1.0 && vb["score"] == vd["score"]
	}, "rollup on b differs from the directory's")

	// Delete on b, gone on c.
	doomed := m.register(b, "doomed", identity.GenerateKey())
	m.deleteAgent(b, "doomed", doomed)
	testkit.Eventually(t, 5*time.Second, func() bool { st, _ := call(t, c, "GET", "/v1/agents/doomed", ""); return st == 404 },
		"deleted agent still served by c")

	// A node that joins after all of this sees the whole directory: every
	// registration, the heartbeat, the deletion and the same rollup.
	late := m.join()
	if _, v := call(t, late, "GET", "/v1/agents/agent-b/identity", ""); v["online"] != true || v["reputation"].(map[string]any)["n"] != 1.0 {
		t.Fatalf("late node identity: %v", v)
	}
	_, want := call(t, m.boot, "GET", "/v1/agents/agent-b/reputation", "")
	if _, got := call(t, late, "GET", "/v1/agents/agent-b/reputation", ""); got["score"] != want["score"] || got["n"] != want["n"] {
		t.Fatalf("late node rollup %v, directory's %v", got, want)
	}
	if st, _ := call(t, late, "GET", "/v1/agents/plain-c", ""); st != 200 {
		t.Fatalf("late node lacks plain-c: %d", st)
	}
	if st, _ := call(t, late, "GET", "/v1/agents/doomed", ""); st != 404 {
		t.Fatalf("late node serves the deleted agent: %d", st)
	}
}
