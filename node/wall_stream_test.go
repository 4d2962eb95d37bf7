package node

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/agentmesh/mesh/internal/testkit"
)

// delta is a streamed answer's piece, as the spec's streaming convention
// (spec 2.3) has it.
type delta struct {
	Type   string `json:"type"`
	Stream string `json:"stream"`
	Seq    int    `json:"seq"`
	Delta  string `json:"delta"`
	Done   bool   `json:"done,omitempty"`
}

// TestWallStreamsArriveWhole: an agent streaming an answer (spec 2.3)
// through nodes with their default settings: a burst of 300 deltas
// written as fast as the client writes, then 100 deltas a second for
// 15 s, reach the reader whole and in order, done included, and the
// sender gets an ack for each and no error frame; on one node and across
// two.
func TestWallStreamsArriveWhole(t *testing.T) { // not parallel: it streams in real time, which other tests' load would delay past the ordering window
	testkit.Slow(t, "15 s of streaming (TestWallMessageOrderAcrossNodes covers the order in the fast loop)")
	for _, across := range []bool{false, true} {
		t.Run(map[bool]string{false: "one node", true: "two nodes"}[across], func(t *testing.T) {
			t.Parallel()
			m := newMesh(t)
			b := m.join()
			at := b
			if across {
				at = m.join()
			}
			id := createCluster(t, b, `{"visibility":"public"}`)["cluster_id"].(string)
			rx := enterWall(t, at, id, q("agent", "reader"))
			tx := enterWall(t, b, id, q("agent", "agent"))
			streamDeltas(t, tx, rx, "burst", 300, 0)
			streamDeltas(t, tx, rx, "steady", 1500, 10*time.Millisecond)
		})
	}
}

// streamDeltas has tx stream n deltas of stream id, one every interval (0:
// all at once), and checks that rx gets them all in order and tx an ack
// of 1 delivery for each. It logs the acks' delays after each delta was
// due to be sent.
func streamDeltas(t *testing.T, tx, rx *wsClient, id string, n int, every time.Duration) {
	t.Helper()
	start := time.Now()
	due := func(i int) time.Time { return start.Add(time.Duration(i) * every) }
	failed := make(chan error, 1)
	go func() {
		for i := range n {
			time.Sleep(time.Until(due(i)))
			b, _ := json.Marshal(map[string]any{"payload": delta{Type: "message", Stream: id, Seq: i, Delta: fmt.Sprintf("tok%d ", i), Done: i == n-1}})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := tx.conn.Write(ctx, websocket.MessageText, b)
			cancel()
			if err != nil {
				failed <- err
				return
			}
		}
	}()
	var delays []time.Duration
	next, done := 0, false
	timeout := time.After(time.Duration(n)*every + 30*time.Second)
	for len(delays) < n || !done {
		select {
		case err := <-failed:
			t.Fatalf("%s: writing delta: %v", id, err)
		case <-timeout:
			t.Fatalf("%s: after %v, %d deltas of %d read, %d acks", id, time.Since(start), next, n, len(delays))
		case f, ok := <-tx.frames:
			if !ok {
				t.Fatalf("%s: the sender's socket closed (%v)", id, tx.status)
			}
			switch f["kind"] {
			case "ack":
				if f["delivered"] != 1.0 {
					t.Fatalf("%s: ack %d: %v", id, len(delays), f)
				}
				delays = append(delays, time.Since(due(len(delays))))
			case "error":
				t.Fatalf("%s: after %d acks, an error frame: %v", id, len(delays), f)
			}
		case f, ok := <-rx.frames:
			if !ok {
				t.Fatalf("%s: the reader's socket closed (%v)", id, rx.status)
			}
			if f["kind"] != "message" {
				continue
			}
			var d delta
			raw, _ := json.Marshal(f["payload"])
			if json.Unmarshal(raw, &d) != nil || d.Stream != id || d.Seq != next || d.Done != (next == n-1) || f["from"] != "agent" {
				t.Fatalf("%s: want delta %d of %d, got %v", id, next, n, f)
			}
			next++
			done = d.Done
		}
	}
	slices.Sort(delays)
	t.Logf("%s: %d of %d deltas delivered in %v; ack delay p50 %v, p99 %v, max %v", id, next, n, time.Since(start).Round(time.Millisecond),
		delays[n/2].Round(time.Microsecond), delays[n*99/100].Round(time.Microsecond), delays[n-1].Round(time.Microsecond))
}

// TestWallShedLoadIsCounted: where another node sheds a cluster's traffic
// (past its topic rate per origin node, here set lower than the sender's
// node assumes), nothing is dropped silently: the sender's acks count only
// the sockets that got each message, the shedding node counts what it
// dropped, and the sender's node counts the acks that went out without
// that node's receipt.
func TestWallShedLoadIsCounted(t *testing.T) { // not parallel: it counts what rates shed, in real time
	testkit.Slow(t, "400 messages paced against real-time rates")
	m := newMesh(t)
	b := m.joinWith(func(c *Config) { c.WallSocketRate, c.WallRoomRate = 0, 0 })
	c := m.joinWith(func(c *Config) { c.Wall.PeerRate = 50 }) // bursts of 100
	id := createCluster(t, b, `{"visibility":"public"}`)["cluster_id"].(string)
	rx := enterWall(t, c, id, q("agent", "rx"))
	tx := enterWall(t, b, id, q("agent", "tx"))
	const n = 400
	for i := range n {
		tx.send(map[string]any{"payload": i})
	}
	acked := 0
	for range n {
		acked += int(tx.next("ack")["delivered"].(float64))
	}
	received := 0
	for quiet := false; !quiet; {
		select {
		case f := <-rx.frames:
			if f["kind"] == "message" {
				received++
			}
		case <-time.After(time.Second):
			quiet = true
		}
	}
	if received == n {
		t.Fatal("nothing was shed: the test shows nothing")
	}
	if acked != received {
		t.Fatalf("the acks count %d deliveries; the reader got %d of %d", acked, received, n)
	}
	// The shedding node counts what its validator dropped; a sender far
	// over its rate also loses gossipsub score there, and what a peer
	// ignores past that is counted only by the sender's short acks.
	if shed := metric(t, c, `mesh_p2p_dropped_total{reason="rate",surface="topic"}`); shed == 0 {
		t.Fatalf("the shedding node counted no drops; %d messages did not arrive", n-received)
	}
	if short := metric(t, b, "mesh_wall_acks_short_total"); short < float64(n-received) {
		t.Fatalf("the sender's node counted %v short acks; %d messages did not arrive", short, n-received)
	}
	t.Logf("%d of %d delivered", received, n)
}

// TestWallSpectatorsAcrossNodes: on a private cluster, a ghost on any node
// sees every direct message, with its "to"; a member sees only those to it.
func TestWallSpectatorsAcrossNodes(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	b, c := m.join(), m.join()
	cl := createCluster(t, b, `{}`)
	id, tok := cl["cluster_id"].(string), cl["token"].(string)
	alice := enterWall(t, b, id, q("agent", "alice", "token", tok))
	carol := enterWall(t, b, id, q("agent", "carol", "token", tok))
	bob := enterWall(t, c, id, q("agent", "bob", "token", tok))
	spyB := enterWall(t, b, id, q("agent", "spy", "vis", "ghost", "token", tok))
	spyC := enterWall(t, c, id, q("agent", "spy", "vis", "ghost", "token", cl["admin_token"].(string)))
	alice.send(map[string]any{"to": "bob", "payload": "psst"})
	for _, w := range []*wsClient{bob, spyB, spyC} {
		if f := w.next("message"); f["to"] != "bob" || f["from"] != "alice" || f["payload"] != "psst" {
			t.Fatalf("got %v", f)
		}
	}
	if a := alice.next("ack"); a["delivered"] != 1.0 {
		t.Fatalf("ack: %v", a)
	}
	carol.quiet(300 * time.Millisecond)
}
