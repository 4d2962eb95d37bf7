package node

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/libp2p/go-libp2p"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/testkit"
	"github.com/agentmesh/mesh/p2p"
	"github.com/agentmesh/mesh/p2p/p2ptest"
)

// TestWallAcrossNodes: clients on different nodes of one mesh see each
// other online, broadcast and message each other directly, and acks count
// the sockets that received each frame.
func TestWallAcrossNodes(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	b, c := m.join(), m.join()
	cl := createCluster(t, b, `{"name":"Night Market","visibility":"public","topic":"#food"}`)
	id := cl["cluster_id"].(string)
	if cl["slug"] != "night-market" || cl["protocol"] != "mesh-wall/1" {
		t.Fatalf("create: %v", cl)
	}

	alice := dialWall(t, b, id, q("agent", "alice"))
	if w := alice.next("welcome"); w["you"] != "alice" || w["public"] != true || len(w["online"].([]any)) != 1 {
		t.Fatalf("alice's welcome: %v", w)
	}
	bob := dialWall(t, c, id, q("agent", "bob", "did", "did:key:z6MkBob"))
	w := bob.next("welcome")
	online := w["online"].([]any)
	if !slices.Contains(online, any("alice")) || !slices.Contains(online, any("bob")) {
		t.Fatalf("bob's welcome does not list alice on the other node: %v", w)
	}
	if p := alice.next("presence"); p["agent"] != "bob" || p["status"] != "online" || p["did"] != "did:key:z6MkBob" {
		t.Fatalf("alice saw %v", p)
	}

	alice.send("hello from b")
	if f := bob.next("message"); f["from"] != "alice" || f["payload"] != "hello from b" || f["to"] != nil {
		t.Fatalf("bob got %v", f)
	}
	if a := alice.next("ack"); a["delivered"] != 1.0 || a["to"] != nil {
		t.Fatalf("alice's ack: %v", a)
	}

	bob.send(map[string]any{"to": "alice", "payload": map[string]any{"text": "psst"}})
	if f := alice.next("message"); f["to"] != "alice" || f["from"] != "bob" {
		t.Fatalf("alice got %v", f)
	}
	if a := bob.next("ack"); a["delivered"] != 1.0 || a["to"] != "alice" {
		t.Fatalf("bob's ack: %v", a)
	}
	bob.send(map[string]any{"to": "nobody", "payload": "anyone?"})
	if a := bob.next("ack"); a["delivered"] != 0.0 {
		t.Fatalf("ack to an absent handle: %v", a)
	}
	alice.quiet(300 * time.Millisecond)
}

// TestWallPrivateCluster: a private cluster admits only token holders, is
// never listed, and its traffic is unreadable on the wire: a raw libp2p
// peer subscribed to its topic receives only ciphertext.
func TestWallPrivateCluster(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	b, c := m.join(), m.join()
	cl := createCluster(t, c, `{"name":"war room"}`)
	id, tok := cl["cluster_id"].(string), cl["token"].(string)
	if cl["visibility"] != "private" || cl["slug"] != nil || !strings.Contains(cl["ws"].(string), "token="+tok) {
		t.Fatalf("create: %v", cl)
	}
	for _, n := range []*Node{b, c, m.boot} {
		if st, v := call(t, n, "GET", "/v1/clusters/"+id, ""); st != 404 {
			t.Fatalf("private cluster visible on %s: %d %v", n.URL(), st, v)
		}
		_, list := call(t, n, "GET", "/v1/clusters", "")
		if strings.Contains(fmt.Sprint(list), id) {
			t.Fatalf("private cluster listed: %v", list)
		}
	}
	if _, resp, err := tryDialWall(t, b, id, q("agent", "eve")); err == nil || resp.StatusCode != 401 {
		t.Fatalf("no token: %v", resp)
	}

	// A raw peer on the topic, connected to b, with no token.
	raw := rawPeer(t, b)
	topic, err := raw.Join("mesh/wall/2/"+id, p2p.TopicConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen [][]byte
	go func() {
		for {
			msg, err := topic.Next(context.Background())
			if err != nil {
				return
			}
			mu.Lock()
			seen = append(seen, msg.Data)
			mu.Unlock()
		}
	}()

	alice := enterWall(t, b, id, q("agent", "alice", "token", tok))
	admin := dialWall(t, c, id, q("agent", "boss", "token", cl["admin_token"].(string)))
	if w := admin.next("welcome"); !slices.Contains(w["online"].([]any), any("alice")) {
		t.Fatalf("admin's welcome: %v", w)
	}
	alice.send(map[string]any{"payload": "the eagle lands at noon"})
	if f := admin.next("message"); f["payload"] != "the eagle lands at noon" {
		t.Fatalf("admin got %v", f)
	}
	testkit.Eventually(t, 10*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) > 0 },
		"the raw peer received nothing from the topic")

	mu.Lock()
	defer mu.Unlock()
	for _, data := range seen {
		for _, secret := range []string{"eagle", "alice", "boss", "msg", "roster"} {
			if bytes.Contains(data, []byte(secret)) {
				t.Fatalf("%q readable on the wire: %q", secret, data)
			}
		}
	}
}

// rawPeer is a bare libp2p host connected to n, with pubsub: what any
// relaying node without the cluster token sees.
func rawPeer(t *testing.T, n *Node) *rawHost {
	t.Helper()
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	ps, err := pubsub.NewGossipSub(context.Background(), h)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.Connect(ctx, peer.AddrInfo{ID: n.host.ID(), Addrs: n.host.Libp2p().Addrs()}); err != nil {
		t.Fatal(err)
	}
	return &rawHost{ps: ps}
}

type rawHost struct{ ps *pubsub.PubSub }

func (r *rawHost) Join(topic string, _ p2p.TopicConfig) (*pubsub.Subscription, error) {
	tp, err := r.ps.Join(topic)
	if err != nil {
		return nil, err
	}
	return tp.Subscribe()
}

// TestWallDeleteAcrossNodes: deleting through one node closes every socket
// on every node with a closed frame, and the id then behaves as never
// existing everywhere.
func TestWallDeleteAcrossNodes(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	b, c := m.join(), m.join()
	cl := createCluster(t, b, `{"visibility":"public","name":"short lived"}`)
	id := cl["cluster_id"].(string)
	onB := enterWall(t, b, id, q("agent", "x"))
	onC := enterWall(t, c, id, q("agent", "y"))
	if st, v := call(t, c, "DELETE", "/v1/clusters/"+id, "", "X-Cluster-Token", cl["token"].(string)); st != 401 {
		t.Fatalf("delete with ck_: %d %v", st, v)
	}
	if st, v := call(t, c, "DELETE", "/v1/clusters/"+id, "", "Authorization", "Bearer "+cl["admin_token"].(string)); st != 200 || v["ok"] != true {
		t.Fatalf("delete through c: %d %v", st, v)
	}
	for _, s := range []*wsClient{onB, onC} {
		if f := s.next("closed"); f["reason"] != "cluster deleted" {
			t.Fatalf("closed frame: %v", f)
		}
		<-s.done
	}
	for _, n := range []*Node{b, c, m.boot} {
		testkit.Eventually(t, 5*time.Second, func() bool {
			st, _ := call(t, n, "GET", "/v1/clusters/"+id, "")
			return st == 404
		}, "deleted cluster still served by %s", n.URL())

		if st, _ := call(t, n, "GET", "/v1/clusters/short-lived", ""); st != 404 {
			t.Fatalf("slug still resolves on %s", n.URL())
		}
		if _, resp, err := tryDialWall(t, n, id, q("agent", "z")); err == nil || resp.StatusCode != 404 {
			t.Fatalf("connect after delete on %s: %v", n.URL(), resp)
		}
		if st, _ := call(t, n, "DELETE", "/v1/clusters/"+id, "", "X-Cluster-Token", cl["admin_token"].(string)); st != 404 {
			t.Fatalf("second delete on %s: %d", n.URL(), st)
		}
	}
}

// TestWallVisibilityAcrossNodes: presence crosses nodes for public and
// private members, never for ghosts; external surfaces mask private
// handles, even on a node that serves nobody in the cluster.
func TestWallVisibilityAcrossNodes(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	b, c, d := m.join(), m.join(), m.join()
	id := createCluster(t, b, `{"visibility":"public"}`)["cluster_id"].(string)
	obs := enterWall(t, c, id, q("agent", "obs"))
	enterWall(t, b, id, q("agent", "pub", "vis", "public"))
	ghost := enterWall(t, b, id, q("agent", "ghost", "vis", "ghost"))
	priv := enterWall(t, b, id, q("agent", "priv", "vis", "private"))
	for _, want := range []string{"pub", "priv"} {
		if p := obs.next("presence"); p["agent"] != want || p["status"] != "online" {
			t.Fatalf("obs saw %v, want %s online (ghosts are never announced)", p, want)
		}
	}
	late := dialWall(t, c, id, q("agent", "late"))
	if w := late.next("welcome"); fmt.Sprint(w["online"]) != "[late obs priv pub]" {
		t.Fatalf("late welcome: %v", w["online"])
	}
	obs.say("anyone?", ghost, 3) // delivered to pub, priv, late; not the ghost
	// d serves nobody in the cluster; it asks the nodes that do.
	_, v := call(t, d, "GET", "/v1/clusters/"+id, "")
	got := v["cluster"].(map[string]any)
	if got["online"] != 4.0 || fmt.Sprint(got["members"]) != "[late obs p*** pub]" {
		t.Fatalf("external view on d: %v", got)
	}
	priv.conn.Close(websocket.StatusNormalClosure, "")
	if p := obs.next("presence"); p["agent"] != "priv" || p["status"] != "offline" {
		t.Fatalf("after priv left: %v", p)
	}
}

// TestWallLobby: the open lobby has a fixed id and slug on every node.
func TestWallLobby(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	b, c := m.join(), m.join()
	for _, n := range []*Node{b, c, m.boot} {
		st, v := call(t, n, "GET", "/v1/clusters/lobby", "")
		lb := v["cluster"].(map[string]any)
		if st != 200 || lb["id"] != "c_lobby" || lb["topic"] != "#public" {
			t.Fatalf("lobby on %s: %d %v", n.URL(), st, v)
		}
		_, list := call(t, n, "GET", "/v1/clusters", "")
		if first := list["clusters"].([]any)[0].(map[string]any); first["slug"] != "lobby" {
			t.Fatalf("catalog on %s: %v", n.URL(), list)
		}
	}
	x := enterWall(t, b, "c_lobby", q("agent", "x"))
	y := enterWall(t, c, "c_lobby", q("agent", "y"))
	y.send("hello lobby")
	if f := x.next("message"); f["payload"] != "hello lobby" {
		t.Fatalf("lobby message: %v", f)
	}
}

// TestWallHistoryAcrossNodes: joins and leaves on every node reach the
// owner's history, asked of any node.
// In a public cluster the directory takes a node's events only about its
// own sockets, checked against the roster it asks the node for; a visit
// that ends as soon as it began (the room closes before the directory
// asks) is still recorded.
func TestWallHistoryAcrossNodes(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	b, c := m.join(), m.join()
	for _, body := range []string{`{}`, `{"visibility":"public"}`} {
		cl := createCluster(t, b, body)
		id, tok := cl["cluster_id"].(string), cl["token"].(string)
		enterWall(t, b, id, q("agent", "one", "token", tok))
		two := enterWall(t, c, id, q("agent", "two", "token", tok))
		two.conn.Close(websocket.StatusNormalClosure, "")
		if st, _ := call(t, c, "GET", "/v1/clusters/"+id+"/history", ""); st != 401 {
			t.Fatalf("history without a token: %d", st)
		}
		var events []any
		testkit.Eventually(t, 10*time.Second, func() bool {
			_, v := call(t, c, "GET", "/v1/clusters/"+id+"/history", "", "X-Cluster-Token", cl["admin_token"].(string))
			events, _ = v["events"].([]any)
			return len(events) == 3
		}, "history of %s on c: %v", body, events)

		// Newest first; b's and c's events may reach the directory in
		// either order.
		var got []string
		for _, e := range events {
			e := e.(map[string]any)
			got = append(got, e["event"].(string)+" "+e["agent"].(string))
		}
		if i, j := slices.Index(got, "leave two"), slices.Index(got, "join two"); i < 0 || j < i || !slices.Contains(got, "join one") {
			t.Fatalf("history of %s: %v", body, got)
		}
	}
}

// TestWallRelayedChat: two nodes behind NATs that refuse direct connections
// between them chat through a bootstrap node's relay.
func TestWallRelayedChat(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	keyB, keyC := identity.GenerateKey(), identity.GenerateKey()
	idB, idC := mustPeer(t, keyB), mustPeer(t, keyC)
	natted := func(key ed25519.PrivateKey, other peer.ID) *Node {
		cfg := m.config(t.TempDir(), RoleNode)
		cfg.Key, cfg.Reachability, cfg.Gater = key, "private", p2ptest.NewNAT(other)
		n := m.start(cfg)
		m.waitCaughtUp(n)
		return n
	}
	b, c := natted(keyB, idC), natted(keyC, idB)
	id := createCluster(t, b, `{"visibility":"public"}`)["cluster_id"].(string)
	alice := enterWall(t, b, id, q("agent", "alice"))
	var bob *wsClient
	testkit.Eventually(t, 30*time.Second, func() bool {

		bob = dialWall(t, c, id, q("agent", "bob"))
		w := bob.next("welcome")
		if slices.Contains(w["online"].([]any), any("alice")) {
			return true
		}
		bob.conn.Close(websocket.StatusNormalClosure, "")
		return false
	}, "bob never saw alice across the relay")

	alice.say("through the relay", bob, 1)
	bob.send(map[string]any{"to": "alice", "payload": "and back"})
	if f := alice.next("message"); f["payload"] != "and back" {
		t.Fatalf("alice got %v", f)
	}
	conns := b.host.Libp2p().Network().ConnsToPeer(idC)
	if len(conns) == 0 {
		t.Fatal("b and c are not connected at all")
	}
	for _, cn := range conns {
		if !p2ptest.IsRelayed(cn.RemoteMultiaddr()) {
			t.Fatalf("a direct connection between the NATed nodes: %s", cn.RemoteMultiaddr())
		}
	}
}

func mustPeer(t *testing.T, key ed25519.PrivateKey) peer.ID {
	t.Helper()
	id, err := p2p.PeerID(key.Public().(ed25519.PublicKey))
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestWallLargeRosterStaysOnline: a node with more members than one topic
// message could list (long handles and dids: the roster is well over the
// topic's size limit) keeps them online on the other nodes, past several
// presence timeouts.
func TestWallLargeRosterStaysOnline(t *testing.T) {
	t.Parallel()
	testkit.Slow(t, "300 sockets and seconds of real presence timeouts")
	m := newMesh(t)
	fast := func(c *Config) { c.Wall.BeatInterval, c.Wall.PresenceTimeout = 200*time.Millisecond, 2*time.Second }
	b, c := m.joinWith(fast), m.joinWith(fast)
	id := createCluster(t, b, `{"visibility":"public"}`)["cluster_id"].(string)
	obs := enterWall(t, c, id, q("agent", "obs"))
	const n = 300 // about 110 KB of roster
	for i := range n {
		h := fmt.Sprintf("%03d-%s", i, strings.Repeat("h", 60))
		did := "did:key:z" + strings.Repeat(fmt.Sprintf("%03d", i), 82)
		dialWall(t, b, id, q("agent", h, "did", did)).next("welcome")
	}
	online := map[string]bool{}
	for len(online) < n {
		p := obs.next("presence")
		if p["status"] != "online" {
			t.Fatalf("while members joined: %v", p)
		}
		online[p["agent"].(string)] = true
	}
	// Three presence timeouts: no member may go offline.
	for end := time.After(6 * time.Second); ; {
		select {
		case f := <-obs.frames:
			t.Fatalf("after every member joined, obs got %v", f)
		case <-end:
		}
		break
	}
	late := dialWall(t, c, id, q("agent", "late"))
	if w := late.next("welcome"); len(w["online"].([]any)) != n+2 {
		t.Fatalf("late welcome lists %d online, want %d", len(w["online"].([]any)), n+2)
	}
}

// TestWallMessageOrderAcrossNodes: a burst from one sender reaches a
// socket on another node in the order sent, and the sender's acks come in
// that order too. Messages go in turn to the receiver and to an absent
// handle, so that each ack tells which message it is for.
func TestWallMessageOrderAcrossNodes(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	b := m.joinWith(func(c *Config) { c.WallSocketRate = 0 }) // a burst of n
	c := m.join()
	id := createCluster(t, b, `{"visibility":"public"}`)["cluster_id"].(string)
	rx := enterWall(t, c, id, q("agent", "rx"))
	tx := enterWall(t, b, id, q("agent", "tx"))
	const n = 500
	to := func(i int) string { return []string{"rx", "nobody"}[i%2] }
	for i := range n {
		tx.send(fmt.Sprintf(`{"to":%q,"payload":%d}`, to(i), i))
	}
	for i := 0; i < n; i += 2 {
		if f := rx.next("message"); f["payload"] != float64(i) {
			t.Fatalf("want message %d of the burst, got %v", i, f)
		}
	}
	for i := range n {
		if a := tx.next("ack"); a["to"] != to(i) || a["delivered"] != float64(1-i%2) {
			t.Fatalf("want the ack of message %d (to %s), got %v", i, to(i), a)
		}
	}
}

// TestWallFastReconnect: a client that drops its only socket and connects
// again at once, many times, is admitted every time, and its node stays
// findable: a member joining on another node sees it online.
func TestWallFastReconnect(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	b, c := m.join(), m.join()
	id := createCluster(t, b, `{"visibility":"public"}`)["cluster_id"].(string)
	var s *wsClient
	for i := range 30 {
		if s != nil {
			s.conn.CloseNow()
		}
		s = dialWall(t, b, id, q("agent", "cycler"))
		select {
		case f, ok := <-s.frames:
			if !ok || f["kind"] != "welcome" {
				t.Fatalf("cycle %d: %v (closed with %v)", i, f, s.status)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("cycle %d: no welcome", i)
		}
	}
	w := dialWall(t, c, id, q("agent", "other"))
	if f := w.next("welcome"); !slices.Contains(f["online"].([]any), any("cycler")) {
		t.Fatalf("a member joining on another node does not see the cycler: %v", f)
	}
}

// TestWallPayloadNotInflated: a payload full of characters JSON may
// escape for HTML ('<', '>', '&') crosses nodes byte for byte, at its own
// size, just under the frame limit.
func TestWallPayloadNotInflated(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	b, c := m.join(), m.join()
	id := createCluster(t, b, `{"visibility":"public"}`)["cluster_id"].(string)
	here := enterWall(t, b, id, q("agent", "here"))
	there := enterWall(t, c, id, q("agent", "there"))
	tx := enterWall(t, b, id, q("agent", "tx"))
	text := strings.Repeat("<&>", 20_000)
	tx.send(`{"payload":"` + text + `"}`)
	for _, rx := range []*wsClient{here, there} {
		f := rx.next("message")
		if f["payload"] != text || f["_bytes"].(int) > len(text)+200 {
			t.Fatalf("received a %v-byte frame, payload intact %v", f["_bytes"], f["payload"] == text)
		}
	}
	if a := tx.next("ack"); a["delivered"] != 2.0 {
		t.Fatalf("ack: %v", a)
	}
}

// TestWallDirectToSeveralAcrossNodes: a message to several handles reaches
// each addressed socket, on either node, with its own handle in "to", and
// nobody else; the ack counts them and echoes the list.
func TestWallDirectToSeveralAcrossNodes(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	b, c := m.join(), m.join()
	id := createCluster(t, b, `{"visibility":"public"}`)["cluster_id"].(string)
	clients := map[string]*wsClient{}
	for _, who := range []struct {
		n      *Node
		handle string
	}{{b, "alice"}, {b, "carol"}, {c, "bob"}, {c, "dave"}} {
		clients[who.handle] = dialWall(t, who.n, id, q("agent", who.handle))
		clients[who.handle].next("welcome")
	}
	clients["alice"].send(map[string]any{"to": []string{"bob", "carol", "nobody"}, "payload": "psst"})
	for _, h := range []string{"bob", "carol"} {
		if f := clients[h].next("message"); f["to"] != h || f["payload"] != "psst" || f["from"] != "alice" {
			t.Fatalf("%s got %v", h, f)
		}
	}
	if a := clients["alice"].next("ack"); a["delivered"] != 2.0 || fmt.Sprint(a["to"]) != "[bob carol nobody]" {
		t.Fatalf("ack: %v", a)
	}
	clients["dave"].quiet(300 * time.Millisecond)
}

// TestWallBadFramesAcrossNodes: a frame over 64 KiB and an empty "to" get
// an error frame and reach no node; an object with other keys crosses as
// content; the socket stays usable.
func TestWallBadFramesAcrossNodes(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	b, c := m.join(), m.join()
	id := createCluster(t, b, `{"visibility":"public"}`)["cluster_id"].(string)
	alice := enterWall(t, b, id, q("agent", "alice"))
	bob := enterWall(t, c, id, q("agent", "bob"))
	alice.send(`"` + strings.Repeat("x", 64<<10) + `"`)
	if e := alice.next("error"); e["code"] != "frame_too_large" {
		t.Fatalf("64 KiB frame: %v", e)
	}
	alice.send(`{"to":[],"payload":"to nobody, not to all"}`)
	if e := alice.next("error"); e["code"] != "empty_to" {
		t.Fatalf("empty to: %v", e)
	}
	alice.send(`{"kind":"note","to":"bob","payload":"x"}`)
	if f := bob.next("message"); f["to"] != nil || fmt.Sprint(f["payload"]) != "map[kind:note payload:x to:bob]" {
		t.Fatalf("an object with other keys: %v", f)
	}
	alice.next("ack")
	alice.send("still here")
	if f := bob.next("message"); f["payload"] != "still here" {
		t.Fatalf("after the refused frames bob got %v", f)
	}
}

// TestWallSlowConsumerAcrossNodes: a client on one node that stops reading
// is disconnected (1008) once its send queue fills, while a sender on
// another node and a reader next to it carry on. The sender is not rate
// limited: on loopback the kernel's buffers take tens of megabytes before
// the stuck socket's writes block, more than a limited sender sends within
// the test's deadline.
func TestWallSlowConsumerAcrossNodes(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	quick := func(cfg *Config) { cfg.Wall.AckWindow = 400 * time.Millisecond } // acks need not wait for the stuck socket long
	b := m.joinWith(func(cfg *Config) { quick(cfg); cfg.WallSocketRate, cfg.WallRoomRate = 0, 0 })
	c := m.joinWith(func(cfg *Config) { quick(cfg); cfg.Wall.SendQueue = 4 })
	id := createCluster(t, b, `{"visibility":"public"}`)["cluster_id"].(string)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	slow, _, err := websocket.Dial(ctx, wsURL(c, id, q("agent", "slow")), nil) // never reads
	if err != nil {
		t.Fatal(err)
	}
	defer slow.CloseNow()
	fast := enterWall(t, c, id, q("agent", "fast"))
	alice := enterWall(t, b, id, q("agent", "alice"))
	big := `"` + strings.Repeat("y", 60<<10) + `"`
	for gone := false; !gone; {
		if ctx.Err() != nil {
			t.Fatal("the slow consumer was never disconnected")
		}
		alice.send(big)
		fast.next("message")
		for f := range alice.frames {
			if f["kind"] == "presence" && f["agent"] == "slow" && f["status"] == "offline" {
				gone = true
			}
			if f["kind"] == "ack" {
				break
			}
		}
	}
	alice.send("after")
	if f := fast.next("message"); f["payload"] != "after" {
		t.Fatalf("the room stalled: %v", f)
	}
	for {
		if _, _, err := slow.Read(ctx); err != nil {
			// 1008 if the close frame got through the full buffers; a
			// client stuck that long may just see the connection end.
			if st := websocket.CloseStatus(err); st != websocket.StatusPolicyViolation && st != -1 {
				t.Fatalf("slow consumer closed with %v", st)
			}
			if ctx.Err() != nil {
				t.Fatal("the slow consumer's connection is still open")
			}
			return
		}
	}
}

// TestWallDeleteWithQueryTokenAcrossNodes: DELETE with ?token=<ak_> on one
// node closes the sockets on every node.
func TestWallDeleteWithQueryTokenAcrossNodes(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	b, c := m.join(), m.join()
	cl := createCluster(t, b, `{}`)
	id, tok := cl["cluster_id"].(string), cl["token"].(string)
	onB := enterWall(t, b, id, q("agent", "x", "token", tok))
	onC := enterWall(t, c, id, q("agent", "y", "token", tok))
	if st, v := call(t, c, "DELETE", "/v1/clusters/"+id+"?token="+tok, ""); st != 401 || v["code"] != "admin_token_required" {
		t.Fatalf("delete with ?token=ck_: %d %v", st, v)
	}
	if st, v := call(t, c, "DELETE", "/v1/clusters/"+id+"?token="+cl["admin_token"].(string), ""); st != 200 || v["ok"] != true {
		t.Fatalf("delete with ?token=ak_: %d %v", st, v)
	}
	for _, s := range []*wsClient{onB, onC} {
		if f := s.next("closed"); f["reason"] != "cluster deleted" {
			t.Fatalf("closed frame: %v", f)
		}
		<-s.done
		if s.status != websocket.StatusNormalClosure {
			t.Fatalf("closed with %v", s.status)
		}
	}
}

// TestWallLeaveAfterLastMessage: a member on another node that sends a
// message and leaves at once (as `mesh chat` does at the end of piped
// input) is never shown offline before its message: the leave waits for
// the messages sent before it. It is the node's goodbye while the member
// is its only socket in the cluster, then a leave delta. (A join and a
// leave that arrive together cancel out: the member may not be shown at
// all.)
func TestWallLeaveAfterLastMessage(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	b := m.join()
	id := createCluster(t, m.boot, `{"visibility":"public"}`)["cluster_id"].(string)
	rx := enterWall(t, m.boot, id, q("agent", "rx"))
	for i := range 30 {
		if i == 15 {
			enterWall(t, b, id, q("agent", "stayer"))
		}
		h := fmt.Sprintf("r%d", i)
		tx := enterWall(t, b, id, q("agent", h))
		tx.send("m " + h)
		tx.conn.Close(websocket.StatusNormalClosure, "")
		for {
			var f map[string]any
			select {
			case f = <-rx.frames:
			case <-time.After(10 * time.Second):
				t.Fatalf("%s: no message within 10s", h)
			}
			if f["kind"] == "presence" && f["agent"] == h && f["status"] == "offline" {
				t.Fatalf("%s shown offline before its message", h)
			}
			if f["kind"] == "message" && f["from"] == h {
				break
			}
		}
	}
}

// TestWallShutdownAfterLastMessages: a node shuts down while its members
// are sending; on the other nodes, none of their messages comes after
// they went offline (the goodbye names the room's last message, and
// nothing is published after it).
func TestWallShutdownAfterLastMessages(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	b := m.join()
	id := createCluster(t, m.boot, `{"visibility":"public"}`)["cluster_id"].(string)
	rx := enterWall(t, m.boot, id, q("agent", "rx"))
	var senders sync.WaitGroup
	for i := range 8 {
		tx := enterWall(t, b, id, q("agent", fmt.Sprint("tx", i)))
		senders.Go(func() {
			for n := 0; ; n++ {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				err := tx.conn.Write(ctx, websocket.MessageText, []byte(fmt.Sprint(`"`, n, `"`)))
				cancel()
				if err != nil {
					return
				}
				time.Sleep(22 * time.Millisecond) // within the socket's rate
			}
		})
	}
	online, offline, heard := map[string]bool{}, map[string]bool{}, map[string]bool{}
	take := func(f map[string]any) {
		h, _ := f["agent"].(string)
		if f["kind"] == "presence" && f["status"] == "online" {
			online[h] = true
		}
		if f["kind"] == "presence" && f["status"] == "offline" {
			offline[h] = true
		}
		if from, _ := f["from"].(string); f["kind"] == "message" {
			if offline[from] {
				t.Fatalf("a message of %s came after it went offline: %v", from, f)
			}
			heard[from] = true
		}
	}
	// Every sender is under way, and shown online here: a member that
	// joins within milliseconds of its node's end may be known here only
	// from its messages, and then goes offline only when the node's
	// presence times out.
	for len(heard) < 8 || len(online) < 8 {
		select {
		case f := <-rx.frames:
			take(f)
		case <-time.After(10 * time.Second):
			t.Fatalf("messages of %d of 8 senders came, %d shown online", len(heard), len(online))
		}
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	senders.Wait()
	// The goodbye may wait (the order window) for a message published as
	// the room closed; then every sender goes offline, and nothing of
	// theirs follows, however late.
	deadline := time.After(10 * time.Second)
	for len(offline) < 8 {
		select {
		case f := <-rx.frames:
			take(f)
		case <-deadline:
			t.Fatalf("%d of 8 senders shown offline", len(offline))
		}
	}
	for {
		select {
		case f := <-rx.frames:
			take(f)
		case <-time.After(time.Second):
			return
		}
	}
}
