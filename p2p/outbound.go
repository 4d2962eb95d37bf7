package p2p

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/encoding/protowire"
)

// Gossipsub bounds what waits for a peer only by count (its outbound queue
// of RPCs), and messages go up to 1 MiB: one slow peer could pin a GiB. So
// gossipsub is handed a host whose gossip streams never block a write: each
// RPC waits in a queue of the stream's own, bounded in bytes, that a
// goroutine writes to the peer; past the bound the peer's oldest published
// messages are dropped.
//
// This relies on how pubsub (v0.17) writes to a peer (comm.go): it opens the
// stream with host.NewStream, writes each RPC, length-prefixed, with one
// Write of a pooled buffer (hence the copy), after setting a 30 s write
// deadline, and on a write error resets the stream and gives the peer up;
// another goroutine reads the stream to see the peer go.

// gossipWriteTimeout is how long a peer has to take one RPC before its stream
// is reset, as pubsub gives it.
const gossipWriteTimeout = 30 * time.Second

// rpcPublishField is the field number of pb.RPC's published messages.
const rpcPublishField protowire.Number = 2

// outbound holds the byte bound of every peer's gossip queue and counts, for
// all of them, what they hold and drop.
type outbound struct {
	limit        int                // GossipQueueBytes
	held         atomic.Int64       // bytes queued or being written, all peers
	queued       prometheus.Gauge   // bytes queued or being written, all peers
	dropped      prometheus.Counter // messages dropped from the queues
	droppedBytes prometheus.Counter // and their bytes
	log          *slog.Logger
}

func newOutbound(limit int, dropped prometheus.Counter, log *slog.Logger) *outbound {
	return &outbound{
		limit: limit,
		queued: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mesh_p2p_gossip_queued_bytes",
			Help: "Bytes of gossip accepted for peers and not yet written to them (queued or being written), over all peers; each peer's share is bounded by GossipQueueBytes.",
		}),
		dropped: dropped,
		droppedBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mesh_p2p_gossip_dropped_bytes_total",
			Help: "Bytes of published messages dropped from slow peers' gossip queues (the messages are counted in mesh_p2p_dropped_total{surface=\"topic\",reason=\"slow_peer\"}).",
		}),
		log: log,
	}
}

// gossipHost is the host given to gossipsub: the node's own, whose streams of
// pubsub's protocols are outboundStreams.
type gossipHost struct {
	host.Host
	out *outbound
}

var _ host.Host = (*gossipHost)(nil)

func (g *gossipHost) NewStream(ctx context.Context, p peer.ID, pids ...protocol.ID) (network.Stream, error) {
	s, err := g.Host.NewStream(ctx, p, pids...)
	if err != nil || !slices.Contains(pubsub.GossipSubDefaultProtocols, s.Protocol()) {
		return s, err
	}
	return &outboundStream{Stream: s, peer: p, out: g.out}, nil
}

// outboundStream is pubsub's stream to one peer. Write queues a copy of the
// RPC and returns; a drain goroutine, which exists only while RPCs wait,
// writes them to the real stream in order. Pubsub calls Write,
// SetWriteDeadline, Close and Reset; its reads go to the real stream.
type outboundStream struct {
	network.Stream
	peer peer.ID
	out  *outbound

	mu      sync.Mutex
	queue   []queuedRPC // oldest first; nil while empty
	held    int         // bytes queued or being written
	writing bool        // the drain goroutine runs
	err     error       // once set, the stream failed or ended: Write returns it
	drain   sync.WaitGroup
}

var _ network.Stream = (*outboundStream)(nil)

// queuedRPC is one RPC, length prefix included.
type queuedRPC struct {
	b []byte
	// msgs is how many messages it publishes if it carries nothing else;
	// 0 if it must not be dropped.
	msgs int
}

// Write queues one RPC for the peer. Past the byte bound it drops the oldest
// queued RPCs that only publish messages, and this one too if it only
// publishes and still does not fit. RPCs with subscriptions (pubsub's first,
// its hello, among them) or control messages are always queued: losing one
// would cut the peer off a topic or the mesh, and pubsub would not send it
// again, since its own queue took it.
func (s *outboundStream) Write(b []byte) (int, error) {
	rpc := queuedRPC{b: bytes.Clone(b), msgs: publishedMessages(b)}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return 0, s.err
	}
	s.makeRoom(len(rpc.b))
	if rpc.msgs > 0 && s.held+len(rpc.b) > s.out.limit {
		s.drop(rpc)
		return len(b), nil
	}
	s.queue = append(s.queue, rpc)
	s.hold(len(rpc.b))
	if !s.writing {
		s.writing = true
		s.drain.Add(1)
		go s.run()
	}
	return len(b), nil
}

// SetWriteDeadline does nothing: Write does not block, and the drain gives
// each RPC its own deadline.
func (s *outboundStream) SetWriteDeadline(time.Time) error { return nil }

// makeRoom drops the oldest droppable RPCs until n more bytes fit, or none
// is left. s.mu is held.
func (s *outboundStream) makeRoom(n int) {
	for s.held+n > s.out.limit {
		i := slices.IndexFunc(s.queue, func(r queuedRPC) bool { return r.msgs > 0 })
		if i < 0 {
			return
		}
		s.drop(s.queue[i])
		s.release(len(s.queue[i].b))
		// Close the gap by moving the RPCs before it (kept ones, few)
		// rather than the many after it.
		copy(s.queue[1:i+1], s.queue[:i])
		s.queue[0] = queuedRPC{}
		s.queue = s.queue[1:]
	}
}

func (s *outboundStream) drop(rpc queuedRPC) {
	s.out.dropped.Add(float64(rpc.msgs))
	s.out.droppedBytes.Add(float64(len(rpc.b)))
	s.out.log.Debug("gossip dropped: peer too slow", "peer", s.peer, "messages", rpc.msgs, "bytes", len(rpc.b))
}

func (s *outboundStream) hold(n int) {
	s.held += n
	s.out.held.Add(int64(n))
	s.out.queued.Add(float64(n))
}

func (s *outboundStream) release(n int) {
	s.held -= n
	s.out.held.Add(-int64(n))
	s.out.queued.Sub(float64(n))
}

// flushSettle is how long the queues must stay empty before flush counts
// the gossip as written: pubsub hands a message to the peers' streams a
// few goroutine hops after Publish returns.
const flushSettle = 50 * time.Millisecond

// flush waits until the gossip accepted for every peer is written and no
// more has come for flushSettle, or until ctx ends.
func (o *outbound) flush(ctx context.Context) {
	const tick = 5 * time.Millisecond
	t := time.NewTicker(tick)
	defer t.Stop()
	for quiet := time.Duration(0); quiet < flushSettle; {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		quiet += tick
		if o.held.Load() != 0 {
			quiet = 0
		}
	}
}

// run is the drain goroutine: it writes the queue to the peer until the
// queue is empty or the stream fails.
func (s *outboundStream) run() {
	defer s.drain.Done()
	written := 0
	for {
		b, ok := s.next(written)
		if !ok {
			return
		}
		if err := s.write(b); err != nil {
			s.fail(len(b), err)
			return
		}
		written = len(b)
	}
}

// next releases the written bytes and takes the oldest RPC off the queue,
// or ends the drain when none waits or the stream ended.
func (s *outboundStream) next(written int) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.release(written)
	if len(s.queue) == 0 || s.err != nil {
		s.queue = nil // an idle peer holds no buffer
		s.writing = false
		return nil, false
	}
	b := s.queue[0].b
	s.queue[0] = queuedRPC{}
	s.queue = s.queue[1:]
	return b, true
}

func (s *outboundStream) write(b []byte) error {
	if err := s.Stream.SetWriteDeadline(time.Now().Add(gossipWriteTimeout)); err != nil {
		return err
	}
	_, err := s.Stream.Write(b)
	return err
}

// fail handles a write of n bytes that failed: the peer stalled past the
// deadline or the stream broke. Like pubsub, it resets the stream, which ends
// pubsub's read of it, so pubsub gives the peer up; its next Write returns
// err.
func (s *outboundStream) fail(n int, err error) {
	s.mu.Lock()
	s.release(n)
	s.writing = false
	ended := s.err != nil // Close or Reset came first and reset the stream
	if !ended {
		s.err = fmt.Errorf("p2p: gossip to %s: %w", s.peer, err)
		s.discard()
	}
	s.mu.Unlock()
	if !ended {
		s.out.log.Debug("gossip stream reset", "peer", s.peer, "err", err)
		s.Stream.Reset()
	}
}

// Close ends the stream and returns once the drain goroutine has exited.
// What was not written yet is discarded, as pubsub discards its own queue
// for a peer it closes; the stream is then reset, which also ends a write in
// progress, rather than closed.
func (s *outboundStream) Close() error {
	end := s.Stream.Close
	if s.stop() {
		end = s.Stream.Reset
	}
	err := end()
	s.drain.Wait()
	return err
}

// Reset resets the stream and returns once the drain goroutine has exited.
func (s *outboundStream) Reset() error {
	s.stop()
	err := s.Stream.Reset()
	s.drain.Wait()
	return err
}

// stop makes further writes fail and discards the queue; it reports whether
// anything was left unwritten.
func (s *outboundStream) stop() (unwritten bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = ErrStreamClosed
	}
	unwritten = s.held > 0
	s.discard()
	return unwritten
}

// discard empties the queue; an RPC being written stays held until its write
// returns. s.mu is held.
func (s *outboundStream) discard() {
	for _, rpc := range s.queue {
		s.release(len(rpc.b))
	}
	s.queue = nil
}

// publishedMessages counts the messages of b, one RPC as pubsub writes it
// (uvarint length, then a pb.RPC), if it publishes messages (field 2) and
// carries nothing else; otherwise it returns 0 and the RPC is never dropped:
// subscriptions (1), control messages (3), what this code does not know
// (partial messages, extensions), and a write that is not exactly one RPC,
// which could not be dropped without breaking the stream's framing.
func publishedMessages(b []byte) int {
	size, n := protowire.ConsumeVarint(b)
	if n < 0 || size != uint64(len(b)-n) {
		return 0
	}
	msgs := 0
	for b = b[n:]; len(b) > 0; msgs++ {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || num != rpcPublishField {
			return 0
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return 0
		}
		b = b[n+m:]
	}
	return msgs
}
