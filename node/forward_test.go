package node

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"
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

// TestForwardedAnswerNamesItsOwnEntry: the directory's answer to a
// forwarded write names the entry the write landed in (X-Mesh-Seq), which
// the forwarding node waits for, not the head of the log as it answers:
// a write sent again after others were applied is answered with its first
// entry's seq. A request that proposes nothing names the head.
func TestForwardedAnswerNamesItsOwnEntry(t *testing.T) { // not parallel: its Raft elections run in real time, and its members' ports fixed
	q := newQuorumMesh(t, 1, nil)
	p := q.join(0)
	secret := strings.Repeat("ab", 32)
	seqOf := func(resp *http.Response, want int) uint64 {
		t.Helper()
		defer resp.Body.Close()
		seq, err := strconv.ParseUint(resp.Header.Get(seqHeader), 10, 64)
		if resp.StatusCode != want || err != nil {
			t.Fatalf("answer %d, %s %q: want %d and a seq", resp.StatusCode, seqHeader, resp.Header.Get(seqHeader), want)
		}
		return seq
	}
	first := seqOf(forwardFrom(t, p, "POST", "/v1/agents/register", anonymous("first"), writeHeader, secret), 201)
	if head := q.boot.clog.Seq(); first != head {
		t.Fatalf("the first write's answer names seq %d, the log's head is %d", first, head)
	}
	for i := range 3 {
		seqOf(forwardFrom(t, p, "POST", "/v1/agents/register", anonymous(fmt.Sprint("other-", i))), 201)
	}
	if again := seqOf(forwardFrom(t, p, "POST", "/v1/agents/register", anonymous("first"), writeHeader, secret), 201); again != first {
		t.Errorf("the write sent again names seq %d, want its entry's %d (head %d)", again, first, q.boot.clog.Seq())
	}
	if read, head := seqOf(forwardFrom(t, p, "GET", "/v1/agents/first", ""), 200), q.boot.clog.Seq(); read != head {
		t.Errorf("a lookup names seq %d, want the head %d", read, head)
	}
}

// TestAWriteLandsOnceAcrossASessionBreak: the leader applies a write
// forwarded on a session, and the connection under the session breaks
// before the answer goes out. The forwarding node sends the write again
// on a new session; its client gets the first attempt's answer, and the
// write was applied once.
func TestAWriteLandsOnceAcrossASessionBreak(t *testing.T) { // not parallel: its Raft elections run in real time, and its members' ports fixed
	q := newQuorumMesh(t, 3, nil)
	ord := q.join(0, 1, 2)
	l := q.leader()
	var attempts atomic.Int32
	first := make(chan []byte, 1)
	l.host.HandleSessions(forwardSessionProto, maxForwardReq, func(ctx context.Context, from peer.ID, req []byte) ([]byte, error) {
		resp, err := l.serveForward(ctx, from, req)
		if attempts.Add(1) == 1 {
			first <- resp
			l.host.Libp2p().Network().ClosePeer(from) // the answer is lost
		}
		return resp, err
	})
	seq := l.clog.Seq()
	st, v := call(t, ord, "POST", "/v1/agents/register", anonymous("once"))
	if st != 201 {
		t.Fatalf("register across a session break: %d %v", st, v)
	}
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(<-first)), nil)
	if err != nil {
		t.Fatal(err)
	}
	var lost map[string]any
	json.NewDecoder(resp.Body).Decode(&lost)
	if n := attempts.Load(); n != 2 || v["api_key"] != lost["api_key"] {
		t.Errorf("%d attempts, the client's api key %v, the lost answer's %v: want 2 attempts answered alike", n, v["api_key"], lost["api_key"])
	}
	if now := l.clog.Seq(); now != seq+1 || l.dir.AgentCount() != 1 {
		t.Errorf("the write sent again was applied again: seq %d (was %d), %d agents", now, seq, l.dir.AgentCount())
	}
}
