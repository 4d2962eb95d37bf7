package wall

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/cmdlog"
	"github.com/agentmesh/mesh/internal/httpx"
	"github.com/agentmesh/mesh/internal/storetest"
	"github.com/agentmesh/mesh/internal/testkit"
	"github.com/agentmesh/mesh/p2p"
)

// TestMain runs up to 8 tests at once: they mostly wait on loopback and
// timers (3 s of CPU in 30, one at a time).
func TestMain(m *testing.M) { testkit.MainWaiting(m, 8) }

// harness is one node's wall alone: its own directory, a libp2p host on
// loopback and the HTTP surface on an httptest server.
type harness struct {
	t    *testing.T
	svc  *Service
	host *p2p.Host
	srv  *httptest.Server
	cat  *Catalog
	log  *cmdlog.Log
}

func newHarness(t *testing.T, tweak func(*Config)) *harness {
	t.Helper()
	return newHarnessOn(t, p2p.Config{Rendezvous: true}, tweak)
}

// joinHarness is a harness whose host is not a rendezvous node: boot is
// its bootstrap peer, and rendezvous, as for a node of a mesh.
func joinHarness(t *testing.T, boot *harness, tweak func(*Config)) *harness {
	t.Helper()
	at := peer.AddrInfo{ID: boot.host.ID(), Addrs: boot.host.Libp2p().Addrs()}
	h := newHarnessOn(t, p2p.Config{Bootstrap: []peer.AddrInfo{at}}, tweak)
	testkit.Eventually(t, 10*time.Second, func() bool { return h.host.Connected(at.ID) }, "never connected to the bootstrap peer")
	return h
}

// newHarnessOn is newHarness on a host configured by hc, with a fresh key
// and a loopback address.
func newHarnessOn(t *testing.T, hc p2p.Config, tweak func(*Config)) *harness {
	t.Helper()
	log := storetest.Log(t)
	hc.Key = identity.GenerateKey()
	if hc.Listen == nil {
		hc.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
	}
	host, err := p2p.New(hc)
	if err != nil {
		t.Fatal(err)
	}
	if err := host.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { host.Close() })
	h := &harness{t: t, host: host, cat: NewCatalog(log), log: log}
	mux := httpx.NewMux()
	h.srv = httptest.NewServer(httpx.Recover(nil, mux))
	cfg := Config{Catalog: h.cat, Log: cmdlog.NewLocal(log), Host: host, PublicURL: h.srv.URL,
		SocketRate: DefaultSocketRate, RoomRate: DefaultRoomRate}
	if tweak != nil {
		tweak(&cfg)
	}
	if h.svc, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	h.svc.Routes(mux)
	if err := h.svc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.srv.Close(); h.svc.Close() })
	return h
}

// call makes an HTTP request and decodes the JSON answer.
func (h *harness) call(method, path, body string, hdr ...string) (int, map[string]any) {
	h.t.Helper()
	req, _ := http.NewRequest(method, h.srv.URL+path, strings.NewReader(body))
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var v map[string]any
	if err := json.Unmarshal(raw, &v); err != nil {
		h.t.Fatalf("%s %s: status %d, body not JSON: %q", method, path, resp.StatusCode, raw)
	}
	return resp.StatusCode, v
}

func (h *harness) create(body string) map[string]any {
	h.t.Helper()
	st, v := h.call("POST", "/v1/clusters", body)
	if st != 201 {
		h.t.Fatalf("create: %d %v", st, v)
	}
	return v
}

// client is a WebSocket client of the harness.
type client struct {
	t        *testing.T
	conn     *websocket.Conn
	frames   chan map[string]any
	closeErr error // why the connection ended, once frames is closed
}

func (h *harness) dial(id string, q url.Values) *client {
	h.t.Helper()
	c, resp, err := h.tryDial(id, q)
	if err != nil {
		h.t.Fatalf("dial: %v %v", err, resp)
	}
	return c
}

func (h *harness) tryDial(id string, q url.Values) (*client, *http.Response, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	u := "ws" + strings.TrimPrefix(h.srv.URL, "http") + "/v1/clusters/" + id + "/ws?" + q.Encode()
	conn, resp, err := websocket.Dial(ctx, u, nil)
	if err != nil {
		return nil, resp, err
	}
	conn.SetReadLimit(4 << 20)
	c := &client{t: h.t, conn: conn, frames: make(chan map[string]any, 4096)}
	h.t.Cleanup(func() { conn.CloseNow() })
	return c, resp, nil
}

// refusedUpgrade asks for cluster id's socket with query, as a WebSocket
// upgrade or a plain GET, and returns the status and JSON body of a
// refusal.
func (h *harness) refusedUpgrade(id, query string, upgrade bool) (int, map[string]any) {
	h.t.Helper()
	req, _ := http.NewRequest("GET", h.srv.URL+"/v1/clusters/"+id+"/ws?"+query, nil)
	if upgrade {
		setUpgrade(req.Header)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body
}

// setUpgrade makes h a WebSocket handshake's (RFC 6455 4.1).
func setUpgrade(h http.Header) {
	h.Set("Connection", "Upgrade")
	h.Set("Upgrade", "websocket")
	h.Set("Sec-WebSocket-Version", "13")
	h.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
}

// listen reads frames in the background (a client that never calls it
// never reads: a slow consumer).
func (c *client) listen() *client {
	go func() {
		defer close(c.frames)
		for {
			_, data, err := c.conn.Read(context.Background())
			if err != nil {
				c.closeErr = err
				return
			}
			var f map[string]any
			json.Unmarshal(data, &f)
			if f != nil {
				f["_bytes"] = len(data) // the frame's size on the wire
			}
			c.frames <- f
		}
	}()
	return c
}

func (c *client) next(kind string) map[string]any {
	c.t.Helper()
	return c.nextOf(kind)
}

// nextOf returns the next frame of one of kinds, skipping presence frames;
// any other frame fails the test.
func (c *client) nextOf(kinds ...string) map[string]any {
	c.t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case f, ok := <-c.frames:
			if !ok {
				c.t.Fatalf("socket closed (%v) while waiting for %v", c.closeErr, kinds)
			}
			if k, _ := f["kind"].(string); slices.Contains(kinds, k) {
				return f
			}
			if f["kind"] != KindPresence {
				c.t.Fatalf("want %v, got %v", kinds, f)
			}
		case <-timeout:
			c.t.Fatalf("no %v frame within 10s", kinds)
		}
	}
}

// countUntilQuiet counts the frames of kind that arrive until none has for
// quiet.
func (c *client) countUntilQuiet(kind string, quiet time.Duration) int {
	n := 0
	for {
		select {
		case f := <-c.frames:
			if f["kind"] == kind {
				n++
			}
		case <-time.After(quiet):
			return n
		}
	}
}

func (c *client) write(typ websocket.MessageType, b []byte) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.conn.Write(ctx, typ, b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

func (c *client) send(v any) {
	c.t.Helper()
	if s, ok := v.(string); ok {
		c.write(websocket.MessageText, []byte(s))
		return
	}
	b, _ := json.Marshal(v)
	c.write(websocket.MessageText, b)
}

func vals(kv ...string) url.Values {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Set(kv[i], kv[i+1])
	}
	return v
}
