package node

import (
	"testing"
	"time"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/registryapi"
)

// TestHeartbeatsSurviveDirectoryRestart: the directory flushes heartbeats
// when it stops, so an agent that heartbeated stays online across its
// restart, and a replica that follows it learns so too.
func TestHeartbeatsSurviveDirectoryRestart(t *testing.T) {
	m := newMesh(t)
	b := m.join()
	tok := m.token(b, "a1", m.register(b, "a1", identity.GenerateKey()))
	m.clock.Advance(registryapi.DefaultOnlineWindow - time.Minute)
	if st, v := call(t, b, "POST", "/v1/agents/me/heartbeat", "", "Authorization", "Bearer "+tok); st != 200 {
		t.Fatalf("heartbeat: %d %v", st, v)
	}
	m.boot = m.restart(m.boot)
	m.clock.Advance(5 * time.Minute) // past the registration's window, within the beat's
	for _, n := range []*Node{m.boot, b} {
		eventually(t, 20*time.Second, func() bool { _, v := call(t, n, "GET", "/v1/agents/a1", ""); return v["online"] == true },
			"a heartbeat was lost with the directory's restart (node %s)", n.URL())
	}
}
