package p2p

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/libp2p/go-libp2p"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/agentmesh/mesh/internal/testkit"
)

// framed is rpc as pubsub writes it: uvarint length, then the RPC.
func framed(t *testing.T, rpc *pb.RPC) []byte {
	t.Helper()
	b, err := proto.Marshal(rpc)
	if err != nil {
		t.Fatal(err)
	}
	return append(protowire.AppendVarint(nil, uint64(len(b))), b...)
}

func message(i, size int) *pb.Message {
	data := fmt.Appendf(nil, "%04d", i)
	return &pb.Message{Topic: proto.String("t"), Data: append(data, bytes.Repeat([]byte{'x'}, size-len(data))...)}
}

func subscribe(topic string) *pb.RPC {
	return &pb.RPC{Subscriptions: []*pb.RPC_SubOpts{{Subscribe: proto.Bool(true), Topicid: proto.String(topic)}}}
}

func graft(topic string) *pb.ControlMessage {
	return &pb.ControlMessage{Graft: []*pb.ControlGraft{{TopicID: proto.String(topic)}}}
}

func TestPublishedMessages(t *testing.T) {
	t.Parallel()
	one := framed(t, &pb.RPC{Publish: []*pb.Message{message(1, 100)}})
	for _, tc := range []struct {
		name string
		b    []byte
		want int
	}{
		{"one message", one, 1},
		{"two messages", framed(t, &pb.RPC{Publish: []*pb.Message{message(1, 100), message(2, 100)}}), 2},
		{"subscription", framed(t, subscribe("t")), 0},
		{"control", framed(t, &pb.RPC{Control: graft("t")}), 0},
		{"messages and control", framed(t, &pb.RPC{Publish: []*pb.Message{message(1, 100)}, Control: graft("t")}), 0},
		{"messages and subscription", framed(t, &pb.RPC{Publish: []*pb.Message{message(1, 100)}, Subscriptions: subscribe("t").Subscriptions}), 0},
		{"partial message", framed(t, &pb.RPC{Partial: &pb.PartialMessagesExtension{TopicID: proto.String("t"), PartialMessage: []byte("p")}}), 0},
		{"empty", framed(t, &pb.RPC{}), 0},
		{"truncated", one[:len(one)-1], 0},
		{"two RPCs in one write", append(slices.Clone(one), one...), 0},
		{"not protobuf", append(protowire.AppendVarint(nil, 4), 0xff, 0xff, 0xff, 0xff), 0},
		{"nothing", nil, 0},
	} {
		if got := publishedMessages(tc.b); got != tc.want {
			t.Errorf("%s: publishedMessages = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// stalledPeer stands for the real stream to a peer that takes nothing until
// read is closed: a write waits for that, for the write deadline, or for a
// reset.
type stalledPeer struct {
	network.Stream // nil: an outboundStream calls only the methods below

	read   chan struct{}
	resetc chan struct{}

	mu       sync.Mutex
	deadline time.Time
	got      [][]byte
	closed   bool
	resets   int
}

func newStalledPeer() *stalledPeer {
	return &stalledPeer{read: make(chan struct{}), resetc: make(chan struct{})}
}

func (p *stalledPeer) SetWriteDeadline(d time.Time) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.deadline = d
	return nil
}

func (p *stalledPeer) Write(b []byte) (int, error) {
	p.mu.Lock()
	deadline := time.NewTimer(time.Until(p.deadline))
	p.mu.Unlock()
	defer deadline.Stop()
	select {
	case <-p.read:
		p.mu.Lock()
		defer p.mu.Unlock()
		p.got = append(p.got, bytes.Clone(b))
		return len(b), nil
	case <-deadline.C:
		return 0, os.ErrDeadlineExceeded
	case <-p.resetc:
		return 0, network.ErrReset
	}
}

func (p *stalledPeer) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	return nil
}

func (p *stalledPeer) Reset() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.resets++; p.resets == 1 {
		close(p.resetc)
	}
	return nil
}

func (p *stalledPeer) state() (got [][]byte, closed bool, resets int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.got), p.closed, p.resets
}

// queueTo returns an outboundStream of limit bytes to peer.
func queueTo(peer *stalledPeer, limit int) (*outboundStream, *outbound) {
	out := newOutbound(limit, prometheus.NewCounter(prometheus.CounterOpts{Name: "dropped"}), slog.New(slog.DiscardHandler))
	return &outboundStream{Stream: peer, out: out}, out
}

func mustWrite(t *testing.T, s *outboundStream, b []byte) {
	t.Helper()
	if n, err := s.Write(b); n != len(b) || err != nil {
		t.Fatalf("Write = %d, %v; want %d, nil", n, err, len(b))
	}
}

// TestOutboundQueueStalledPeer: while the peer takes nothing, writes return
// at once, what is held stays within the bound, the oldest published
// messages go first and are counted, and the hello, subscriptions and
// control messages are kept; once the peer reads, it gets what was kept, in
// order, and nothing stays held.
func TestOutboundQueueStalledPeer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const limit, dataRPCs = 1000, 10
		peer := newStalledPeer()
		s, out := queueTo(peer, limit)

		start := time.Now()
		hello := framed(t, subscribe("t"))
		mustWrite(t, s, hello)
		synctest.Wait() // the hello is being written, to a peer that takes nothing

		sent := [][]byte{hello}
		var data [][]byte
		for i := range dataRPCs {
			d := framed(t, &pb.RPC{Publish: []*pb.Message{message(i, 200)}})
			data = append(data, d)
			sent = append(sent, d)
			mustWrite(t, s, d)
			switch i {
			case 2:
				sent = append(sent, framed(t, &pb.RPC{Control: graft("t")}))
				mustWrite(t, s, sent[len(sent)-1])
			case 5:
				sent = append(sent, framed(t, subscribe("u")))
				mustWrite(t, s, sent[len(sent)-1])
			}
			if held := testutil.ToFloat64(out.queued); held > limit {
				t.Fatalf("after message %d, %v bytes held, over the bound of %d", i, held, limit)
			}
		}
		if waited := time.Since(start); waited != 0 {
			t.Fatalf("writes to a stalled peer took %v", waited)
		}

		close(peer.read)
		synctest.Wait()
		got, closed, resets := peer.state()
		in := func(b []byte, list [][]byte) bool {
			return slices.ContainsFunc(list, func(x []byte) bool { return bytes.Equal(x, b) })
		}
		dropped := 0 // the oldest messages the peer did not get
		for dropped < len(data) && !in(data[dropped], got) {
			dropped++
		}
		want := slices.DeleteFunc(slices.Clone(sent), func(b []byte) bool { return in(b, data[:dropped]) })
		if !slices.EqualFunc(got, want, bytes.Equal) {
			t.Errorf("the peer got %d RPCs, want %d: all but the oldest %d messages, in order", len(got), len(want), dropped)
		}
		if dropped == 0 {
			t.Errorf("nothing dropped: %d messages of 200 bytes fit a %d byte bound", dataRPCs, limit)
		}
		if n := testutil.ToFloat64(out.dropped); n != float64(dropped) {
			t.Errorf("%v messages counted as dropped, want %d", n, dropped)
		}
		if n := testutil.ToFloat64(out.droppedBytes); n != float64(dropped*len(data[0])) {
			t.Errorf("%v bytes counted as dropped, want %d", n, dropped*len(data[0]))
		}
		if held := testutil.ToFloat64(out.queued); held != 0 {
			t.Errorf("%v bytes held once all was written", held)
		}
		if closed || resets != 0 {
			t.Errorf("stream closed %v, reset %d times by a healthy queue", closed, resets)
		}
	})
}

// TestOutboundQueueDeadline: a peer that takes nothing for 30 s has its
// stream reset, and pubsub's next write gets the error.
func TestOutboundQueueDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		peer := newStalledPeer()
		s, out := queueTo(peer, 1000)
		mustWrite(t, s, framed(t, subscribe("t")))
		mustWrite(t, s, framed(t, &pb.RPC{Publish: []*pb.Message{message(1, 100)}}))

		time.Sleep(gossipWriteTimeout - time.Second)
		synctest.Wait()
		if _, _, resets := peer.state(); resets != 0 {
			t.Fatalf("stream reset before the write deadline")
		}
		mustWrite(t, s, framed(t, &pb.RPC{Publish: []*pb.Message{message(2, 100)}}))

		time.Sleep(time.Second)
		synctest.Wait()
		if _, _, resets := peer.state(); resets != 1 {
			t.Fatalf("stream reset %d times after the write deadline, want 1", resets)
		}
		if _, err := s.Write(framed(t, &pb.RPC{Publish: []*pb.Message{message(3, 100)}})); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("Write after the deadline = %v, want os.ErrDeadlineExceeded", err)
		}
		if held := testutil.ToFloat64(out.queued); held != 0 {
			t.Errorf("%v bytes still held after the reset", held)
		}
		s.Close()
	})
}

// TestOutboundQueueClose: Close and Reset return once the drain goroutine
// has exited (synctest.Test fails on a goroutine left blocked), discard what
// waits, and make later writes fail.
func TestOutboundQueueClose(t *testing.T) {
	for _, tc := range []struct {
		name       string
		stalled    bool
		end        func(*outboundStream) error
		wantClosed bool // else reset
	}{
		{"close while writing", true, (*outboundStream).Close, false},
		{"close when all is written", false, (*outboundStream).Close, true},
		{"reset while writing", true, (*outboundStream).Reset, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				peer := newStalledPeer()
				if !tc.stalled {
					close(peer.read)
				}
				s, out := queueTo(peer, 1000)
				mustWrite(t, s, framed(t, subscribe("t")))
				mustWrite(t, s, framed(t, &pb.RPC{Publish: []*pb.Message{message(1, 100)}}))
				synctest.Wait()

				tc.end(s)
				wantResets := 1
				if tc.wantClosed {
					wantResets = 0
				}
				if _, closed, resets := peer.state(); closed != tc.wantClosed || resets != wantResets {
					t.Errorf("the real stream: closed %v, reset %d times; want closed %v", closed, resets, tc.wantClosed)
				}
				if _, err := s.Write(framed(t, subscribe("u"))); !errors.Is(err, ErrStreamClosed) {
					t.Errorf("Write after the end = %v, want ErrStreamClosed", err)
				}
				if held := testutil.ToFloat64(out.queued); held != 0 {
					t.Errorf("%v bytes still held", held)
				}
			})
		})
	}
}

// TestSlowPeerGossip: a peer that stops reading its gossipsub stream while
// a node publishes large messages costs the node at most GossipQueueBytes;
// what does not fit is dropped and counted, and a healthy peer still gets
// every message, in order.
func TestSlowPeerGossip(t *testing.T) {
	t.Parallel()
	const (
		topic = "big"
		bound = MinGossipQueueBytes
		size  = 128 << 10
		n     = 40 // 5 MiB in all
		// envelope is what a message costs beyond its data: origin,
		// sequence number, signature, key, topic and the RPC's framing.
		envelope = 1 << 10
	)
	pub := startHost(t, Config{GossipQueueBytes: bound})
	healthy := startHost(t, Config{})
	connect(t, pub, healthy)
	var mu sync.Mutex
	var received []int
	if _, err := healthy.Join(topic, TopicConfig{Deliver: func(m Message) {
		i, _ := strconv.Atoi(string(m.Data[:4]))
		mu.Lock()
		defer mu.Unlock()
		received = append(received, i)
	}}); err != nil {
		t.Fatal(err)
	}
	pt, err := pub.Join(topic, TopicConfig{})
	if err != nil {
		t.Fatal(err)
	}

	slow := stalledGossipPeer(t, pub, topic)
	testkit.Eventually(t, 10*time.Second, func() bool {
		return slices.Contains(pt.Peers(), healthy.ID()) && slices.Contains(pt.Peers(), slow)
	}, "the publisher to see both subscriptions")

	peak := 0.0
	for i := range n {
		publish(t, pt, string(message(i, size).Data))
		testkit.Eventually(t, 10*time.Second, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(received) > i
		}, "message %d to reach the healthy peer", i)

		// The healthy peer may still hold the message it just got, being
		// written when it arrived; the slow one holds at most the bound.
		held := testutil.ToFloat64(pub.out.queued)
		if held > bound+size+envelope {
			t.Fatalf("after message %d the publisher holds %v bytes for its peers: over the bound of %d and a message being written to the healthy peer", i, held, bound)
		}
		peak = max(peak, held)
	}
	want := make([]int, n)
	for i := range want {
		want[i] = i
	}
	mu.Lock()
	if !slices.Equal(received, want) {
		t.Errorf("the healthy peer got messages %v, want 0 to %d in order", received, n-1)
	}
	mu.Unlock()
	if peak <= bound-size-envelope {
		t.Errorf("the slow peer's queue never filled: at most %v bytes held of %d", peak, bound)
	}
	if dropped := dropCount(pub, SurfaceTopic, DropSlowPeer); dropped < n/2 {
		t.Errorf("%d messages counted as dropped for the slow peer; with %d of %d bytes queued, want at least %d", dropped, n, size, n/2)
	} else if b := testutil.ToFloat64(pub.out.droppedBytes); b < float64(dropped*size) {
		t.Errorf("%v bytes counted as dropped for %d messages of %d bytes", b, dropped, size)
	}

	t.Logf("%d of %d messages dropped for the slow peer; at most %v bytes held", dropCount(pub, SurfaceTopic, DropSlowPeer), n, peak)

	pub.Close()
	testkit.Eventually(t, 10*time.Second, func() bool {
		return testutil.ToFloat64(pub.out.queued) == 0
	}, "the publisher's queues to be released at Close")

}

// stalledGossipPeer connects a bare libp2p host to h that speaks gossipsub
// just enough to subscribe to topic, and never reads what h sends it.
func stalledGossipPeer(t *testing.T, h *Host, topic string) peer.ID {
	t.Helper()
	hst, err := libp2p.New(libp2p.ListenAddrStrings(loopback...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hst.Close() })
	hst.SetStreamHandler(pubsub.GossipSubID_v11, func(network.Stream) {}) // left open, unread
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := hst.Connect(ctx, addrInfo(h)); err != nil {
		t.Fatal(err)
	}
	s, err := hst.NewStream(ctx, h.ID(), pubsub.GossipSubID_v11)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(framed(t, subscribe(topic))); err != nil {
		t.Fatal(err)
	}
	return hst.ID()
}
