package wall

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// Socket limits.
const (
	// maxMessage is the largest WebSocket message read at all: frames
	// between MaxFrame and this get an error frame and the socket stays
	// open; larger ones close it (1009, message too big).
	maxMessage = 1 << 20
	// writeTimeout bounds one frame's write to a client.
	writeTimeout = 10 * time.Second
	// DefaultSendQueue is how many frames may wait for a slow client
	// before the socket is closed (1008, slow consumer): a slow client
	// never stalls a room.
	DefaultSendQueue = 256
)

// Close codes and reasons.
const (
	closeSlow     = websocket.StatusPolicyViolation
	reasonSlow    = "slow consumer: send queue full"
	reasonDeleted = "cluster deleted"
	reasonNodeEnd = "node shutting down"
)

// socket is one client connection to a room.
type socket struct {
	conn   *websocket.Conn
	room   *room
	handle string
	did    string
	vis    string
	owner  bool
	limit  int             // send queue bound
	wg     *sync.WaitGroup // owns the socket's writer and closer goroutines

	ctx    context.Context // ends when the socket closes
	cancel context.CancelFunc

	mu      sync.Mutex
	queue   []outFrame
	writing bool
	closed  bool
}

// outFrame is a frame waiting to be written, and who counts its delivery.
type outFrame struct {
	data  []byte
	d     *delivery // nil: not counted (ghost sockets, acks, errors)
	close *closing  // close the socket once this frame is written
}

type closing struct {
	code   websocket.StatusCode
	reason string
}

func newSocket(conn *websocket.Conn, wg *sync.WaitGroup, handle, did, vis string, owner bool, limit int) *socket {
	s := &socket{conn: conn, wg: wg, handle: handle, did: did, vis: vis, owner: owner, limit: limit}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	conn.SetReadLimit(maxMessage)
	return s
}

func (s *socket) ghost() bool { return s.vis == VisGhost }

// send queues a frame; it never blocks. A socket whose queue is full is
// closed as a slow consumer.
func (s *socket) send(f outFrame) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		f.d.finish(false)
		return
	}
	if len(s.queue) >= s.limit {
		s.mu.Unlock()
		f.d.finish(false)
		if s.room != nil {
			s.room.svc.metrics.slow.Inc()
		}
		s.abort(closeSlow, reasonSlow)
		return
	}
	s.queue = append(s.queue, f)
	start := !s.writing
	s.writing = true
	s.mu.Unlock()
	if start {
		s.wg.Go(s.writeLoop)
	}
}

// writeLoop writes queued frames in order and exits when the queue is
// empty, so that an idle socket holds no writer goroutine.
func (s *socket) writeLoop() {
	for {
		s.mu.Lock()
		if len(s.queue) == 0 || s.closed {
			s.writing = false
			s.mu.Unlock()
			return
		}
		f := s.queue[0]
		s.queue[0] = outFrame{}
		s.queue = s.queue[1:]
		if len(s.queue) == 0 {
			s.queue = nil // let the backing array go
		}
		s.mu.Unlock()

		ctx, cancel := context.WithTimeout(s.ctx, writeTimeout)
		err := s.conn.Write(ctx, websocket.MessageText, f.data)
		cancel()
		f.d.finish(err == nil)
		switch {
		case err != nil:
			s.abort(websocket.StatusInternalError, "write failed")
		case f.close != nil:
			s.abort(f.close.code, f.close.reason)
		}
	}
}

// abort closes the socket now, failing whatever is still queued.
func (s *socket) abort(code websocket.StatusCode, reason string) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	q := s.queue
	s.queue = nil
	s.mu.Unlock()
	for _, f := range q {
		f.d.finish(false)
	}
	s.cancel()
	// The close handshake waits (5 s at most) for the client's answer.
	s.wg.Go(func() { s.conn.Close(code, reason) })
}

// closeAfter queues a last frame (closed, say) and closes the socket once
// it is written.
func (s *socket) closeAfter(data []byte, code websocket.StatusCode, reason string) {
	s.send(outFrame{data: data, close: &closing{code: code, reason: reason}})
}

// readLoop hands each client frame to fn until the connection ends.
func (s *socket) readLoop(fn func(data []byte)) {
	for {
		typ, r, err := s.conn.Reader(s.ctx)
		if err != nil {
			return
		}
		data, err := io.ReadAll(io.LimitReader(r, MaxFrame+1))
		if err != nil {
			return
		}
		if len(data) > MaxFrame {
			n, err := io.Copy(io.Discard, r)
			if err != nil {
				return
			}
			s.send(outFrame{data: errorFrameBytes("frame_too_large",
				"frame of %d bytes exceeds the %d byte limit; chunk it or link it by url", int64(len(data))+n, MaxFrame)})
			continue
		}
		if typ != websocket.MessageText {
			s.send(outFrame{data: errorFrameBytes("binary_frame", "binary frames are not supported; send JSON text")})
			continue
		}
		fn(data)
	}
}

// ping checks that the client still answers; a socket that does not is closed.
func (s *socket) ping(timeout time.Duration) {
	ctx, cancel := context.WithTimeout(s.ctx, timeout)
	defer cancel()
	if err := s.conn.Ping(ctx); err != nil && !errors.Is(err, context.Canceled) {
		s.abort(websocket.StatusGoingAway, "keepalive ping unanswered")
	}
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
