package node

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// wsClient is a WebSocket client of a node's wall, reading frames in the
// background.
type wsClient struct {
	t      testing.TB
	conn   *websocket.Conn
	frames chan map[string]any
	done   chan struct{}
	status websocket.StatusCode // close status, once done
}

// wsURL is the wall address of cluster on n with query q.
func wsURL(n *Node, cluster string, q url.Values) string {
	return "ws" + strings.TrimPrefix(n.URL(), "http") + "/v1/clusters/" + cluster + "/ws?" + q.Encode()
}

// dialWall connects to cluster on n; it fails the test unless the upgrade works.
func dialWall(t testing.TB, n *Node, cluster string, q url.Values) *wsClient {
	t.Helper()
	c, resp, err := tryDialWall(t, n, cluster, q)
	if err != nil {
		t.Fatalf("dial %s: %v (%v)", wsURL(n, cluster, q), err, resp)
	}
	return c
}

// enterWall dials like dialWall and waits for the welcome frame.
func enterWall(t testing.TB, n *Node, cluster string, q url.Values) *wsClient {
	t.Helper()
	c := dialWall(t, n, cluster, q)
	c.next("welcome")
	return c
}

func tryDialWall(t testing.TB, n *Node, cluster string, q url.Values) (*wsClient, *http.Response, error) {
	return tryDialWallWith(t, n, cluster, q, nil)
}

// tryDialWallWith dials like tryDialWall with the upgrade request's header h.
func tryDialWallWith(t testing.TB, n *Node, cluster string, q url.Values, h http.Header) (*wsClient, *http.Response, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, resp, err := websocket.Dial(ctx, wsURL(n, cluster, q), &websocket.DialOptions{HTTPHeader: h})
	if err != nil {
		return nil, resp, err
	}
	conn.SetReadLimit(1 << 20)
	c := &wsClient{t: t, conn: conn, frames: make(chan map[string]any, 1024), done: make(chan struct{})}
	go c.read()
	t.Cleanup(func() { conn.CloseNow() })
	return c, resp, nil
}

func (c *wsClient) read() {
	defer close(c.done)
	for {
		_, data, err := c.conn.Read(context.Background())
		if err != nil {
			c.status = websocket.CloseStatus(err)
			close(c.frames)
			return
		}
		var f map[string]any
		if err := json.Unmarshal(data, &f); err != nil {
			f = map[string]any{"kind": "unparseable", "raw": string(data)}
		}
		f["_bytes"] = len(data) // the frame's size on the wire
		f["_at"] = time.Now()   // when it came
		c.frames <- f
	}
}

// next returns the next frame of kind, skipping presence frames unless
// kind is presence; it fails the test after a timeout.
func (c *wsClient) next(kind string) map[string]any {
	c.t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case f, ok := <-c.frames:
			if !ok {
				c.t.Fatalf("socket closed (%v) while waiting for a %s frame", c.status, kind)
			}
			if f["kind"] == kind {
				return f
			}
			if f["kind"] != "presence" {
				c.t.Fatalf("want a %s frame, got %v", kind, f)
			}
		case <-timeout:
			c.t.Fatalf("no %s frame within 10s", kind)
		}
	}
}

// quiet asserts that no frame other than presence arrives for d.
func (c *wsClient) quiet(d time.Duration) {
	c.t.Helper()
	timeout := time.After(d)
	for {
		select {
		case f, ok := <-c.frames:
			if ok && f["kind"] != "presence" {
				c.t.Fatalf("unexpected frame %v", f)
			}
		case <-timeout:
			return
		}
	}
}

func (c *wsClient) send(v any) {
	c.t.Helper()
	var b []byte
	if s, ok := v.(string); ok {
		b = []byte(s)
	} else {
		b, _ = json.Marshal(v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.conn.Write(ctx, websocket.MessageText, b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// say sends text from c, checks that rx receives it and that c's ack
// counts delivered sockets.
func (c *wsClient) say(text string, rx *wsClient, delivered int) {
	c.t.Helper()
	c.send(text)
	if f := rx.next("message"); f["payload"] != text {
		c.t.Fatalf("got %v, want the message %q", f, text)
	}
	if a := c.next("ack"); a["delivered"] != float64(delivered) {
		c.t.Fatalf("ack of %q: %v, want %d delivered", text, a, delivered)
	}
}

// createCluster creates a cluster through n and returns the response.
func createCluster(t testing.TB, n *Node, body string) map[string]any {
	t.Helper()
	st, v := call(t, n, "POST", "/v1/clusters", body)
	if st != 201 {
		t.Fatalf("create cluster on %s: %d %v", n.URL(), st, v)
	}
	return v
}

func q(kv ...string) url.Values {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Set(kv[i], kv[i+1])
	}
	return v
}
