package wall

import (
	"errors"
	"net"
	"runtime"
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
	// maxBatch bounds the frames one write sends.
	maxBatch = 256
)

// Close reasons.
const (
	reasonSlow    = "slow consumer: send queue full"
	reasonDeleted = "cluster deleted"
	reasonNodeEnd = "node shutting down"
	reasonFull    = "cluster full on this node"
)

// socket is one client connection to a room.
type socket struct {
	conn   *wsConn
	room   *room
	handle string
	did    string
	vis    string
	owner  bool
	limit  int             // send queue bound
	wg     *sync.WaitGroup // owns the socket's goroutines
	// sendLimit bounds the messages the client sends (SocketRate).
	sendLimit *rate.Limiter

	mu         sync.Mutex
	queue      []outFrame
	writing    bool          // a writer goroutine is running
	closed     bool          // no more frames; the writer closes the connection
	bye        []byte        // the close frame's payload, written last
	unanswered []*sent       // sends awaiting their answer (ack or error), in order
	acking     bool          // an ackLoop runs
	freed      chan struct{} // an answer went out (capacity 1)

	pinged atomic.Int64 // Unix ns of the last keepalive ping
	ponged atomic.Int64 // Unix ns of the last pong
}

// outFrame is a frame waiting to be written, and who counts its delivery.
type outFrame struct {
	op    ws.OpCode // 0 means text
	data  []byte
	d     *delivery // nil: not counted (ghost sockets, acks, errors)
	close *closing  // close the socket once this frame is written
}

type closing struct {
	code   ws.StatusCode
	reason string
}

func newSocket(conn *wsConn, wg *sync.WaitGroup, handle, did, vis string, owner bool, c *Config) *socket {
	return &socket{conn: conn, wg: wg, handle: handle, did: did, vis: vis, owner: owner, limit: c.SendQueue,
		sendLimit: sendLimiter(c.SocketRate, c.socketBurst()), freed: make(chan struct{}, 1)}
}

func (s *socket) ghost() bool { return s.vis == VisGhost }

// send queues a frame; it never blocks. A socket whose queue is full is
// closed as a slow consumer.
func (s *socket) send(f outFrame) {
	s.mu.Lock()
	switch {
	case s.closed:
		s.mu.Unlock()
		f.d.finish(false)
		return
	case len(s.queue) >= s.limit && f.op == 0:
		s.mu.Unlock()
		f.d.finish(false)
		if s.room != nil {
			s.room.svc.metrics.slow.Inc()
		}
		s.abort(ws.StatusPolicyViolation, reasonSlow)
		return
	}
	s.queue = append(s.queue, f)
	s.startWriterLocked()
	s.mu.Unlock()
}

// startWriterLocked starts the writer unless it runs: an idle socket holds
// no writer goroutine.
func (s *socket) startWriterLocked() {
	if !s.writing {
		s.writing = true
		s.wg.Go(s.writeLoop)
	}
}

// writeLoop writes what is queued, all of it at once, until the queue is
// empty; once the socket is closed it sends the close frame and hangs up.
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
		if len(s.queue) == 0 {
			s.writing = false
			s.queue = nil // let the backing array go
			s.mu.Unlock()
			return
		}
		n := min(len(s.queue), maxBatch)
		batch := make([]outFrame, n)
		copy(batch, s.queue)
		clear(s.queue[:n])
		s.queue = s.queue[n:]
		s.mu.Unlock()

		hdrs = hdrs[:0]
		bufs := make(net.Buffers, 0, 2*n)
		for _, f := range batch {
			start := len(hdrs)
			hdrs = appendHeader(hdrs, f.opcode(), len(f.data))
			bufs = append(bufs, hdrs[start:len(hdrs):len(hdrs)], f.data)
		}
		s.conn.conn.SetWriteDeadline(time.Now().Add(writeTimeout))
		_, err := bufs.WriteTo(s.conn.conn)
		for _, f := range batch {
			f.d.finish(err == nil)
			if err == nil && f.close != nil {
				s.abort(f.close.code, f.close.reason)
			}
		}
		if err != nil {
			s.abort(ws.StatusInternalServerError, "write failed")
		}
	}
}

func (f outFrame) opcode() ws.OpCode {
	if f.op == 0 {
		return ws.OpText
	}
	return f.op
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
// close frame with code and reason if its connection takes it, and the
// connection is closed.
func (s *socket) abort(code ws.StatusCode, reason string) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.bye = closeBody(code, reason)
	q := s.queue
	s.queue = nil
	s.startWriterLocked()
	s.mu.Unlock()
	for _, f := range q {
		f.d.finish(false)
	}
	// Unstick a write blocked on a client that stopped reading.
	s.conn.conn.SetWriteDeadline(time.Now().Add(time.Second))
}

// closeAfter queues a last frame (closed, say) and closes the socket once
// it is written.
func (s *socket) closeAfter(data []byte, code ws.StatusCode, reason string) {
	s.send(outFrame{data: data, close: &closing{code: code, reason: reason}})
}

// readLoop hands each client data frame to fn, as a text frame or the
// reason it is refused, until the connection ends, answering pings and
// closes on the way.
func (s *socket) readLoop(fn func(data []byte, refused error)) {
	control := func(op ws.OpCode, p []byte) {
		switch op {
		case ws.OpPing:
			s.sendControl(ws.OpPong, p)
		case ws.OpPong:
			s.ponged.Store(time.Now().UnixNano())
		case ws.OpClose:
			code, _ := ws.ParseCloseFrameData(p)
			if !code.Empty() {
				s.abort(code, "") // echo the client's close
			}
		}
	}
	for {
		m, err := s.conn.readMessage(MaxFrame+1, control)
		var ce *closeError
		switch {
		case errors.As(err, &ce):
			s.abort(ce.code, ce.reason)
			return
		case err != nil:
			s.abort(ws.StatusNormalClosure, "")
			return
		case m.size > MaxFrame:
			fn(nil, badFrame("frame_too_large", "frame of %d bytes exceeds the %d byte limit; chunk it or link it by url", m.size, MaxFrame))
		case m.op != ws.OpText:
			fn(nil, badFrame("binary_frame", "binary frames are not supported; send JSON text"))
		case !utf8.Valid(m.data):
			s.abort(ws.StatusInvalidFramePayloadData, "invalid UTF-8 in a text frame") // RFC 6455 8.1
			return
		default:
			fn(m.data, nil)
		}
	}
}

// sendControl queues a control frame; control frames skip the queue bound.
func (s *socket) sendControl(op ws.OpCode, payload []byte) {
	s.send(outFrame{op: op, data: payload})
}

// ping sends a keepalive ping; a socket that has not answered the previous
// one (sent a PingInterval ago) is closed.
func (s *socket) ping() {
	if last := s.pinged.Load(); last != 0 && s.ponged.Load() < last {
		s.abort(ws.StatusGoingAway, "keepalive ping unanswered")
		return
	}
	s.pinged.Store(time.Now().UnixNano())
	s.sendControl(ws.OpPing, nil)
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
