package wall

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gobwas/ws"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/time/rate"

	"github.com/agentmesh/mesh/internal/clock"
	"github.com/agentmesh/mesh/internal/testkit"
	"github.com/agentmesh/mesh/p2p"
)

// rawConn is a WebSocket client that writes frames byte for byte, as a
// hostile or broken client would.
type rawConn struct {
	net.Conn
	r io.Reader
}

func (h *harness) rawDial(id string, q url.Values) *rawConn {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	u := "ws" + strings.TrimPrefix(h.srv.URL, "http") + "/v1/clusters/" + id + "/ws?" + q.Encode()
	conn, br, _, err := ws.Dial(ctx, u)
	if err != nil {
		h.t.Fatalf("dial: %v", err)
	}
	h.t.Cleanup(func() { conn.Close() })
	c := &rawConn{Conn: conn, r: conn}
	if br != nil { // what came with the handshake's answer
		c.r = io.MultiReader(br, conn)
	}
	return c
}

// closeCode reads frames until the node's close frame and returns its
// code; it fails the test if the connection ends without one.
func (c *rawConn) closeCode(t *testing.T) ws.StatusCode {
	t.Helper()
	code, _ := ws.ParseCloseFrameData(c.nextWhere(t, "close", func(op ws.OpCode) bool { return op == ws.OpClose }).Payload)
	return code
}

// nextControl reads frames until a control frame, which it returns.
func (c *rawConn) nextControl(t *testing.T) ws.Frame {
	t.Helper()
	return c.nextWhere(t, "control", ws.OpCode.IsControl)
}

// nextWhere reads frames until one whose opcode is, by is, what.
func (c *rawConn) nextWhere(t *testing.T, what string, is func(ws.OpCode) bool) ws.Frame {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		f, err := ws.ReadFrame(c.r)
		if err != nil {
			t.Fatalf("no %s frame: %v", what, err)
		}
		if is(f.Header.OpCode) {
			return f
		}
	}
}

// wantClosedFor waits until n sockets of h are counted closed for reason
// (what sockets closed for): a socket is counted just after its close
// frame goes out.
func wantClosedFor(t *testing.T, h *harness, reason string, n float64, what string) {
	t.Helper()
	testkit.Eventually(t, 10*time.Second, func() bool { return closedFor(h, reason) == n }, "%s: never %v", what, n)
}

func closedFor(h *harness, reason string) float64 {
	return testutil.ToFloat64(h.svc.metrics.closed.WithLabelValues(reason))
}

// TestPingFlood: a client that floods pings and never reads is closed
// (1008) as soon as it passes the control frame rate, and the node holds
// no queue of pongs for it meanwhile (at most one is due).
func TestPingFlood(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	id := h.create(`{"visibility":"public"}`)["cluster_id"].(string)
	c := h.rawDial(id, vals("agent", "x", "vis", "ghost"))
	if tcp, ok := c.Conn.(*net.TCPConn); ok {
		tcp.SetReadBuffer(4096)
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return len(h.svc.allSockets()) == 1 }, "the socket never entered the room")
	sk := h.svc.allSockets()[0]
	batch := bytes.Repeat(clientFrame(true, ws.OpPing, bytes.Repeat([]byte("p"), 125)), 100)
	c.SetWriteDeadline(time.Now().Add(20 * time.Second)) // bounds the flood: a socket still open by then fails below
	for {
		if _, err := c.Write(batch); err != nil {
			break // the node hung up
		}
	}
	wantClosedFor(t, h, "control_flood", 1, "sockets closed for a control flood")
	sk.mu.Lock()
	queued := len(sk.queue)
	sk.mu.Unlock()
	if queued > 0 {
		t.Fatalf("%d frames still queued for the closed socket", queued)
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return h.svc.sendMemory.used.Load() == 0 }, "the node still counts bytes queued for the closed socket")
}

// TestControlFrames: a client that pings now and then is answered, each
// time; one that sends more control frames at once than the burst of the
// control rate is closed with 1008.
func TestControlFrames(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	id := h.create(`{"visibility":"public"}`)["cluster_id"].(string)
	calm := h.dial(id, vals("agent", "calm")).listen()
	calm.next(KindWelcome)
	const burst = 2 * DefaultControlRate
	for range burst + 5 { // more than a burst, spread out
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := calm.conn.Ping(ctx); err != nil {
			t.Fatalf("ping: %v", err)
		}
		cancel()
		time.Sleep(time.Second / DefaultControlRate) // the pace of a client within the rate
	}
	calm.send("still here")
	calm.next(KindAck)

	c := h.rawDial(id, vals("agent", "busy"))
	c.Write(bytes.Repeat(clientFrame(true, ws.OpPing, []byte("p")), burst+1))
	if code := c.closeCode(t); code != ws.StatusPolicyViolation {
		t.Fatalf("close code %d, want 1008", code)
	}
	wantClosedFor(t, h, "control_flood", 1, "sockets closed for a control flood")
}

// TestCloseCodes: the node echoes a client's valid close code and answers
// an invalid one with 1002 (RFC 6455 7.4), a reason that is not UTF-8
// with 1007.
func TestCloseCodes(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	id := h.create(`{"visibility":"public"}`)["cluster_id"].(string)
	for _, tc := range []struct {
		name    string
		payload []byte
		want    ws.StatusCode
	}{
		{"normal", ws.NewCloseFrameBody(1000, "bye"), 1000},
		{"going away", ws.NewCloseFrameBody(1001, ""), 1001},
		{"application", ws.NewCloseFrameBody(3000, ""), 3000},
		{"private", ws.NewCloseFrameBody(4999, ""), 4999},
		{"no code", nil, 1000},
		{"999", ws.NewCloseFrameBody(999, ""), 1002},
		{"0", ws.NewCloseFrameBody(0, ""), 1002},
		{"1004", ws.NewCloseFrameBody(1004, ""), 1002},
		{"1005 (reserved)", ws.NewCloseFrameBody(1005, ""), 1002},
		{"1006 (reserved)", ws.NewCloseFrameBody(1006, ""), 1002},
		{"1016", ws.NewCloseFrameBody(1016, ""), 1002},
		{"2999", ws.NewCloseFrameBody(2999, ""), 1002},
		{"5000", ws.NewCloseFrameBody(5000, ""), 1002},
		{"one byte", []byte{3}, 1002},
		{"reason not UTF-8", ws.NewCloseFrameBody(1000, "\xff"), 1007},
	} {
		c := h.rawDial(id, vals("agent", "closer"))
		c.Write(clientFrame(true, ws.OpClose, tc.payload))
		if code := c.closeCode(t); code != tc.want {
			t.Errorf("%s: answered %d, want %d", tc.name, code, tc.want)
		}
	}
	wantClosedFor(t, h, "protocol", 9, "sockets closed for a protocol error")
}

// TestSendMemory: past the node's send memory, a socket that has frames
// waiting is closed as a slow consumer (1008), while one that keeps up
// gets every frame; a frame several sockets wait for counts once.
func TestSendMemory(t *testing.T) {
	t.Parallel()
	const size = 30 << 10
	h := newHarness(t, func(c *Config) { c.SendMemory = 100 << 10 })
	newPiped := func(name string) (*socket, net.Conn) {
		server, client := net.Pipe() // a write blocks until the client reads
		t.Cleanup(func() { client.Close() })
		return newSocket(&wsConn{conn: server, rd: server}, h.svc, joinQuery{agent: name, vis: VisPublic}), client
	}
	stuck, _ := newPiped("stuck")
	stuck2, _ := newPiped("stuck2")
	keen, kc := newPiped("keen")
	read := make(chan int, 16)
	go func() {
		br := bufio.NewReader(kc)
		for {
			f, err := ws.ReadFrame(br)
			if err != nil {
				close(read)
				return
			}
			read <- len(f.Payload)
		}
	}()
	for i := range 4 {
		f := text(bytes.Repeat([]byte{'a' + byte(i)}, size))
		for _, sk := range []*socket{stuck, stuck2, keen} {
			sk.send(f)
		}
		if n := <-read; n != size {
			t.Fatalf("the keen socket read %d bytes, want %d", n, size)
		}
		testkit.Eventually(t, 10*time.Second, func() bool { keen.mu.Lock(); defer keen.mu.Unlock(); return len(keen.queue)+keen.writing == 0 },
			"the keen socket's writer never finished")
		if used := h.svc.sendMemory.used.Load(); used > int64(i+1)*(size+3*frameCost) {
			t.Fatalf("after %d frames for 3 sockets, %d bytes counted: a shared frame counts once", i+1, used)
		}
	}
	for _, sk := range []*socket{stuck, stuck2} {
		if code, _ := ws.ParseCloseFrameData(sk.bye); !sk.closed || code != ws.StatusPolicyViolation {
			t.Fatalf("%s: closed %v with %d, want closed with 1008", sk.handle, sk.closed, code)
		}
	}
	if keen.closed {
		t.Fatal("the socket that kept up was closed")
	}
	wantClosedFor(t, h, "send_memory", 2, "sockets closed for the send memory")
	testkit.Eventually(t, 10*time.Second, func() bool { return h.svc.sendMemory.used.Load() == 0 }, "bytes still counted once every frame was written or dropped")
}

// TestMessageFrameWithin64KiB: the frame a peer receives is at most 64
// KiB, envelope included: a sender may send a payload of 65,536 bytes
// less the envelope docs/api.md gives (a broadcast: 66 bytes and the
// sender's handle as a JSON string; a direct message: 62 bytes and both
// handles as JSON strings), and no more; the error frame says how much.
func TestMessageFrameWithin64KiB(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	id := h.create(`{"visibility":"public"}`)["cluster_id"].(string)
	alice := h.dial(id, vals("agent", "alice")).listen()
	alice.next(KindWelcome)
	bob := h.dial(id, vals("agent", "bob")).listen()
	bob.next(KindWelcome)

	// A 65,536-byte frame leaves no room for the envelope.
	alice.send(`{"payload":"` + strings.Repeat("x", MaxFrame-14) + `"}`)
	want := MaxFrame - 66 - len(`"alice"`)
	if e := alice.next(KindError); e["code"] != "frame_too_large" || !strings.Contains(e["detail"].(string), fmt.Sprintf("at most %d bytes of payload", want)) {
		t.Fatalf("a 65,536-byte frame: %v", e)
	}
	payload := func(n int) string { return `"` + strings.Repeat("y", n-2) + `"` } // a JSON string of n bytes
	for _, tc := range []struct {
		to  any
		max int
	}{
		{nil, want},
		{"bob", MaxFrame - 62 - len(`"alice"`) - len(`"bob"`)},
	} {
		alice.send(map[string]any{"to": tc.to, "payload": json.RawMessage(payload(tc.max + 1))})
		if e := alice.next(KindError); e["code"] != "frame_too_large" {
			t.Fatalf("to %v, a payload of %d bytes: %v", tc.to, tc.max+1, e)
		}
		alice.send(map[string]any{"to": tc.to, "payload": json.RawMessage(payload(tc.max))})
		if f := bob.next(KindMessage); f["_bytes"] != MaxFrame {
			t.Fatalf("to %v, a payload of %d bytes reached bob as a frame of %v bytes, want %d", tc.to, tc.max, f["_bytes"], MaxFrame)
		}
		alice.next(KindAck)
	}
}

// TestSpectators: on a private cluster, a ghost (every socket there holds
// the token) sees every direct message, as the frame of each addressed
// handle; members see only those to them; a spectator is not counted.
func TestSpectators(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	cl := h.create(`{}`)
	id, tok := cl["cluster_id"].(string), cl["token"].(string)
	join := func(agent, vis string) *client {
		c := h.dial(id, vals("agent", agent, "vis", vis, "token", tok)).listen()
		c.next(KindWelcome)
		return c
	}
	alice, bob, carol := join("alice", VisPublic), join("bob", VisPrivate), join("carol", VisPublic)
	spy := join("spy", VisGhost)

	alice.send(map[string]any{"to": "bob", "payload": "psst"})
	if f := bob.next(KindMessage); f["to"] != "bob" {
		t.Fatalf("bob got %v", f)
	}
	if f := spy.next(KindMessage); f["to"] != "bob" || f["from"] != "alice" || f["payload"] != "psst" {
		t.Fatalf("the spectator got %v", f)
	}
	if a := alice.next(KindAck); a["delivered"] != 1.0 {
		t.Fatalf("ack: %v", a)
	}
	alice.send(map[string]any{"to": []string{"carol", "bob", "nobody"}, "payload": "all of you"})
	var tos []any
	for range 2 {
		tos = append(tos, spy.next(KindMessage)["to"])
	}
	if fmt.Sprint(tos) != "[carol bob]" { // not to nobody, who is not here: what addressees get
		t.Fatalf("the spectator saw the message to %v, want to each of carol and bob", tos)
	}
	if a := alice.next(KindAck); a["delivered"] != 2.0 {
		t.Fatalf("ack: %v", a)
	}
	bob.next(KindMessage)
	carol.next(KindMessage)
	alice.send("everyone")
	for _, c := range []*client{bob, carol, spy} {
		if f := c.next(KindMessage); f["payload"] != "everyone" {
			t.Fatalf("%v", f)
		}
	}
	// carol saw neither direct message to bob, nor the spectator anything twice.
	carol.send("done")
	spy.next(KindMessage)
	if n := carol.countUntilQuiet(KindMessage, 200*time.Millisecond) + spy.countUntilQuiet(KindMessage, 0); n != 0 {
		t.Fatalf("%d messages too many", n)
	}

	// On a public cluster a ghost is no spectator, even with the token.
	pub := h.create(`{"visibility":"public"}`)
	pid := pub["cluster_id"].(string)
	a := h.dial(pid, vals("agent", "a")).listen()
	a.next(KindWelcome)
	b := h.dial(pid, vals("agent", "b")).listen()
	b.next(KindWelcome)
	g := h.dial(pid, vals("agent", "g", "vis", "ghost", "token", pub["token"].(string))).listen()
	g.next(KindWelcome)
	a.send(map[string]any{"to": "b", "payload": "between us"})
	b.next(KindMessage)
	a.send("aloud")
	if f := g.next(KindMessage); f["payload"] != "aloud" {
		t.Fatalf("the public cluster's ghost saw %v", f)
	}
}

// TestStrangerNamesNoDID: a message a stranger peer publishes on a
// cluster's topic (a key no node checked: no roster exchange proved it
// serves the cluster) reaches the sockets with the handle it chose, but
// never with a did, whatever it claims; a member's did, as its socket gave
// it, is passed on.
func TestStrangerNamesNoDID(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	id := h.create(`{"visibility":"public"}`)["cluster_id"].(string)
	alice := h.dial(id, vals("agent", "alice")).listen()
	alice.next(KindWelcome)
	room := h.svc.room(id)
	raw := rawPeer(t, h)
	topic, err := raw.Join(topicName(id), p2p.TopicConfig{})
	if err != nil {
		t.Fatal(err)
	}
	awaitSubscribed(t, room, topic, raw, h)
	forged := encodeWire(nil, sealTopic, wireMsg{T: wireMessage, ID: newMsgID(), From: "bank", FromDID: "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK",
		TS: time.Now().UnixMilli(), Epoch: 1, Seq: 1, Payload: json.RawMessage(`"send me your keys"`)})
	// Fields a node never sends, claiming a check no node made.
	forged = append(bytes.TrimSuffix(forged, []byte("}")), []byte(`,"from_did_verified":true,"verified":true}`)...)
	if err := topic.Publish(context.Background(), forged); err != nil {
		t.Fatal(err)
	}
	f := alice.next(KindMessage)
	if f["from"] != "bank" || f["payload"] != "send me your keys" {
		t.Fatalf("alice got %v", f)
	}
	for _, k := range []string{"from_did", "from_did_verified", "verified"} {
		if v, ok := f[k]; ok {
			t.Fatalf("a stranger's message arrived with %s %v: %v", k, v, f)
		}
	}

	bob := h.dial(id, vals("agent", "bob", "did", "did:key:z6MkBob")).listen()
	bob.next(KindWelcome)
	bob.send("hi")
	if f := alice.next(KindMessage); f["from_did"] != "did:key:z6MkBob" {
		t.Fatalf("a member's message: %v", f)
	}
}

// TestSlowSenderIsDismissed: a client that sends and never reads, whose
// reader the node holds back until its answers are written, is closed as
// a slow consumer once its queue is full, and goes offline at once.
func TestSlowSenderIsDismissed(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) { c.SendQueue, c.SocketRate = 4, 0 })
	id := h.create(`{"visibility":"public"}`)["cluster_id"].(string)
	alice := h.dial(id, vals("agent", "alice")).listen()
	alice.next(KindWelcome)
	c := h.rawDial(id, vals("agent", "slow"))
	if tcp, ok := c.Conn.(*net.TCPConn); ok {
		tcp.SetReadBuffer(4096)
	}
	alice.next(KindPresence)
	sk := socketOf(h, "slow")
	big := `"` + strings.Repeat("y", 60<<10) + `"`
	// Fill the connection until the node's writes to it block.
	stuck := func() bool { sk.mu.Lock(); defer sk.mu.Unlock(); return sk.writing > 0 && len(sk.queue) > 0 }
	for sent := 0; !stuck(); sent++ {
		if sent == 1000 { // 60 MB, far past what loopback buffers take
			t.Fatal("the node's writes to the slow socket never blocked")
		}
		alice.send(big)
		alice.next(KindAck)
	}
	// It sends (to nobody, which alice's small queue could not take at
	// once): its answers cannot be written, so the node stops reading it.
	c.Write(bytes.Repeat(clientFrame(true, ws.OpText, []byte(`{"to":"nobody","payload":"x"}`)), maxUnanswered+10))
	testkit.Eventually(t, 10*time.Second, func() bool {
		sk.mu.Lock()
		defer sk.mu.Unlock()
		return len(sk.unanswered)+sk.answers+sk.answering >= maxUnanswered
	}, "the slow socket's reader never waited for its answers")
	for range 4 { // its queue fills
		alice.send(big)
	}
	timeout := time.After(5 * time.Second)
	for {
		select {
		case f := <-alice.frames:
			if f["kind"] == KindPresence && f["agent"] == "slow" && f["status"] == "offline" {
				return
			}
		case <-timeout:
			t.Fatal("the slow sender, closed, is still online")
		}
	}
}

// TestAPingRightAfterAHeldReadKeepsTheSocket: a keepalive ping that comes
// after the node held a socket's reader back for a rate, before the
// reader took its next frame, does not close the socket: its pong may be
// among the frames the node did not read.
func TestAPingRightAfterAHeldReadKeepsTheSocket(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) { c.Clock = clock.NewManual(time.Now()) })
	id := h.create(`{"visibility":"public"}`)["cluster_id"].(string)
	mute := h.dial(id, vals("agent", "mute")) // reads its welcome, then nothing: it never answers
	if _, _, err := mute.conn.Read(context.Background()); err != nil {
		t.Fatal(err)
	}
	sk := socketOf(h, "mute")
	sk.ping()
	lim := rate.NewLimiter(rate.Every(50*time.Millisecond), 1)
	lim.Allow()
	if !sk.pace(lim, nil, paceSocket) {
		t.Fatal("the socket closed while its reader was held")
	}
	sk.ping()
	if n := closedFor(h, "keepalive"); n != 0 {
		t.Fatalf("%v sockets closed for an unanswered ping right after their reader was held", n)
	}
}
