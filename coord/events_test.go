package coord_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/agentmesh/mesh/coord"
	"github.com/agentmesh/mesh/internal/httpx"
	"github.com/agentmesh/mesh/internal/testkit"
)

// TestHeartbeat: every 20 s of the clock, each socket gets a heartbeat.
func TestHeartbeat(t *testing.T) {
	t.Parallel()
	h := start(t, project(t), nil)
	a, b := h.socket(), h.socket()
	h.clk.Advance(19 * time.Second)
	h.clk.Advance(time.Second)
	for _, s := range []*socket{a, b} {
		if ev := s.next("heartbeat"); ev["ts"] != t0.Add(20*time.Second).Format(time.RFC3339Nano) {
			t.Fatalf("heartbeat %v", ev)
		}
	}
}

// stallingListener hands out connections whose writes can be made to
// block, as a client that stopped reading blocks them once its window and
// the socket buffers are full.
type stallingListener struct {
	net.Listener
	mu    sync.Mutex
	conns []*stallingConn
}

type stallingConn struct {
	net.Conn
	stall  chan struct{} // closed: writes block
	closed chan struct{}
	once   sync.Once
}

func (l *stallingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	sc := &stallingConn{Conn: c, stall: make(chan struct{}), closed: make(chan struct{})}
	l.mu.Lock()
	l.conns = append(l.conns, sc)
	l.mu.Unlock()
	return sc, nil
}

func (c *stallingConn) Write(b []byte) (int, error) {
	select {
	case <-c.stall:
		<-c.closed
		return 0, net.ErrClosed
	default:
		return c.Conn.Write(b)
	}
}

func (c *stallingConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// TestASlowSocketIsDropped: a socket that does not take a message within
// the send timeout is dropped; the others keep receiving.
func TestASlowSocketIsDropped(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sl := &stallingListener{Listener: ln}
	h := start(t, project(t), func(c *coord.Config) { c.Listener, c.SendTimeout = sl, 200*time.Millisecond })
	fast := h.socket()
	// The slow socket's connection is the one whose peer is its local
	// address.
	var local net.Addr
	dialer := &net.Dialer{}
	slow := h.socketWith(&websocket.DialOptions{HTTPClient: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dialer.DialContext(ctx, network, addr)
			if err == nil {
				local = c.LocalAddr()
			}
			return c, err
		}}}})
	sl.mu.Lock()
	for _, c := range sl.conns {
		if c.RemoteAddr().String() == local.String() {
			close(c.stall)
		}
	}
	sl.mu.Unlock()

	h.clk.Advance(20 * time.Second)
	fast.next("heartbeat")
	slow.closed()
	testkit.Eventually(t, 10*time.Second, func() bool { return h.sockets() == 1 }, "timed out waiting for one socket left")
	h.clk.Advance(20 * time.Second)
	fast.next("heartbeat")
}

// TestAHandlerFailureIs500AndTheSocketStays: a handler's unexpected error
// or panic answers 500 with a JSON body that reveals nothing, and the event
// socket stays up.
func TestAHandlerFailureIs500AndTheSocketStays(t *testing.T) {
	t.Parallel()
	h := start(t, project(t), nil)
	ws := h.socket()
	h.d.HandleForTest("GET /fail", httpx.Handle(nil, func(http.ResponseWriter, *http.Request) error {
		return errors.New("disk on fire at /secret/path")
	}))
	h.d.HandleForTest("GET /panic", http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") }))
	for _, path := range []string{"/fail", "/panic"} {
		h.wantError("GET", path, "", 500, "internal")
	}
	h.clk.Advance(20 * time.Second)
	ws.next("heartbeat")
	h.wantError("GET", "/nope", "", 404, "not_found")
}

// TestAllowedOriginsMayReadAndConnect: a page of an allowed origin reads
// answers (CORS) and opens /events; another origin's page does neither.
func TestAllowedOriginsMayReadAndConnect(t *testing.T) {
	t.Parallel()
	h := start(t, project(t), func(c *coord.Config) { c.AllowedOrigins = []string{"dash.example.com"} })
	for origin, allowed := range map[string]bool{"https://dash.example.com": true, "https://evil.example.com": false} {
		req, _ := http.NewRequest("OPTIONS", h.url+"/initiative/reorder", nil)
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", "POST")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if got := res.Header.Get("Access-Control-Allow-Origin") == origin; got != allowed {
			t.Fatalf("%s: preflight %d %v", origin, res.StatusCode, res.Header)
		}
		req, _ = http.NewRequest("GET", h.url+"/state", nil)
		req.Header.Set("Origin", origin)
		if res, err = http.DefaultClient.Do(req); err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if got := res.Header.Get("Access-Control-Allow-Origin") == origin; got != allowed {
			t.Fatalf("%s: GET %v", origin, res.Header)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		conn, _, err := websocket.Dial(ctx, strings.Replace(h.url, "http", "ws", 1)+"/events",
			&websocket.DialOptions{HTTPHeader: http.Header{"Origin": {origin}}})
		cancel()
		if (err == nil) != allowed {
			t.Fatalf("%s: dial %v", origin, err)
		}
		if conn != nil {
			conn.CloseNow()
		}
	}
}
