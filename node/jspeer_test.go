package node

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/agentmesh/mesh/internal/npmtest"
	"github.com/agentmesh/mesh/internal/testkit"
)

// jsPeerDir is the reference peer written from docs/wire.md.
var jsPeerDir = filepath.Join("..", "examples", "js-peer")

// jsPeer is examples/js-peer running against a node.
type jsPeer struct {
	t      *testing.T
	id     peer.ID
	stdin  io.WriteCloser
	events chan map[string]any
}

// startJSPeer runs the reference peer connected to nodes, on cluster id's
// topic (with the token, if any; private says which topic without it);
// the test has called npmtest.Require.
func startJSPeer(t *testing.T, id, token string, private bool, nodes ...*Node) *jsPeer {
	t.Helper()
	args := []string{"peer.mjs", "--cluster", id}
	for _, n := range nodes {
		for _, a := range n.host.Addrs() {
			if strings.HasPrefix(a, "/ip4/127.0.0.1/tcp/") {
				args = append(args, "--node", a)
				break
			}
		}
	}
	if token != "" {
		args = append(args, "--token", token)
	}
	if private {
		args = append(args, "--private")
	}
	cmd := exec.Command("node", args...)
	cmd.Dir = jsPeerDir
	cmd.Stderr = os.Stderr
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() })
	p := &jsPeer{t: t, stdin: stdin, events: make(chan map[string]any, 1024)}
	go func() {
		defer close(p.events)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var ev map[string]any
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				p.events <- ev
			}
		}
	}()
	ready := p.next("ready", 60*time.Second)
	var err error
	if p.id, err = peer.Decode(ready["peer_id"].(string)); err != nil {
		t.Fatal(err)
	}
	topic := "mesh/wall/1/" + id
	if private {
		topic = "mesh/wall/2/" + id
	}
	for _, n := range nodes {
		testkit.Eventually(t, 20*time.Second, func() bool { return containsPeer(n.host.TopicPeers(topic), p.id) },
			"%s never saw the js peer on %s", n.URL(), topic)
	}
	return p
}

func containsPeer(ps []peer.ID, p peer.ID) bool {
	for _, x := range ps {
		if x == p {
			return true
		}
	}
	return false
}

func (p *jsPeer) do(cmd map[string]any) {
	p.t.Helper()
	b, _ := json.Marshal(cmd)
	if _, err := p.stdin.Write(append(b, '\n')); err != nil {
		p.t.Fatal(err)
	}
}

// next returns the next event of kind, skipping others; an error event
// fails the test.
func (p *jsPeer) next(kind string, within time.Duration) map[string]any {
	p.t.Helper()
	timeout := time.After(within)
	for {
		select {
		case ev, ok := <-p.events:
			if !ok {
				p.t.Fatalf("the js peer exited before a %s event", kind)
			}
			if ev["event"] == "error" {
				p.t.Fatalf("the js peer: %v", ev)
			}
			if ev["event"] == kind {
				return ev
			}
		case <-timeout:
			p.t.Fatalf("no %s event from the js peer within %v", kind, within)
		}
	}
}

// message waits for the js peer to read a message with payload.
func (p *jsPeer) message(payload string) map[string]any {
	p.t.Helper()
	for {
		if ev := p.next("message", 20*time.Second); ev["payload"] == payload {
			return ev
		}
	}
}

// none asserts that the js peer reads no message for d.
func (p *jsPeer) none(d time.Duration) {
	p.t.Helper()
	timeout := time.After(d)
	for {
		select {
		case ev := <-p.events:
			if ev["event"] == "message" {
				p.t.Fatalf("the js peer read %v", ev)
			}
		case <-timeout:
			return
		}
	}
}

// messageWith returns the next message frame rx gets with payload,
// skipping others.
func messageWith(rx *wsClient, payload string) map[string]any {
	rx.t.Helper()
	for {
		if f := rx.next("message"); f["payload"] == payload {
			return f
		}
	}
}

// gossiped waits until the js peer has ended two gossipsub heartbeats since
// the events read so far: what it read before is announced (IHAVE) to the
// peers outside its mesh, and what they asked for of it (IWANT) answered.
func (p *jsPeer) gossiped() {
	p.t.Helper()
	p.next("heartbeat", 10*time.Second)
	p.next("heartbeat", 10*time.Second)
}

// TestJSPeerPublicCluster: the reference peer, js-libp2p with its
// library's defaults, joins a public cluster's topic through nodes b and
// c, reads a WebSocket client's message and sends one every client
// receives; it leaves the topic and rejoins, and keeps receiving from both
// nodes' sockets, in good standing (issue 26: with go-libp2p's message ids
// the node asked the peer, outside its mesh, for its own messages, counted
// their echoes as invalid and graylisted it, and the peer heard nothing
// from that node's sockets for minutes).
func TestJSPeerPublicCluster(t *testing.T) {
	t.Parallel()
	npmtest.Require(t, jsPeerDir, "libp2p")
	m := newMesh(t)
	b, c := m.join(), m.join()
	id := createCluster(t, b, `{"visibility":"public"}`)["cluster_id"].(string)
	alice := enterWall(t, b, id, q("agent", "alice"))
	carol := enterWall(t, c, id, q("agent", "carol"))
	js := startJSPeer(t, id, "", false, b, c)

	alice.send("hello, js")
	if ev := js.message("hello, js"); ev["from"] != "alice" {
		t.Fatalf("the js peer read %v", ev)
	}
	alice.next("ack")
	js.do(map[string]any{"cmd": "send", "from": "jsbot", "payload": "hello from js"})
	for _, rx := range []*wsClient{alice, carol} {
		if f := messageWith(rx, "hello from js"); f["from"] != "jsbot" || f["from_did"] != nil {
			t.Fatalf("a socket got %v", f)
		}
	}

	// The peer leaves, and rejoins once both nodes saw it go: they took it
	// out of their meshes, and its unsubscribe backoff (10 s, announced in
	// its prune) keeps it out of them after it rejoins. Meanwhile each
	// node's messages reach it (flood publishing) and it announces them
	// back to the nodes by gossip: the peer, which rejoined 5 s
	// later, met the same; only the backoff left differs.
	js.do(map[string]any{"cmd": "leave"})
	js.next("left", 10*time.Second)
	topic := "mesh/wall/1/" + id
	for _, n := range []*Node{b, c} {
		testkit.Eventually(t, 20*time.Second, func() bool { return !containsPeer(n.host.TopicPeers(topic), js.id) },
			"%s never saw the js peer leave the topic", n.URL())
	}
	js.do(map[string]any{"cmd": "join"})
	js.next("joined", 10*time.Second)
	for _, n := range []*Node{b, c} {
		testkit.Eventually(t, 20*time.Second, func() bool { return containsPeer(n.host.TopicPeers(topic), js.id) },
			"%s never saw the js peer back on the topic", n.URL())
	}
	// Each message is gossiped about before the next is sent: a node that
	// counted the echoes of its own as invalid would stop sending to the
	// peer (its score under the publish threshold) before the next.
	for _, rx := range []struct {
		from *wsClient
		text string
	}{{alice, "after the rejoin, from b"}, {carol, "after the rejoin, from c"}, {alice, "again from b"}, {carol, "again from c"}} {
		rx.from.send(rx.text)
		js.message(rx.text)
		js.gossiped()
	}
	for _, n := range []*Node{b, c} {
		if s := n.host.PeerScore(js.id); s < 0 {
			t.Fatalf("the js peer's score on %s is %v", n.URL(), s)
		}
	}
}

// TestJSPeerPrivateCluster: with the token, the reference peer reads and
// speaks through the seal; without it, it reads nothing, and the messages
// it re-publishes reach no socket.
func TestJSPeerPrivateCluster(t *testing.T) {
	t.Parallel()
	npmtest.Require(t, jsPeerDir, "libp2p")
	m := newMesh(t)
	b, c := m.join(), m.join()
	cl := createCluster(t, b, `{"name":"js vault"}`)
	id, tok := cl["cluster_id"].(string), cl["token"].(string)
	alice := enterWall(t, b, id, q("agent", "alice", "token", tok))
	carol := enterWall(t, c, id, q("agent", "carol", "token", tok))
	member := startJSPeer(t, id, tok, true, b)
	stranger := startJSPeer(t, id, "", true, c)

	alice.send("sealed hello")
	member.message("sealed hello")
	alice.next("ack")
	member.do(map[string]any{"cmd": "send", "from": "jsbot", "payload": "sealed, from js"})
	for _, rx := range []*wsClient{alice, carol} {
		if f := messageWith(rx, "sealed, from js"); f["from"] != "jsbot" {
			t.Fatalf("a socket got %v", f)
		}
	}

	stranger.next("unreadable", 20*time.Second)
	stranger.none(time.Second)
	stranger.do(map[string]any{"cmd": "replay"})
	if ev := stranger.next("replayed", 10*time.Second); ev["count"] == 0.0 {
		t.Fatalf("the stranger captured nothing: %v", ev)
	}
	// c refuses the copies as invalid before delivery (the replayer loses
	// score there); none reaches a socket, there or through c.
	testkit.Eventually(t, 10*time.Second, func() bool { return c.host.PeerScore(stranger.id) < 0 },
		"the replaying js peer kept its score on c")
	alice.quiet(time.Second)
	carol.quiet(time.Second)
}
