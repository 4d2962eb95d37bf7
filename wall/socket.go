package wall

import (
	"errors"
	"net"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/gobwas/ws"
	"golang.org/x/time/rate"
)

// Socket limits.
const (
	// maxMessage is the largest WebSocket message read at all: frames
	// between MaxFrame and this get an error frame and the socket stays
	// open; larger ones close it (1009, message too big).
	maxMessage = 1 << 20
	// writeTimeout bounds one write to a client.
	writeTimeout = 10 * time.Second
	// DefaultSendQueue is how many frames may wait for a slow client
	// before the socket is closed (1008, slow consumer): a slow client
	// never stalls a room.
	DefaultSendQueue = 256
	// DefaultSendMemory bounds the bytes of the frames waiting for all the
	// sockets of a node together (Tuning.SendMemory).
	DefaultSendMemory = 64 << 20
	// maxBatch bounds the frames one write sends.
	maxBatch = 256
	// frameCost is what one queued frame costs the node beyond its bytes
	// (its place in the queue, its header when written).
	frameCost = 64
)

// closeCause is why the node closes a socket: the close code and reason
// the client is sent, and the reason mesh_wall_sockets_closed_total counts
// it under.
type closeCause struct {
	code   ws.StatusCode
	reason string
	label  string
}

func (c *closeCause) Error() string { return c.reason }

// Why sockets close. The reasons of the close frames are documented in
// docs/api.md (Keepalive and closing).
var (
	causeGone      = &closeCause{ws.StatusNormalClosure, "", "client"} // the connection ended
	causeSlow      = &closeCause{ws.StatusPolicyViolation, "slow consumer: send queue full", "slow_consumer"}
	causeMemory    = &closeCause{ws.StatusPolicyViolation, "slow consumer: the node's send memory is spent", "send_memory"}
	causeControl   = &closeCause{ws.StatusPolicyViolation, "control frames (pings, pongs) too fast", "control_flood"}
	causeKeepalive = &closeCause{ws.StatusGoingAway, "keepalive ping unanswered", "keepalive"}
	causeWrite     = &closeCause{ws.StatusInternalServerError, "write failed", "write_failed"}
	causeUTF8      = &closeCause{ws.StatusInvalidFramePayloadData, "invalid UTF-8 in a text frame", "invalid_utf8"} // RFC 6455 8.1
	causeBadClose  = &closeCause{ws.StatusProtocolError, "invalid close code", "protocol"}
	causeDeleted   = &closeCause{ws.StatusNormalClosure, "cluster deleted", "cluster_deleted"}
	causeNodeEnd   = &closeCause{ws.StatusGoingAway, "node shutting down", "node_shutdown"}
	causeFull      = &closeCause{statusTryAgain, "cluster full on this node", "cluster_full"}
	causeJoin      = &closeCause{statusTryAgain, "cannot join the cluster now", "join_failed"}
	// The cluster's visibility changed (cluster_update.go).
	causePrivate = &closeCause{ws.StatusNormalClosure, "visibility changed: the cluster is private now; connect again with its new token", "made_private"}
	causePublic  = &closeCause{ws.StatusNormalClosure, "visibility changed: the cluster is public now; connect again, no token needed", "made_public"}
)

// closeLabels are the reasons mesh_wall_sockets_closed_total counts.
var closeLabels = []string{"client", "slow_consumer", "send_memory", "control_flood", "keepalive", "write_failed",
	"invalid_utf8", "protocol", "too_big", "cluster_deleted", "node_shutdown", "cluster_full", "join_failed", "made_private", "made_public"}

// statusTryAgain is the close code 1013 (try again later).
const statusTryAgain ws.StatusCode = 1013

// socket is one client connection to a room.
type socket struct {
	conn   *wsConn
	svc    *Service
	room   *room
	handle string
	did    string
	proof  string // the did's proof of key (proof.go), "" when unproved
	// challenge is the node's challenge the proof signed.
	challenge string
	vis       string
	owner     bool
	// spectator: a ghost holding a private cluster's token, which
	// receives every direct message of the room (spec 5).
	spectator bool
	// readOnly: a spectator of a public cluster (spectate=1), a ghost
	// that gets no direct message and whose frames are all refused.
	readOnly bool
	// eventsOnly: a read-only spectator of the cluster's events alone
	// (spectate=events): no message frame, no presence frame.
	eventsOnly bool
	limit      int             // send queue bound
	wg         *sync.WaitGroup // owns the socket's goroutines
	// sendLimit paces the frames the client sends (SocketRate), control
	// frames included; controls bounds its control frames (ControlRate).
	sendLimit, controls *rate.Limiter
	done                chan struct{} // closed once the socket is closed

	mu         sync.Mutex
	queue      []outFrame
	writing    int           // frames the writer is writing (queued no more)
	answers    int           // answers queued
	answering  int           // answers among the frames being written
	writer     bool          // a writer goroutine is running
	pong       []byte        // the payload of the pong due, if pongDue
	pongDue    bool          // a pong is due: only the latest ping is answered (RFC 6455 5.5.3)
	pingDue    bool          // a keepalive ping is due
	closed     bool          // no more frames; the writer closes the connection
	bye        []byte        // the close frame's payload, written last
	unanswered []*sent       // sends awaiting their answer (ack or error), in order
	acking     bool          // an ackLoop runs
	freed      chan struct{} // an answer went out (capacity 1)

	pinged atomic.Bool // a keepalive ping was sent
	heard  atomic.Bool // a frame was read from the client since the last ping
	held   atomic.Bool // the reader waits for a rate, not for the client
}

// frame is an encoded text frame, shared by every socket it goes to (a
// broadcast is encoded once): the node's send memory counts its bytes
// once, while any socket holds it. more are text frames written right
// after data, as one place in the queue: a welcome too long for one frame
// (welcome.go).
type frame struct {
	data []byte
	more [][]byte
	refs atomic.Int32
}

// size is the bytes of f's text frames.
func (f *frame) size() int64 {
	n := int64(len(f.data))
	for _, m := range f.more {
		n += int64(len(m))
	}
	return n
}

// outFrame is a frame waiting to be written, and who counts its delivery.
type outFrame struct {
	f     *frame
	d     *delivery   // nil: not counted (ghost sockets, acks, errors)
	close *closeCause // close the socket once this frame is written
	// answer: an ack or error frame answering the socket's own frame. A
	// socket's answers are bounded by maxUnanswered (its frames are not
	// read while that many wait), not by its send queue: a client sending
	// a burst faster than its answers are written is slowed down, not
	// taken for a slow consumer.
	answer bool
}

// text is an outFrame of data, for one socket or several.
func text(data []byte) outFrame { return outFrame{f: &frame{data: data}} }

// member is the socket as other nodes see it.
func (s *socket) member() member {
	return member{Agent: s.handle, DID: s.did, Vis: s.vis, Proof: s.proof, Challenge: s.challenge}
}

func newSocket(conn *wsConn, svc *Service, j joinQuery) *socket {
	c := &svc.cfg
	return &socket{conn: conn, svc: svc, wg: &svc.wg, handle: j.agent, did: j.did, proof: j.proof, challenge: j.challenge, vis: j.vis, owner: j.owner, limit: c.SendQueue,
		sendLimit: sendLimiter(c.SocketRate, c.socketBurst()), controls: rate.NewLimiter(rate.Limit(c.ControlRate), max(1, burstOf(c.ControlRate))),
		done: make(chan struct{}), freed: make(chan struct{}, 1)}
}

func (s *socket) ghost() bool { return s.vis == VisGhost }

// send queues a frame; it never blocks. A socket whose queue is full, or
// that is behind while the node's send memory is spent, is closed as a
// slow consumer.
func (s *socket) send(f outFrame) {
	s.mu.Lock()
	var cause *closeCause
	switch {
	case s.closed:
	case f.answer:
		s.answers++
		s.svc.sendMemory.hold(f.f)
		s.queue = append(s.queue, f)
		s.startWriterLocked()
		s.mu.Unlock()
		return
	case len(s.queue)-s.answers >= s.limit:
		cause = causeSlow
	case len(s.queue)+s.writing > 0 && !s.svc.sendMemory.fits(f.f):
		// A socket that keeps up (nothing waiting) always gets its frame:
		// what fills the node's memory is the sockets that fall behind.
		cause = causeMemory
	default:
		s.svc.sendMemory.hold(f.f)
		s.queue = append(s.queue, f)
		s.startWriterLocked()
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	f.d.finish(false)
	if cause != nil {
		s.abort(cause)
	}
}

// startWriterLocked starts the writer unless it runs: an idle socket holds
// no writer goroutine.
func (s *socket) startWriterLocked() {
	if !s.writer {
		s.writer = true
		s.wg.Go(s.writeLoop)
	}
}

// writeLoop writes what is due (a pong, a keepalive ping, the queued
// frames), all of it at once, until nothing is; once the socket is closed
// it sends the close frame and hangs up.
func (s *socket) writeLoop() {
	var hdrs []byte
	for {
		// Let the frames of a burst gather, so that one write sends them.
		runtime.Gosched()
		s.mu.Lock()
		if s.closed {
			bye := s.bye
			s.mu.Unlock()
			s.hangUp(bye)
			return
		}
		if !s.pongDue && !s.pingDue && len(s.queue) == 0 {
			s.writer = false
			s.queue = nil // let the backing array go
			s.mu.Unlock()
			return
		}
		pong, pongDue, pingDue := s.pong, s.pongDue, s.pingDue
		s.pong, s.pongDue, s.pingDue = nil, false, false
		n := min(len(s.queue), maxBatch)
		batch := make([]outFrame, n)
		copy(batch, s.queue)
		clear(s.queue[:n])
		s.queue = s.queue[n:]
		s.writing, s.answering = n, 0
		for _, f := range batch {
			if f.answer {
				s.answering++
			}
		}
		s.answers -= s.answering
		s.mu.Unlock()

		hdrs = hdrs[:0]
		bufs := make(net.Buffers, 0, 2*n+4)
		add := func(op ws.OpCode, data []byte) {
			start := len(hdrs)
			hdrs = appendHeader(hdrs, op, len(data))
			bufs = append(bufs, hdrs[start:len(hdrs):len(hdrs)], data)
		}
		if pongDue {
			add(ws.OpPong, pong)
		}
		if pingDue {
			add(ws.OpPing, nil)
		}
		for _, f := range batch {
			add(ws.OpText, f.f.data)
			for _, m := range f.f.more {
				add(ws.OpText, m)
			}
		}
		s.conn.conn.SetWriteDeadline(time.Now().Add(writeTimeout))
		_, err := bufs.WriteTo(s.conn.conn)
		s.mu.Lock()
		answered := s.answering
		s.writing, s.answering = 0, 0
		s.mu.Unlock()
		if answered > 0 {
			s.answered()
		}
		for _, f := range batch {
			s.svc.sendMemory.release(f.f)
			f.d.finish(err == nil)
			if err == nil && f.close != nil {
				s.abort(f.close)
			}
		}
		if err != nil {
			s.abort(causeWrite)
		}
	}
}

// hangUp sends the close frame, briefly, and closes the connection.
func (s *socket) hangUp(bye []byte) {
	if bye != nil {
		s.conn.conn.SetWriteDeadline(time.Now().Add(time.Second))
		s.conn.conn.Write(append(appendHeader(nil, ws.OpClose, len(bye)), bye...))
	}
	s.conn.conn.Close()
}

// abort closes the socket: what is still queued fails, the client gets a
// close frame with the cause's code and reason if its connection takes
// it, and the connection is closed. The first cause counts.
func (s *socket) abort(c *closeCause) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	close(s.done)
	s.bye = closeBody(c.code, c.reason)
	q := s.queue
	s.queue, s.answers, s.pong, s.pongDue, s.pingDue = nil, 0, nil, false, false
	s.startWriterLocked()
	s.mu.Unlock()
	for _, f := range q {
		s.svc.sendMemory.release(f.f)
		f.d.finish(false)
	}
	s.svc.metrics.socketClosed(c)
	// Unstick a write blocked on a client that stopped reading.
	s.conn.conn.SetWriteDeadline(time.Now().Add(time.Second))
}

// answered wakes the socket's reader if it waits for its answers to go
// out (awaitRoom).
func (s *socket) answered() {
	select {
	case s.freed <- struct{}{}:
	default:
	}
}

// closeAfter queues a last frame (closed, say) and closes the socket once
// it is written.
func (s *socket) closeAfter(data []byte, c *closeCause) {
	f := text(data)
	f.close = c
	s.send(f)
}

// readLoop hands each client data frame to fn, as a text frame or the
// reason it is refused, until the connection ends, answering pings and
// closes on the way. Every frame, control frames included, takes its turn
// in the socket's rate (SocketRate): while the rate does not allow the
// next one, the socket is not read and TCP slows the client down; frames
// for the client are written meanwhile, as the writer is apart.
func (s *socket) readLoop(fn func(data []byte, refused error)) {
	control := func(op ws.OpCode, p []byte) error {
		s.heard.Store(true)
		if !s.controls.Allow() {
			return causeControl
		}
		if !s.pace(s.sendLimit, nil, paceSocket) {
			return causeGone
		}
		switch op {
		case ws.OpPing:
			s.sendPong(p)
		case ws.OpClose:
			return closeReply(p)
		}
		return nil
	}
	for {
		m, err := s.conn.readMessage(MaxFrame+1, control)
		s.heard.Store(true)
		var ce *closeCause
		switch {
		case errors.As(err, &ce):
			s.abort(ce)
			return
		case err != nil:
			s.abort(causeGone)
			return
		case !s.pace(s.sendLimit, nil, paceSocket):
			return
		case m.size > MaxFrame:
			fn(nil, badFrame("frame_too_large", "a frame of %d bytes is over the %d-byte limit; chunk it or link it by url", m.size, MaxFrame))
		case m.op != ws.OpText:
			fn(nil, badFrame("binary_frame", "binary frames are not supported; send JSON text"))
		case !utf8.Valid(m.data):
			s.abort(causeUTF8)
			return
		default:
			fn(m.data, nil)
		}
	}
}

// closeReply is how the node answers a client's close frame with payload
// p: it echoes a valid code, and answers an invalid one with 1002 (RFC
// 6455 7.4), a reason that is not UTF-8 with 1007.
func closeReply(p []byte) *closeCause {
	if len(p) == 0 {
		return causeGone
	}
	code, reason := ws.ParseCloseFrameData(p)
	if len(p) == 1 || code >= 5000 {
		return causeBadClose
	}
	switch err := ws.CheckCloseFrameData(code, reason); {
	case err == nil, code >= 1012 && code <= 1014 && utf8.ValidString(reason): // registered since RFC 6455
		return &closeCause{code, "", "client"}
	case errors.Is(err, ws.ErrProtocolInvalidUTF8): // the code is valid
		return causeUTF8
	}
	return causeBadClose
}

// Which rate paced a socket (mesh_wall_paced_total).
const (
	paceSocket  = "socket"
	paceCluster = "cluster"
	paceMesh    = "mesh" // what other nodes take (topicRate)
)

// pace waits until lim lets the socket's next frame through; the socket
// is not read meanwhile. False if the socket closes first, or stop does.
func (s *socket) pace(lim *rate.Limiter, stop <-chan struct{}, which string) bool {
	res := lim.Reserve()
	wait := res.Delay()
	if wait == 0 {
		return true
	}
	s.svc.metrics.paced.WithLabelValues(which).Inc()
	s.held.Store(true)
	defer s.unhold()
	t := time.NewTimer(wait) // the rate's delay, in real time (doc.go, One clock)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.done:
	case <-stop:
	}
	res.Cancel()
	return false
}

// unhold ends a wait of the reader. The wait counts as hearing from the
// client, set before held is cleared: a ping between the wait and the
// frames read after it (the pong among them) finds the one or the other.
func (s *socket) unhold() {
	s.heard.Store(true)
	s.held.Store(false)
}

// sendPong answers a ping with payload p. A pong still unwritten is
// replaced, not queued behind: a socket holds at most one.
func (s *socket) sendPong(p []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.pong, s.pongDue = slices.Clone(p), true
	s.startWriterLocked()
}

// ping sends a keepalive ping. A socket that has sent nothing (its pong
// included) since the previous ping, a PingInterval ago, is closed,
// unless its reader is held back by a rate: the client's pong then waits
// behind the frames it sent before, which the node takes at the rate.
func (s *socket) ping() {
	heard := s.heard.Swap(false)
	if s.pinged.Swap(true) && !heard && !s.held.Load() {
		s.abort(causeKeepalive)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.pingDue = true
		s.startWriterLocked()
	}
}

// sendMemory counts the bytes of the frames waiting for the node's
// sockets, or being written to them (Tuning.SendMemory).
type sendMemory struct {
	max  int64
	used atomic.Int64
}

// cost is what holding f costs: a place in a queue, and its bytes unless
// another socket holds it already.
func (m *sendMemory) cost(f *frame) int64 {
	if f.refs.Load() > 0 {
		return frameCost
	}
	return frameCost + f.size()
}

func (m *sendMemory) fits(f *frame) bool { return m.used.Load()+m.cost(f) <= m.max }

func (m *sendMemory) hold(f *frame) {
	n := int64(frameCost)
	if f.refs.Add(1) == 1 {
		n += f.size()
	}
	m.used.Add(n)
}

func (m *sendMemory) release(f *frame) {
	n := int64(frameCost)
	if f.refs.Add(-1) == 0 {
		n += f.size()
	}
	m.used.Add(-n)
}

// delivery counts the sockets that actually received one frame: each
// counted socket reports once, written or not.
type delivery struct {
	pending  atomic.Int32
	received atomic.Int32
	done     chan struct{}
}

func newDelivery() *delivery { return &delivery{done: make(chan struct{})} }

// add counts one more socket the frame goes to; call before sending.
func (d *delivery) add() { d.pending.Add(1) }

// seal marks that no more sockets will be added; until then done cannot
// close, however fast the writes are.
func (d *delivery) seal() { d.finish(false) }

func (d *delivery) finish(ok bool) {
	if d == nil {
		return
	}
	if ok {
		d.received.Add(1)
	}
	if d.pending.Add(-1) == -1 {
		close(d.done)
	}
}
