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

// TestJSPeerPublicCluster: the reference peer, js-libp2p with its
// library's defaults, joins a public cluster's topic through node b, reads
// a WebSocket client's message and sends one every client receives; it
// leaves the topic and rejoins 5 s later, and keeps receiving from both
// nodes' sockets, in good standing (issue 26: with go-libp2p's message ids
// the node counted the echoes of its own messages as invalid, graylisted
// the peer and it heard nothing from the other node for minutes).
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

	js.do(map[string]any{"cmd": "leave"})
	js.next("left", 10*time.Second)
	time.Sleep(5 * time.Second) // as the peer did
	js.do(map[string]any{"cmd": "join"})
	js.next("joined", 10*time.Second)
	for _, n := range []*Node{b, c} {
		testkit.Eventually(t, 20*time.Second, func() bool { return containsPeer(n.host.TopicPeers("mesh/wall/1/"+id), js.id) },
			"%s never saw the js peer back on the topic", n.URL())
	}
	// Outside b's mesh (the prune backoff lasts a minute), the peer
	// gossips about alice's messages to b, and b about carol's to it.
	for _, rx := range []struct {
		from *wsClient
		text string
	}{{alice, "after the rejoin, from b"}, {carol, "after the rejoin, from c"}, {alice, "again from b"}, {carol, "again from c"}} {
		rx.from.send(rx.text)
		js.message(rx.text)
		time.Sleep(time.Second) // a few heartbeats of gossip between sends
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
	alice.quiet(2 * time.Second)
	carol.quiet(2 * time.Second)
	testkit.Eventually(t, 10*time.Second, func() bool { return c.host.PeerScore(stranger.id) < 0 },
		"the replaying js peer kept its score on c")
}
