package node

import (
	"slices"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/agentmesh/mesh/internal/testkit"
)

// TestWallBootstrapRestart: the bootstrap, which runs the rendezvous,
// restarts and forgets every registration. A member joining there soon
// sees the members of another node in its welcome, and acks count the
// sockets on either side: the other node registers its rooms again as soon
// as it reconnects, not at their next renewal (30 s). Beats are slowed down
// so that they cannot make up for it.
func TestWallBootstrapRestart(t *testing.T) {
	t.Parallel()
	slow := func(c *Config) { c.Wall.BeatInterval, c.Wall.PresenceTimeout = 10*time.Minute, 30*time.Minute }
	m := newMeshWith(t, slow)
	b := m.joinWith(slow)
	id := createCluster(t, b, `{"visibility":"public"}`)["cluster_id"].(string)
	bob := enterWall(t, b, id, q("agent", "bob"))
	enterWall(t, m.boot, id, q("agent", "alice"))
	bob.next("presence")

	m.boot = m.restart(m.boot)
	var alice *wsClient
	testkit.Eventually(t, 15*time.Second, func() bool {
		alice = dialWall(t, m.boot, id, q("agent", "alice"))
		if slices.Contains(alice.next("welcome")["online"].([]any), any("bob")) {
			return true
		}
		alice.conn.Close(websocket.StatusNormalClosure, "")
		<-alice.done
		return false
	}, "alice's welcome on the restarted bootstrap never listed bob")

	alice.say("back again", bob, 1)
	bob.say("welcome back", alice, 1)
}
