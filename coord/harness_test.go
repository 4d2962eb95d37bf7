package coord_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/agentmesh/mesh/coord"
	"github.com/agentmesh/mesh/internal/clock"
	"github.com/agentmesh/mesh/internal/testkit"
)

// t0 is the manual clock's start.
var t0 = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)

// project copies the example project into a temporary folder, without
// the daemon's own files.
func project(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join("..", "examples", "coord-project")
	err := filepath.WalkDir(src, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if e.IsDir() && e.Name() == ".coord" {
			return filepath.SkipDir // a daemon run on the example left its files
		}
		if e.IsDir() {
			return os.MkdirAll(filepath.Join(dir, rel), 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

type harness struct {
	t   *testing.T
	dir string
	clk *clock.Manual
	d   *coord.Daemon
	url string
}

// start runs a daemon on dir on a random loopback port with a manual
// clock; edit changes the configuration first.
func start(t *testing.T, dir string, edit func(*coord.Config)) *harness {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, dir: dir, clk: clock.NewManual(t0)}
	cfg := coord.DefaultConfig()
	cfg.Dir, cfg.Listener, cfg.Clock, cfg.DeviceID = dir, ln, h.clk, "test-box"
	cfg.Registry = filepath.Join(t.TempDir(), "ports.json")
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if edit != nil {
		edit(&cfg)
	}
	if cfg.Listener != ln {
		ln.Close()
	}
	h.d, err = coord.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.d.Close() })
	h.url = h.d.URL()
	return h
}

// do sends a request as a program does (a body as JSON, no Origin) and
// decodes the JSON answer into out (when not nil).
func (h *harness) do(method, path, body string, out any) int {
	h.t.Helper()
	hdr := http.Header{}
	if body != "" {
		hdr.Set("Content-Type", "application/json")
	}
	return h.doWith(method, path, body, hdr, out)
}

// doWith sends a request with the headers hdr and decodes the JSON answer
// into out (when not nil).
func (h *harness) doWith(method, path, body string, hdr http.Header, out any) int {
	h.t.Helper()
	req, err := http.NewRequest(method, h.url+path, strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	if host := hdr.Get("Host"); host != "" {
		req.Host = host
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if ct := res.Header.Get("Content-Type"); ct != "application/json" {
		h.t.Fatalf("%s %s: Content-Type %q, body %s", method, path, ct, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			h.t.Fatalf("%s %s: %v: %s", method, path, err, b)
		}
	}
	return res.StatusCode
}

func (h *harness) get(path string, out any) {
	h.t.Helper()
	if code := h.do("GET", path, "", out); code != http.StatusOK {
		h.t.Fatalf("GET %s: %d", path, code)
	}
}

// errBody is an error answer.
type errBody struct{ Code, Detail string }

// wantError checks a request fails with status and code.
func (h *harness) wantError(method, path, body string, status int, code string) {
	h.t.Helper()
	var e errBody
	if got := h.do(method, path, body, &e); got != status || e.Code != code || e.Detail == "" {
		h.t.Fatalf("%s %s %s: %d %+v, want %d %s", method, path, body, got, e, status, code)
	}
}

// initiative is the part of an initiative the tests read.
type initiative struct {
	ID          string `json:"id"`
	Title       string `json:"title"`
	Status      string `json:"status"`
	Wall        string `json:"wall"`
	WallOrder   *int   `json:"wall_order"`
	Archived    bool   `json:"archived"`
	CompletedAt string `json:"completed_at"`
	CommitSHA   string `json:"commit_sha"`
	Error       string `json:"error"`
	Tasks       []struct{ ID, Status string }
}

type state struct {
	Cluster struct {
		ID, Name, Type string
		DebugEnabled   bool `json:"debug_enabled"`
		CheckInterval  int  `json:"auto_update_check_interval_sec"`
		Crons          []struct{ ID string }
	}
	Modules []struct{ ID, Name, Status string }
	Roadmap struct {
		Initiatives []initiative
	}
	Docs     []struct{ Path, Title string }
	Warnings []string
}

func (h *harness) state() state {
	h.t.Helper()
	var s state
	h.get("/state", &s)
	return s
}

func (s state) initiative(id string) initiative {
	for _, in := range s.Roadmap.Initiatives {
		if in.ID == id {
			return in
		}
	}
	return initiative{}
}

func (h *harness) walls() map[string][]initiative {
	h.t.Helper()
	var w map[string][]initiative
	h.get("/initiative/walls", &w)
	return w
}

func ids(list []initiative) string {
	var s []string
	for _, in := range list {
		s = append(s, in.ID)
	}
	return strings.Join(s, ",")
}

// write replaces a project file.
func (h *harness) write(rel, content string) {
	h.t.Helper()
	path := filepath.Join(h.dir, rel)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		h.t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) read(rel string) string {
	h.t.Helper()
	b, err := os.ReadFile(filepath.Join(h.dir, rel))
	if err != nil {
		h.t.Fatal(err)
	}
	return string(b)
}

// socket is a WebSocket client of /events; a goroutine reads its events
// into a channel (closed when the socket ends), so that a test can wait
// for one while moving the clock.
type socket struct {
	t      *testing.T
	conn   *websocket.Conn
	events chan event
	err    error // why the socket ended, once events is closed
}

func (h *harness) socket() *socket {
	h.t.Helper()
	return h.socketWith(nil)
}

func (h *harness) socketWith(opts *websocket.DialOptions) *socket {
	h.t.Helper()
	before := h.sockets()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, strings.Replace(h.url, "http", "ws", 1)+"/events", opts)
	if err != nil {
		h.t.Fatal(err)
	}
	s := &socket{t: h.t, conn: conn, events: make(chan event, 1024)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(s.events)
		for {
			_, b, err := conn.Read(context.Background())
			if err != nil {
				s.err = err
				return
			}
			var ev event
			if err := json.Unmarshal(b, &ev); err != nil {
				s.err = fmt.Errorf("event %s: %w", b, err)
				return
			}
			s.events <- ev
		}
	}()
	h.t.Cleanup(func() {
		conn.CloseNow()
		<-done
	})
	// Events published before the daemon registers the socket miss it.
	testkit.Eventually(h.t, 10*time.Second, func() bool { return h.sockets() > before }, "timed out waiting for the socket to be registered")
	return s
}

// sockets is the number of event sockets the daemon counts.
func (h *harness) sockets() int {
	var hl struct {
		N int `json:"event_clients"`
	}
	h.get("/health", &hl)
	return hl.N
}

type event map[string]any

// next returns the next event of type typ, skipping others, within 10 s.
func (s *socket) next(typ string) event {
	s.t.Helper()
	evs := s.until(typ, nil)
	return evs[len(evs)-1]
}

// until returns the events up to and including the next one of type typ,
// calling advance (when not nil) while it waits.
func (s *socket) until(typ string, advance func()) []event {
	s.t.Helper()
	deadline := time.After(10 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	var evs []event
	for {
		select {
		case ev, ok := <-s.events:
			if !ok {
				s.t.Fatalf("waiting for %s: the socket ended: %v", typ, s.err)
			}
			if ts, _ := ev["ts"].(string); ts == "" {
				s.t.Fatalf("event without a ts: %v", ev)
			}
			if evs = append(evs, ev); ev["type"] == typ {
				return evs
			}
		case <-tick.C:
			if advance != nil {
				advance()
			}
		case <-deadline:
			s.t.Fatalf("timed out waiting for %s", typ)
		}
	}
}

// closed waits for the socket to end, within 10 s.
func (s *socket) closed() error {
	s.t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case _, ok := <-s.events:
			if !ok {
				return s.err
			}
		case <-deadline:
			s.t.Fatal("the socket is still open")
		}
	}
}

// poll moves the clock past one file-change poll.
func (h *harness) poll() { h.clk.Advance(1500 * time.Millisecond) }
