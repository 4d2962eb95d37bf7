package node

import (
	"fmt"
	"sync"
	"testing"

	"github.com/libp2p/go-libp2p/core/protocol"
)

// forwardStreams counts the open streams of proto from n to the directory,
// as the directory sees them.
func forwardStreams(m *mesh, n *Node, proto string) int {
	count := 0
	for _, c := range m.boot.host.Libp2p().Network().ConnsToPeer(n.host.ID()) {
		for _, s := range c.GetStreams() {
			if s.Protocol() == protocol.ID(proto) {
				count++
			}
		}
	}
	return count
}

// registerAll registers n agents named prefix-i through node at once,
// and reads each back on node as soon as it answered (read your writes).
func registerAll(t *testing.T, node *Node, prefix string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			id := fmt.Sprint(prefix, "-", i)
			if st, v := call(t, node, "POST", "/v1/agents/register", anonymous(id)); st != 201 {
				t.Errorf("register %s: %d %v", id, st, v)
				return
			}
			if st, v := call(t, node, "GET", "/v1/agents/"+id, ""); st != 200 {
				t.Errorf("%s read back on the node that answered: %d %v", id, st, v)
			}
		})
	}
	wg.Wait()
}

// TestForwardedWritesShareOneStream: the writes a node forwards to the
// directory go on one stream of /mesh/directory/forward/2.0.0, not on a
// stream each, and each lands and reads back on that node.
func TestForwardedWritesShareOneStream(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	b := m.join()
	registerAll(t, b, "shared", 24)
	if n := forwardStreams(m, b, "/mesh/directory/forward/2.0.0"); n != 1 {
		t.Errorf("%d forward sessions from the node after 24 writes, want 1", n)
	}
	registerAll(t, b, "again", 8)
	if n := forwardStreams(m, b, "/mesh/directory/forward/2.0.0"); n != 1 {
		t.Errorf("%d forward sessions from the node after 32 writes, want 1", n)
	}
}

// TestForwardingToADirectoryOfTheReleaseBefore: a directory that serves
// only /mesh/directory/forward/1.0.0 (a stream a request) still takes a
// node's writes.
func TestForwardingToADirectoryOfTheReleaseBefore(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	m.boot.host.Libp2p().RemoveStreamHandler(protocol.ID(forwardSessionProto))
	b := m.join()
	registerAll(t, b, "old", 8)
	if n := forwardStreams(m, b, forwardSessionProto); n != 0 {
		t.Errorf("%d forward sessions to a directory that does not serve them", n)
	}
}
