package wall

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/gobwas/ws"
	"github.com/libp2p/go-libp2p"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/agentmesh/mesh/internal/clock"
	"github.com/agentmesh/mesh/internal/testkit"
	"github.com/agentmesh/mesh/p2p"
)

func TestFramesOnOneNode(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	id := h.create(`{"visibility":"public","name":"frames"}`)["cluster_id"].(string)
	alice := h.dial(id, vals("agent", "alice")).listen()
	alice.next(KindWelcome)
	bob := h.dial(id, vals("agent", "bob")).listen()
	bob.next(KindWelcome)
	carol := h.dial(id, vals("agent", "carol")).listen()
	carol.next(KindWelcome)

	// Several recipients: each sees itself in "to"; the ack echoes the list.
	alice.send(map[string]any{"to": []string{"bob", "carol", "nobody"}, "payload": "hi both"})
	for _, c := range []*client{bob, carol} {
		if f := c.next(KindMessage); f["payload"] != "hi both" || f["from"] != "alice" {
			t.Fatalf("multi: %v", f)
		}
	}
	if a := alice.next(KindAck); a["delivered"] != 2.0 || len(a["to"].([]any)) != 3 {
		t.Fatalf("multi ack: %v", a)
	}
	// An empty "to" is refused, never broadcast.
	alice.send(`{"to":[],"payload":"oops"}`)
	if e := alice.next(KindError); e["code"] != "empty_to" {
		t.Fatalf("empty to: %v", e)
	}
	// An object with other keys is content, broadcast whole.
	alice.send(`{"kind":"message","to":"bob","payload":"x"}`)
	f := carol.next(KindMessage)
	if p, ok := f["payload"].(map[string]any); !ok || p["kind"] != "message" || f["to"] != nil {
		t.Fatalf("content object: %v", f)
	}
	if f := bob.next(KindMessage); f["to"] != nil {
		t.Fatalf("content object reached bob as %v", f)
	}
	alice.next(KindAck)
	// Over 64 KB: an error frame, and the socket stays usable.
	alice.send(`"` + strings.Repeat("x", MaxFrame) + `"`)
	if e := alice.next(KindError); e["code"] != "frame_too_large" {
		t.Fatalf("big frame: %v", e)
	}
	alice.write(websocket.MessageBinary, []byte("bin"))
	if e := alice.next(KindError); e["code"] != "binary_frame" {
		t.Fatalf("binary frame: %v", e)
	}
	alice.send("still here")
	if f := bob.next(KindMessage); f["payload"] != "still here" {
		t.Fatalf("after errors: %v", f)
	}
	if a := alice.next(KindAck); a["delivered"] != 2.0 {
		t.Fatalf("ack after errors: %v", a)
	}
}

func TestConnectRefusedBeforeUpgrade(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	priv := h.create(`{}`)
	pub := h.create(`{"visibility":"public"}`)
	privID, pubID := priv["cluster_id"].(string), pub["cluster_id"].(string)
	for _, tc := range []struct {
		id, query string
		status    int
		code      string
	}{
		{pubID, "", 400, "invalid_request"},
		{pubID, "agent=", 400, "invalid_request"},
		{pubID, "agent=a%20b", 400, "invalid_request"},
		{pubID, "agent=a&vis=invisible", 400, "invalid_request"},
		{pubID, "agent=a&did=nope", 400, "invalid_request"},
		{pubID, "agent=a&token=ck_wrong", 401, "invalid_token"},
		{privID, "agent=a", 401, "token_required"},
		{privID, "agent=a&token=" + pub["token"].(string), 401, "invalid_token"},
		{"c_unknown", "agent=a", 404, "cluster_not_found"},
		{pubID, "agent=a", 426, "websocket_required"}, // a plain GET
	} {
		status, body := h.refusedUpgrade(tc.id, tc.query, tc.status != 426)
		if status != tc.status || body["code"] != tc.code || body["detail"] == "" {
			t.Errorf("%s?%s: %d %v, want %d %s", tc.id, tc.query, status, body, tc.status, tc.code)
		}
	}
	// The right credentials: the token, or the admin token, makes an owner.
	for _, tok := range []string{priv["token"].(string), priv["admin_token"].(string)} {
		c := h.dial(privID, vals("agent", "m", "token", tok)).listen()
		if w := c.next(KindWelcome); w["owner"] != true || w["public"] != false {
			t.Fatalf("welcome with a credential: %v", w)
		}
	}
	if w := h.dial(pubID, vals("agent", "guest")).listen().next(KindWelcome); w["owner"] != false {
		t.Fatalf("tokenless guest is an owner: %v", w)
	}
}

// TestClusterFullOnThisNode: a node holds at most maxRoster members of one
// cluster (other nodes take no larger roster from it): one more is refused
// before the upgrade with 503 cluster_full; another socket of a member, or
// a ghost, still comes in.
func TestClusterFullOnThisNode(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	id := h.create(`{"visibility":"public"}`)["cluster_id"].(string)
	h.dial(id, vals("agent", "alice")).listen().next(KindWelcome)
	room := h.svc.room(id)
	room.mu.Lock()
	for i := len(room.local); i < maxRoster; i++ {
		m := member{Agent: fmt.Sprintf("m%d", i), Vis: VisPublic}
		room.local[m.Agent] = &localMember{n: 1, m: m}
	}
	room.mu.Unlock()

	if status, body := h.refusedUpgrade(id, "agent=bob", true); status != 503 || body["code"] != "cluster_full" {
		t.Fatalf("a member past maxRoster: %d %v", status, body)
	}
	h.dial(id, vals("agent", "alice")).listen().next(KindWelcome)
	h.dial(id, vals("agent", "casper", "vis", VisGhost)).listen().next(KindWelcome)
}

// TestSlowConsumerDoesNotStallTheRoom: a client that stops reading is
// disconnected once its queue fills; the others keep chatting. The sender
// is not rate limited: the kernel's socket buffers take tens of megabytes
// on loopback before a write blocks, far more than a limited sender sends
// before the test's deadline.
func TestSlowConsumerDoesNotStallTheRoom(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) { c.SendQueue, c.AckWindow, c.SocketRate = 4, 200*time.Millisecond, 0 })
	id := h.create(`{"visibility":"public"}`)["cluster_id"].(string)
	slow := h.dial(id, vals("agent", "slow")) // never reads
	// The room admits a socket after the upgrade, in its own goroutine.
	testkit.Eventually(t, 10*time.Second, func() bool { return slowConnected(h, id) }, "the slow consumer never entered the room")
	alice := h.dial(id, vals("agent", "alice")).listen()
	alice.next(KindWelcome)
	bob := h.dial(id, vals("agent", "bob")).listen()
	bob.next(KindWelcome)
	big := `"` + strings.Repeat("y", MaxFrame-200) + `"` // with its envelope, within MaxFrame
	for sent := 0; slowConnected(h, id); sent++ {
		if sent == 1000 { // 64 MB, far past what loopback buffers take
			t.Fatal("the slow consumer was never disconnected")
		}
		alice.send(big)
		bob.next(KindMessage)
		alice.next(KindAck)
	}
	alice.send("after")
	if f := bob.next(KindMessage); f["payload"] != "after" {
		t.Fatalf("room stalled: %v", f)
	}
	if n := testutil.ToFloat64(h.svc.metrics.slow); n != 1 {
		t.Fatalf("slow consumers counted: %v", n)
	}
	// The server closed the connection (with 1008 when the client's
	// buffers let the close frame through; a stuck client just sees EOF).
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		if _, _, err := slow.conn.Read(ctx); err != nil {
			if ctx.Err() != nil {
				t.Fatal("the slow consumer's connection is still open")
			}
			break
		}
	}
}

func slowConnected(h *harness, id string) bool {
	r := h.svc.room(id)
	if r == nil {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.local["slow"]
	return ok
}

// TestGhostIsInvisibleAndUncounted: a ghost reads and sends, but is in no
// presence frame, welcome list, member list or ack count.
func TestGhostIsInvisibleAndUncounted(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	id := h.create(`{"visibility":"public"}`)["cluster_id"].(string)
	obs := h.dial(id, vals("agent", "obs")).listen()
	obs.next(KindWelcome)
	ghost := h.dial(id, vals("agent", "casper", "vis", VisGhost)).listen()
	if w := ghost.next(KindWelcome); len(w["online"].([]any)) != 1 {
		t.Fatalf("ghost's welcome: %v", w)
	}
	priv := h.dial(id, vals("agent", "secretive", "vis", VisPrivate)).listen()
	priv.next(KindWelcome)
	if p := obs.next(KindPresence); p["agent"] != "secretive" {
		t.Fatalf("first presence after a ghost joined: %v (the ghost was announced?)", p)
	}
	obs.send("hello all")
	if f := ghost.next(KindMessage); f["payload"] != "hello all" {
		t.Fatalf("ghost cannot read: %v", f)
	}
	if a := obs.next(KindAck); a["delivered"] != 1.0 {
		t.Fatalf("ack counts the ghost: %v", a)
	}
	ghost.send("boo")
	if f := obs.next(KindMessage); f["from"] != "casper" {
		t.Fatalf("ghost cannot send: %v", f)
	}
	st, v := h.call("GET", "/v1/clusters/"+id, "")
	c := v["cluster"].(map[string]any)
	if st != 200 || c["online"] != 2.0 || strings.Join(toStrings(c["members"]), ",") != "obs,s***" {
		t.Fatalf("external view: %d %v", st, v)
	}
	ghost.conn.Close(websocket.StatusNormalClosure, "")
	priv.conn.Close(websocket.StatusNormalClosure, "")
	if p := obs.next(KindPresence); p["agent"] != "secretive" || p["status"] != "offline" {
		t.Fatalf("after both left: %v", p)
	}
}

func toStrings(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}

func TestDeleteCredentials(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	for i, send := range []func(tok string) []string{
		func(tok string) []string { return []string{"X-Cluster-Token", tok} },
		func(tok string) []string { return []string{"Authorization", "Bearer " + tok} },
		nil, // ?token=
	} {
		cl := h.create(`{"visibility":"public","name":"d"}`)
		id := cl["cluster_id"].(string)
		del := func(tok string) (int, map[string]any) {
			if send == nil {
				return h.call("DELETE", "/v1/clusters/"+id+"?token="+tok, "")
			}
			return h.call("DELETE", "/v1/clusters/"+id, "", send(tok)...)
		}
		member := h.dial(id, vals("agent", "m")).listen()
		member.next(KindWelcome)
		if st, v := h.call("DELETE", "/v1/clusters/"+id, ""); st != 401 || v["code"] != "token_required" {
			t.Fatalf("%d: no token: %d %v", i, st, v)
		}
		if st, v := del(cl["token"].(string)); st != 401 || v["code"] != "admin_token_required" {
			t.Fatalf("%d: ck_ token: %d %v", i, st, v)
		}
		if st, v := del(newSecret(adminPrefix)); st != 401 || v["code"] != "invalid_token" {
			t.Fatalf("%d: another admin token: %d %v", i, st, v)
		}
		if st, v := del(cl["admin_token"].(string)); st != 200 || v["ok"] != true || v["cluster_id"] != id {
			t.Fatalf("%d: admin token: %d %v", i, st, v)
		}
		if f := member.next(KindClosed); f["reason"] != causeDeleted.reason {
			t.Fatalf("%d: closed frame: %v", i, f)
		}
		if st, _ := del(cl["admin_token"].(string)); st != 404 {
			t.Fatalf("%d: deleting twice: %d", i, st)
		}
		if _, resp, err := h.tryDial(id, vals("agent", "late")); err == nil || resp.StatusCode != 404 {
			t.Fatalf("%d: connect after delete: %v", i, resp)
		}
	}
	if st, v := h.call("DELETE", "/v1/clusters/c_nope", "", "X-Cluster-Token", newSecret(adminPrefix)); st != 404 {
		t.Fatalf("unknown cluster: %d %v", st, v)
	}
	if st, v := h.call("DELETE", "/v1/clusters/"+LobbyID, "", "X-Cluster-Token", newSecret(adminPrefix)); st != 401 {
		t.Fatalf("the lobby was deletable: %d %v", st, v)
	}
}

// TestSlugWhereverAnID: a public cluster's slug is taken wherever its id
// is (connect, history, delete), and the answers name the id. A private
// cluster has no slug: its name is none.
func TestSlugWhereverAnID(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	cl := h.create(`{"visibility":"public","name":"Tea Room"}`)
	id, tok, admin := cl["cluster_id"].(string), cl["token"].(string), cl["admin_token"].(string)
	ann := h.dial("tea-room", vals("agent", "ann")).listen()
	if w := ann.next(KindWelcome); w["cluster"] != id {
		t.Fatalf("welcome by slug: %v", w)
	}
	if st, v := h.call("GET", "/v1/clusters/tea-room/history", "", "X-Cluster-Token", tok); st != 200 || v["cluster_id"] != id {
		t.Fatalf("history by slug: %d %v", st, v)
	}
	if st, v := h.call("DELETE", "/v1/clusters/tea-room", "", "X-Cluster-Token", admin); st != 200 || v["cluster_id"] != id {
		t.Fatalf("delete by slug: %d %v", st, v)
	}
	if f := ann.next(KindClosed); f["reason"] != causeDeleted.reason {
		t.Fatalf("closed frame: %v", f)
	}
	for _, path := range []string{"/v1/clusters/tea-room", "/v1/clusters/tea-room/history", "/v1/clusters/" + id} {
		if st, v := h.call("GET", path, "", "X-Cluster-Token", tok); st != 404 || v["code"] != "cluster_not_found" {
			t.Fatalf("GET %s after the delete: %d %v", path, st, v)
		}
	}
	priv := h.create(`{"name":"secret"}`)
	if st, v := h.call("DELETE", "/v1/clusters/secret", "", "X-Cluster-Token", priv["admin_token"].(string)); st != 404 {
		t.Fatalf("a private cluster's name taken for a slug: %d %v", st, v)
	}
	if _, resp, err := h.tryDial("secret", vals("agent", "x", "token", priv["token"].(string))); err == nil || resp.StatusCode != 404 {
		t.Fatalf("connect by a private cluster's name: %v", resp)
	}
}

// TestClusterAnswersShape: the answers have the fields docs/api.md shows,
// whatever the cluster: a created cluster's metadata (empty if not given)
// and slug (null for a private one); a lookup's online and members (empty
// when nobody is); the lobby, never created, has no created_at.
func TestClusterAnswersShape(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	keys := func(v map[string]any) string { return fmt.Sprint(slices.Sorted(maps.Keys(v))) }
	const created = "[admin_token cluster_id created_at description name protocol slug token topic visibility ws]"
	for _, body := range []string{`{}`, `{"visibility":"public"}`, `{"name":"n","topic":"t","description":"d"}`} {
		if v := h.create(body); keys(v) != created {
			t.Fatalf("create %s: %v", body, v)
		}
	}
	if v := h.create(`{}`); v["slug"] != nil || v["description"] != "" || v["topic"] != "" || v["name"] != "" {
		t.Fatalf("create a private cluster: %v", v)
	}
	h.create(`{"visibility":"public","name":"Empty"}`)
	const view = "[boards_enabled created_at description id name protocol slug topic visibility ws]"
	_, v := h.call("GET", "/v1/clusters/empty", "")
	got := v["cluster"].(map[string]any)
	if got["online"] != 0.0 || fmt.Sprint(got["members"]) != "[]" || got["created_at"] == nil {
		t.Fatalf("lookup of a cluster nobody is in: %v", got)
	}
	_, v = h.call("GET", "/v1/clusters/lobby", "")
	if got := v["cluster"].(map[string]any); got["created_at"] != nil {
		t.Fatalf("the lobby's created_at: %v", got)
	}
	_, v = h.call("GET", "/v1/clusters", "")
	list := v["clusters"].([]any)
	if lobby := list[0].(map[string]any); keys(lobby) != strings.Replace(view, "created_at ", "", 1) {
		t.Fatalf("the lobby in the catalog: %v", lobby)
	}
	if c := list[1].(map[string]any); keys(c) != view {
		t.Fatalf("a cluster in the catalog: %v", c)
	}
	big := `{"name":"` + strings.Repeat("x", maxCreateBody) + `"}`
	if st, v := h.call("POST", "/v1/clusters", big); st != 413 || v["code"] != "body_too_large" {
		t.Fatalf("a body over %d bytes: %d %v", maxCreateBody, st, v)
	}
}

// TestClusterTextMustBeUTF8: a name, topic or description that is not
// UTF-8 is refused with 400, not stored with U+FFFD in its place.
func TestClusterTextMustBeUTF8(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	for _, body := range []string{
		"{\"visibility\":\"public\",\"name\":\"caf\xe9\"}",
		"{\"visibility\":\"public\",\"name\":\"n\",\"topic\":\"#\xff\"}",
		`{"name":"n","description":"\udc00"}`,
	} {
		if st, v := h.call("POST", "/v1/clusters", body); st != 400 || v["code"] != "invalid_json" {
			t.Fatalf("create %q: %d %v", body, st, v)
		}
	}
	_, v := h.call("GET", "/v1/clusters", "")
	if n := len(v["clusters"].([]any)); n != 1 {
		t.Fatalf("the catalog holds %d clusters, want only the lobby: %v", n, v)
	}
}

func TestHistoryIsOwnerOnly(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	for _, vis := range []string{Public, Private} {
		cl := h.create(`{"visibility":"` + vis + `"}`)
		id, tok := cl["cluster_id"].(string), cl["token"].(string)
		a := h.dial(id, vals("agent", "ann", "token", tok)).listen()
		a.next(KindWelcome)
		g := h.dial(id, vals("agent", "gus", "token", tok, "vis", VisGhost)).listen()
		g.next(KindWelcome)
		a.conn.Close(websocket.StatusNormalClosure, "")
		for _, cred := range []string{"", "ck_nope", newSecret(adminPrefix)} {
			if st, v := h.call("GET", "/v1/clusters/"+id+"/history?token="+cred, ""); st != 401 {
				t.Fatalf("%s history with %q: %d %v", vis, cred, st, v)
			}
		}
		for _, cred := range []string{tok, cl["admin_token"].(string)} {
			var events []any
			testkit.Eventually(t, 10*time.Second, func() bool {
				_, v := h.call("GET", "/v1/clusters/"+id+"/history", "", "X-Cluster-Token", cred)
				events = v["events"].([]any)
				return len(events) >= 2
			}, "%s history: %v", vis, events)
			if len(events) != 2 {
				t.Fatalf("%s history: %v", vis, events)
			}
			leave, join := events[0].(map[string]any), events[1].(map[string]any)
			if leave["event"] != "leave" || join["event"] != "join" || join["agent"] != "ann" || join["node"] != h.host.ID().String() {
				t.Fatalf("%s history (newest first, ghosts absent): %v", vis, events)
			}
		}
	}
}

// TestPeerFloodIsThrottled: what a node floods a cluster's topic with
// over the per-origin limit is dropped before any socket, and the flooder
// loses gossipsub score; so does a node sending malformed messages.
func TestPeerFloodIsThrottled(t *testing.T) {
	t.Parallel()
	const rate = 20
	h := newHarness(t, func(c *Config) { c.PeerRate = rate })
	id := h.create(`{"visibility":"public"}`)["cluster_id"].(string)
	alice := h.dial(id, vals("agent", "alice")).listen()
	alice.next(KindWelcome)
	room := h.svc.room(id)
	join := func() (*p2p.Host, *p2p.Topic) {
		p := rawPeer(t, h)
		topic, err := p.Join(topicName(id), p2p.TopicConfig{})
		if err != nil {
			t.Fatal(err)
		}
		awaitSubscribed(t, room, topic, p, h)
		return p, topic
	}
	ctx := context.Background()

	flooder, topic := join()
	const n = 400
	start := time.Now()
	for i := range n {
		w := wireMsg{T: wireMessage, ID: newMsgID(), From: "rogue", TS: int64(i + 1), Epoch: 1, Seq: uint64(i + 1), Payload: json.RawMessage(`"spam"`)}
		topic.Publish(ctx, encodeWire(nil, sealTopic, w))
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return room.topic.Dropped(p2p.DropRate) > 0 && h.host.PeerScore(flooder.ID()) < 0 },
		"the flood was not dropped, or cost the flooder nothing")
	got := alice.countUntilQuiet(KindMessage, time.Second)
	if most := 2*rate + rate*int(time.Since(start).Seconds()+1); got == 0 || got > most {
		t.Fatalf("alice got %d of %d flooded messages, want 1 to %d", got, n, most)
	}

	vandal, topic := join()
	topic.Publish(ctx, []byte("garbage"))
	testkit.Eventually(t, 10*time.Second, func() bool { return room.topic.Dropped(p2p.DropInvalid) == 1 && h.host.PeerScore(vandal.ID()) < 0 },
		"garbage was not rejected, or cost its sender nothing")
}

// TestFloodUnderMadeUpOrigins: a raw libp2p peer signing each message
// with a fresh key gets no fresh budget: what it forwards is bounded by
// its own limit, whatever the origins, and costs it score; the made-up
// origins hold no ack (acks wait only for nodes a roster exchange proved).
func TestFloodUnderMadeUpOrigins(t *testing.T) {
	t.Parallel()
	const rate = 20
	h := newHarness(t, func(c *Config) { c.RelayRate, c.AckWindow = rate, time.Minute })
	id := h.create(`{"visibility":"public"}`)["cluster_id"].(string)
	alice := h.dial(id, vals("agent", "alice")).listen()
	alice.next(KindWelcome)
	room := h.svc.room(id)

	raw, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ps, err := pubsub.NewGossipSub(ctx, raw)
	if err != nil {
		t.Fatal(err)
	}
	if err := raw.Connect(ctx, peer.AddrInfo{ID: h.host.ID(), Addrs: h.host.Libp2p().Addrs()}); err != nil {
		t.Fatal(err)
	}
	topic, err := ps.Join(topicName(id))
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return slices.Contains(topic.ListPeers(), h.host.ID()) }, "the raw peer never saw the node on the topic")

	const n = 400
	start := time.Now()
	for i := range n {
		key, _, err := crypto.GenerateEd25519Key(nil)
		if err != nil {
			t.Fatal(err)
		}
		origin, _ := peer.IDFromPrivateKey(key)
		w := wireMsg{T: wireMessage, ID: newMsgID(), From: "rogue", TS: int64(i + 1), Epoch: 1, Seq: 1, Payload: json.RawMessage(`"spam"`)}
		topic.Publish(ctx, encodeWire(nil, sealTopic, w), pubsub.WithSecretKeyAndPeerId(key, origin))
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return room.topic.Dropped(p2p.DropRate) > 0 && h.host.PeerScore(raw.ID()) < 0 },
		"the flood under made-up origins was not dropped, or cost its forwarder nothing")
	got := alice.countUntilQuiet(KindMessage, time.Second)
	if most := 2*rate + rate*int(time.Since(start).Seconds()+1); got == 0 || got > most {
		t.Fatalf("alice got %d of %d messages under made-up origins, want 1 to %d", got, n, most)
	}
	room.mu.Lock()
	views := len(room.remote)
	room.mu.Unlock()
	if views > maxStrangers {
		t.Fatalf("%d views of made-up origins", views)
	}
	alice.send("anyone real?")
	if a := alice.next(KindAck); a["delivered"] != 0.0 {
		t.Fatalf("ack: %v", a)
	}
}

// awaitSubscribed waits until room knows that raw peer p subscribes to its
// topic, and p's subscription topic (if any) that the room's node does:
// what either publishes before may reach nobody.
func awaitSubscribed(t *testing.T, room *room, topic *p2p.Topic, p *p2p.Host, h *harness) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := room.topic.AwaitPeer(ctx, p.ID()); err != nil {
		t.Fatalf("the room never saw the raw peer on the topic: %v", err)
	}
	if topic == nil {
		return
	}
	if err := topic.AwaitPeer(ctx, h.host.ID()); err != nil {
		t.Fatalf("the raw peer never saw the room on the topic: %v", err)
	}
}

// TestInvalidUTF8: a text frame that is not UTF-8 closes its socket with
// 1007 (RFC 6455); a peer's message whose payload is not UTF-8 is rejected
// before it reaches any socket.
func TestInvalidUTF8(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	id := h.create(`{"visibility":"public"}`)["cluster_id"].(string)
	alice := h.dial(id, vals("agent", "alice")).listen()
	alice.next(KindWelcome)
	bad := h.dial(id, vals("agent", "bad"))
	bad.write(websocket.MessageText, []byte("a\xffb"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		if _, _, err := bad.conn.Read(ctx); err != nil {
			if st := websocket.CloseStatus(err); st != websocket.StatusInvalidFramePayloadData {
				t.Fatalf("closed with %v (%v), want 1007", st, err)
			}
			break
		}
	}

	raw := rawPeer(t, h)
	topic, err := raw.Join(topicName(id), p2p.TopicConfig{})
	if err != nil {
		t.Fatal(err)
	}
	room := h.svc.room(id)
	awaitSubscribed(t, room, topic, raw, h)
	msg := func(payload string) []byte {
		return []byte(`{"t":"msg","id":"m` + payload + `","from":"rogue","ts":1,"epoch":1,"seq":1,"payload":"` + payload + `"}`)
	}
	if err := topic.Publish(ctx, msg("a\xffb")); err != nil {
		t.Fatal(err)
	}
	if err := topic.Publish(ctx, msg("fine")); err != nil {
		t.Fatal(err)
	}
	if f := alice.next(KindMessage); f["payload"] != "fine" {
		t.Fatalf("alice got %v", f)
	}
	// Validation runs on several workers: the bad message may be judged
	// after the good one was delivered.
	testkit.Eventually(t, 10*time.Second, func() bool { return room.topic.Dropped(p2p.DropInvalid) == 1 }, "the message that is not UTF-8 was not dropped as invalid")
}

// TestSendLimits: a socket over its rate, or in a cluster over its rate
// on this node, is slowed down, never refused: the node takes its frames
// at the rate (it stops reading the socket meanwhile), and every message
// is sent and acked.
func TestSendLimits(t *testing.T) {
	t.Parallel()
	// sendAll sends n messages from each of senders and counts, across
	// them, the acks and rate_limited errors that come back: each message
	// gets one or the other.
	sendAll := func(t *testing.T, n int, senders ...*client) (acks, limited int) {
		for _, c := range senders {
			for i := range n {
				c.send(map[string]any{"payload": i})
			}
		}
		for _, c := range senders {
			for answers := 0; answers < n; {
				switch f := c.nextOf(KindAck, KindError, KindMessage); {
				case f["kind"] == KindMessage: // another sender's
					continue
				case f["kind"] == KindAck:
					acks++
				case f["code"] == "rate_limited":
					limited++
				default:
					t.Fatalf("unexpected %v", f)
				}
				answers++
			}
		}
		return acks, limited
	}
	// paced checks that the node held frames back for limit, and that
	// only the rate let them through.
	paced := func(t *testing.T, h *harness, limit string) {
		t.Helper()
		if v := testutil.ToFloat64(h.svc.metrics.paced.WithLabelValues(limit)); v == 0 {
			t.Fatalf("mesh_wall_paced_total{limit=%s} counted nothing", limit)
		}
	}
	// The rates are far below how fast a node takes frames, loaded and
	// under -race: the buckets fill in real time (doc.go, One clock), so
	// a node slower than the rate would never pace (at 10 a second for 30
	// frames, a loaded -race run took them slower than that once).
	t.Run("socket rate", func(t *testing.T) {
		const rate, burst, n = 2, 1, 3 // paced unless 3 frames take a second
		h := newHarness(t, func(c *Config) { c.SocketRate, c.SocketBurst = rate, burst })
		id := h.create(`{"visibility":"public"}`)["cluster_id"].(string)
		c := h.dial(id, vals("agent", "chatty")).listen()
		c.next(KindWelcome)
		if acks, limited := sendAll(t, n, c); acks != n || limited != 0 {
			t.Fatalf("%d acks, %d rate_limited; want %d and 0", acks, limited, n)
		}
		paced(t, h, paceSocket)
	})
	t.Run("cluster rate", func(t *testing.T) {
		const rate, n = 1, 2 // bursts of 2*rate, shared by the two senders: paced unless 4 frames take 2 s
		h := newHarness(t, func(c *Config) { c.RoomRate = rate })
		id := h.create(`{"visibility":"public"}`)["cluster_id"].(string)
		a := h.dial(id, vals("agent", "a")).listen()
		a.next(KindWelcome)
		b := h.dial(id, vals("agent", "b")).listen()
		b.next(KindWelcome)
		if acks, limited := sendAll(t, n, a, b); acks != 2*n || limited != 0 {
			t.Fatalf("%d acks, %d rate_limited; want %d and 0", acks, limited, 2*n)
		}
		paced(t, h, paceCluster)
	})
	t.Run("paced socket is served", func(t *testing.T) {
		// While the node holds back the reading of a socket, the socket
		// gets what others send, its pings are answered once the frames
		// before them are taken, and the keepalive does not take it for
		// dead, though its pong waits behind its frames.
		const rate, n = 10, 25
		clk := clock.NewManual(time.Now())
		h := newHarness(t, func(c *Config) { c.SocketRate, c.SocketBurst, c.Clock = rate, 1, clk })
		id := h.create(`{"visibility":"public"}`)["cluster_id"].(string)
		other := h.dial(id, vals("agent", "other")).listen()
		other.next(KindWelcome)
		c := h.dial(id, vals("agent", "chatty")).listen()
		c.next(KindWelcome)
		for i := range n {
			c.send(map[string]any{"payload": i})
		}
		pinged := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			pinged <- c.conn.Ping(ctx)
		}()
		// Two keepalive pings while the rate holds the reader back: the
		// second as soon as the other socket answered the first (a frame
		// of chatty's read meanwhile is unlikely: one comes every 100 ms).
		sk := socketOf(h, "chatty")
		testkit.Eventually(t, 10*time.Second, sk.held.Load, "the rate never held the reader back")
		clk.Advance(DefaultPingInterval)
		testkit.Eventually(t, 10*time.Second, socketOf(h, "other").heard.Load, "the other socket did not answer the ping")
		clk.Advance(DefaultPingInterval)
		other.send("while you wait")
		acks := 0
		for got := false; !got; {
			switch f := c.nextOf(KindAck, KindMessage); f["kind"] {
			case KindAck:
				acks++
			case KindMessage:
				got = f["payload"] == "while you wait"
			}
		}
		if acks > n/2 {
			t.Fatalf("the message for the paced socket came after %d of its %d acks", acks, n)
		}
		for ; acks < n; acks++ {
			c.next(KindAck)
		}
		if err := <-pinged; err != nil {
			t.Fatalf("the paced socket's ping: %v", err)
		}
		c.send("still open")
		c.next(KindAck)
	})
	t.Run("unlimited", func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.SocketRate, c.RoomRate = 0, 0 })
		id := h.create(`{"visibility":"public"}`)["cluster_id"].(string)
		c := h.dial(id, vals("agent", "chatty")).listen()
		c.next(KindWelcome)
		n := 3 * burstOf(DefaultSocketRate)
		if acks, limited := sendAll(t, n, c); acks != n || limited != 0 {
			t.Fatalf("%d acks, %d rate_limited; want %d and 0", acks, limited, n)
		}
	})
	t.Run("answers awaited", func(t *testing.T) {
		h, c, clk := withMuteNode(t)
		sk := onlySocket(h)
		for i := range maxUnanswered + 10 {
			c.send(map[string]any{"payload": i})
		}
		// The socket is not read while maxUnanswered frames await answers.
		testkit.Eventually(t, 10*time.Second, func() bool { sk.mu.Lock(); defer sk.mu.Unlock(); return len(sk.unanswered) == maxUnanswered },
			"the socket's unanswered frames never reached the bound")
		time.Sleep(200 * time.Millisecond) // what is checked is that nothing more is read meanwhile
		sk.mu.Lock()
		n := len(sk.unanswered)
		sk.mu.Unlock()
		if n > maxUnanswered {
			t.Fatalf("%d frames await answers, over the bound %d", n, maxUnanswered)
		}
		acks := 0 // each ack waits its window, from when its frame was read
		testkit.Advance(t, 10*time.Second, clk, DefaultAckWindow, func() bool {
			for {
				select {
				case f := <-c.frames:
					if f["kind"] == KindAck && f["delivered"] != 0.0 {
						t.Fatalf("ack %d: %v", acks, f)
					}
					if f["kind"] == KindAck {
						acks++
					}
				default:
					return acks == maxUnanswered+10
				}
			}
		}, "%d of %d acks came", acks, maxUnanswered+10)
	})
	t.Run("answers in order", func(t *testing.T) {
		h, c, clk := withMuteNode(t)
		sk := onlySocket(h)
		c.send("held back by the mute node")
		c.send(`{"to":[],"payload":"refused at once"}`)
		testkit.Eventually(t, 10*time.Second, func() bool { sk.mu.Lock(); defer sk.mu.Unlock(); return len(sk.unanswered) == 2 },
			"the refusal is not queued behind the ack")
		clk.Advance(DefaultAckWindow)
		if f := <-c.frames; f["kind"] != KindAck {
			t.Fatalf("the refusal overtook the ack: %v", f)
		}
		c.next(KindError)
	})
}

// withMuteNode is a node with a socket c in a public cluster that another
// node serves without ever sending receipts: every ack waits the window
// (DefaultAckWindow), which passes as the test moves the node's clock.
func withMuteNode(t *testing.T) (*harness, *client, *clock.Manual) {
	t.Helper()
	clk := clock.NewManual(time.Now())
	h := newHarness(t, func(c *Config) { c.SocketRate, c.Clock = 0, clk })
	id := h.create(`{"visibility":"public"}`)["cluster_id"].(string)
	c := h.dial(id, vals("agent", "c")).listen()
	c.next(KindWelcome)
	mute := rawPeer(t, h)
	_, err := mute.Join(topicName(id), p2p.TopicConfig{})
	if err != nil {
		t.Fatal(err)
	}
	room := h.svc.room(id)
	awaitSubscribed(t, room, nil, mute, h)
	exchangeRoster(t, mute, h, id, roster{Epoch: 1})
	return h, c, clk
}

// exchangeRoster has raw peer p tell h's room of cluster id that it serves
// the cluster with roster ro, as a node starting its room does (registered
// at the rendezvous first): h knows p from then on.
func exchangeRoster(t *testing.T, p *p2p.Host, h *harness, id string, ro roster) {
	t.Helper()
	ctx := context.Background()
	if _, err := p.Rendezvous(ctx, topicName(id), true); err != nil {
		t.Fatalf("registering at the rendezvous: %v", err)
	}
	req := encodeWire(nil, "", rosterRequest{Cluster: id, Body: encodeWire(nil, sealRosterReq, ro)})
	if _, err := p.Request(ctx, h.host.ID(), rosterProto, req, maxRosterResp); err != nil {
		t.Fatalf("roster exchange: %v", err)
	}
}

// socketOf is the harness's socket of handle.
func socketOf(h *harness, handle string) *socket {
	h.t.Helper()
	for _, sk := range h.svc.allSockets() {
		if sk.handle == handle {
			return sk
		}
	}
	h.t.Fatalf("no socket of %s", handle)
	return nil
}

// onlySocket is the one socket of the harness's one room.
func onlySocket(h *harness) *socket {
	for _, sk := range h.svc.allSockets() {
		return sk
	}
	h.t.Fatal("no socket")
	return nil
}

// TestKeepalive: the server answers a client's pings and pings its
// sockets every PingInterval: one that answers stays, one that does not
// is closed at the next ping.
func TestKeepalive(t *testing.T) {
	t.Parallel()
	clk := clock.NewManual(time.Now())
	h := newHarness(t, func(c *Config) { c.Clock = clk })
	id := h.create(`{"visibility":"public"}`)["cluster_id"].(string)
	mute := h.dial(id, vals("agent", "mute")) // never reads, so never answers
	alive := h.rawDial(id, vals("agent", "alive"))
	alive.Write(clientFrame(true, ws.OpPing, []byte("hi")))
	if f := alive.nextControl(t); f.Header.OpCode != ws.OpPong || string(f.Payload) != "hi" {
		t.Fatalf("the server answered a ping with %v %q", f.Header.OpCode, f.Payload)
	}
	sk := socketOf(h, "alive")
	for i := range 3 { // mute goes at the second ping; alive answers each
		clk.Advance(DefaultPingInterval)
		if f := alive.nextControl(t); f.Header.OpCode != ws.OpPing {
			t.Fatalf("ping %d: got %v", i+1, f.Header.OpCode)
		}
		alive.Write(clientFrame(true, ws.OpPong, nil))
		testkit.Eventually(t, 10*time.Second, sk.heard.Load, "the node never read pong %d", i+1)
	}
	alive.Write(clientFrame(true, ws.OpText, []byte(`"still here"`)))
	testkit.Eventually(t, 10*time.Second, func() bool { return testutil.ToFloat64(h.svc.metrics.messages) == 1 }, "the answering socket was closed")
	wantClosedFor(t, h, "keepalive", 1, "sockets closed for an unanswered ping")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for { // what it was sent before, then the close
		if _, _, err := mute.conn.Read(ctx); err != nil {
			if websocket.CloseStatus(err) != websocket.StatusGoingAway {
				t.Fatalf("the mute socket: %v, want closed with 1001", err)
			}
			return
		}
	}
}

// TestSocketOfADeletedCluster: a socket upgraded while its cluster was
// being deleted (looked up before the delete, entering after the delete
// hook ran) starts no room in the deleted cluster: it gets the closed
// frame and close 1000, like the cluster's other sockets.
func TestSocketOfADeletedCluster(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	created := h.create(`{"visibility":"public"}`)
	id := created["cluster_id"].(string)
	cl, err := h.cat.Get(id) // the connect's lookup, before the delete
	if err != nil {
		t.Fatal(err)
	}
	if st, v := h.call("DELETE", "/v1/clusters/"+id, "", "X-Cluster-Token", created["admin_token"].(string)); st != 200 {
		t.Fatalf("delete: %d %v", st, v)
	}
	h.lateSocketClosed(cl, causeDeleted)
	if h.svc.room(id) != nil {
		t.Fatal("a room of the deleted cluster runs")
	}
}

// lateSocketClosed serves a socket that joined cl as looked up before a
// change took it from the room (a delete, a change to private), and
// checks the socket gets a closed frame naming cause, then a normal close.
func (h *harness) lateSocketClosed(cl *Cluster, cause *closeCause) {
	t := h.t
	t.Helper()
	server, client := net.Pipe()
	t.Cleanup(func() { client.Close() })
	sk := newSocket(&wsConn{conn: server, rd: server}, h.svc, joinQuery{agent: "late", vis: VisPublic})
	go h.svc.serveSocket(cl, "", sk)

	client.SetDeadline(time.Now().Add(10 * time.Second))
	f, err := ws.ReadFrame(client)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	json.Unmarshal(f.Payload, &got)
	if got["kind"] != KindClosed || got["reason"] != cause.reason {
		t.Fatalf("the socket got %s", f.Payload)
	}
	if f, err = ws.ReadFrame(client); err != nil || f.Header.OpCode != ws.OpClose {
		t.Fatalf("then %v %v, want a close frame", f.Header, err)
	}
	if code, _ := ws.ParseCloseFrameData(f.Payload); code != ws.StatusNormalClosure {
		t.Fatalf("close code %d, want 1000", code)
	}
}
