package coord

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// queueLen is how many messages may wait for one socket; a socket that
// falls that far behind is dropped like one that takes too long.
const queueLen = 256

// hub fans events out to the /events sockets.
type hub struct {
	log     *slog.Logger
	timeout time.Duration
	now     func() time.Time
	mu      sync.Mutex
	clients map[*client]struct{}
	closed  bool
	wg      sync.WaitGroup
}

type client struct {
	conn   *websocket.Conn
	send   chan []byte
	once   sync.Once
	done   chan struct{}
	code   websocket.StatusCode
	reason string
}

func newHub(log *slog.Logger, timeout time.Duration, now func() time.Time) *hub {
	return &hub{log: log, timeout: timeout, now: now, clients: map[*client]struct{}{}}
}

// publish sends an event of type typ, with ts and fields, to every socket.
func (h *hub) publish(typ string, fields map[string]any) {
	ev := make(map[string]any, len(fields)+2)
	for k, v := range fields {
		ev[k] = v
	}
	ev["type"], ev["ts"] = typ, h.now().UTC()
	b, err := json.Marshal(ev)
	if err != nil {
		h.log.Error("event not encodable", "type", typ, "err", err)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for c := range h.clients {
		select {
		case c.send <- b:
		default:
			h.log.Warn("events: a socket fell behind; dropped")
			c.drop(websocket.StatusPolicyViolation, "too slow")
		}
	}
}

// serve runs one socket until it closes or the hub does.
func (h *hub) serve(w http.ResponseWriter, r *http.Request, origins []string) {
	conn, err := websocket.Accept(w, r, &websocket.AcceptOptions{OriginPatterns: origins})
	if err != nil {
		return // Accept has answered
	}
	c := &client{conn: conn, send: make(chan []byte, queueLen), done: make(chan struct{})}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		conn.Close(websocket.StatusGoingAway, "shutting down")
		return
	}
	h.clients[c] = struct{}{}
	h.wg.Add(1)
	h.mu.Unlock()
	defer h.wg.Done()
	defer h.remove(c)
	readCtx := ignoreReads(conn)
	defer func() { <-readCtx.Done() }() // every way out closes the socket
	for {
		select {
		case <-readCtx.Done():
			return // the client closed (CloseRead answered it) or went away
		case <-c.done:
			if c.code == websocket.StatusGoingAway {
				conn.Close(c.code, c.reason)
			} else {
				// A slow peer would hold a polite close handshake.
				conn.CloseNow()
			}
			return
		case b := <-c.send:
			ctx, cancel := context.WithTimeout(context.Background(), h.timeout)
			err := conn.Write(ctx, websocket.MessageText, b)
			cancel()
			if err != nil {
				h.log.Warn("events: a socket did not take a message in time; dropped", "timeout", h.timeout, "err", err)
				conn.CloseNow()
				return
			}
		}
	}
}

// clientMessageMax bounds a message a client sends: the daemon reads and
// ignores what a client sends, a message at a time, and closes the socket
// (1009, message too big) on one that is larger.
const clientMessageMax = 4 << 10

// ignoreReads reads the socket until it ends, discarding the client's
// messages (reading is what answers pings and the close); the context it
// returns ends with the socket.
func ignoreReads(conn *websocket.Conn) context.Context {
	conn.SetReadLimit(clientMessageMax)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		defer cancel()
		for {
			_, r, err := conn.Reader(ctx)
			if err == nil {
				_, err = io.Copy(io.Discard, r)
			}
			if err != nil {
				return
			}
		}
	}()
	return ctx
}

// drop asks the socket's goroutine to close it with code.
func (c *client) drop(code websocket.StatusCode, reason string) {
	c.once.Do(func() {
		c.code, c.reason = code, reason
		close(c.done)
	})
}

func (h *hub) remove(c *client) {
	h.mu.Lock()
	delete(h.clients, c)
	h.mu.Unlock()
}

// count is the number of sockets.
func (h *hub) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.clients)
}

// close drops every socket and waits for their goroutines.
func (h *hub) close() {
	h.mu.Lock()
	h.closed = true
	for c := range h.clients {
		c.drop(websocket.StatusGoingAway, "shutting down")
	}
	h.mu.Unlock()
	h.wg.Wait()
}
