package coord_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/agentmesh/mesh/coord"
	"github.com/agentmesh/mesh/internal/testkit"
)

// The origins of the guard tests: a page of the dashboard's (allowed)
// origin and one of somebody else's.
const (
	dashOrigin = "http://localhost:3000"
	evilOrigin = "http://evil.example"
)

// guarded is a daemon whose agent records each turn it runs in a file
// (marker), with a site whose reads are counted: what a refused request
// must never reach.
type guarded struct {
	*harness
	marker string
	site   *site
}

func startGuarded(t *testing.T, edit func(*coord.Config)) *guarded {
	t.Helper()
	g := &guarded{marker: filepath.Join(t.TempDir(), "agent-ran")}
	var url string
	g.site, url = newSite(t)
	g.site.publish(coord.Version, "same binary", false)
	g.harness = start(t, project(t), func(c *coord.Config) {
		c.Chat.AgentCmd = `echo "$MESH_COORD_CONV" >> ` + g.marker + `; echo done`
		c.SiteURL, c.InsecureSite, c.Executable = url, true, filepath.Join(t.TempDir(), "mesh")
		if edit != nil {
			edit(c)
		}
	})
	return g
}

// token is the daemon's token, as a program of the machine reads it.
func (h *harness) token() string {
	h.t.Helper()
	b, err := os.ReadFile(h.d.TokenFile())
	if err != nil {
		h.t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// agentRuns is what the agent recorded: the conversations of its turns.
func (g *guarded) agentRuns() string {
	b, _ := os.ReadFile(g.marker)
	return string(b)
}

// files hashes every file of the project but the debug log (where the
// daemon notes what it refused).
func files(t *testing.T, dir string) map[string][32]byte {
	t.Helper()
	out := map[string][32]byte{}
	err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if rel == filepath.Join(".coord", "debug.jsonl") {
			return nil
		}
		b, err := os.ReadFile(path)
		out[rel] = sha256.Sum256(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// writeRoutes are the routes of the daemon's table that change something
// (every method but GET), with {id} filled in.
func writeRoutes(t *testing.T, d *coord.Daemon) []string {
	t.Helper()
	var out []string
	for _, p := range d.RoutesForTest() {
		method, path, _ := strings.Cut(p, " ")
		if method == "GET" {
			continue
		}
		out = append(out, method+" "+strings.ReplaceAll(path, "{id}", "x"))
	}
	if len(out) < 6 {
		t.Fatalf("write routes %v: the route table is not what this test reads", out)
	}
	return out
}

// routeBodies are bodies each write route would act on, were it reached;
// a route not listed is sent {}.
var routeBodies = map[string]string{
	"POST /chat/dispatch":      `{"conv":"x","text":"hi"}`,
	"POST /runs":               `{"conv":"r","initiative":"auth"}`,
	"POST /initiative/reorder": `{"id":"search","wall":"archived","order":0}`,
	"POST /debug/log":          `{"msg":"from a page"}`,
}

// matrix records requests and their answers, for the test's log.
type matrix struct {
	mu   sync.Mutex
	rows []string
}

func (m *matrix) add(route, request string, status int, code string) {
	m.mu.Lock()
	m.rows = append(m.rows, fmt.Sprintf("| %s | %s | %d | %s |", route, request, status, code))
	m.mu.Unlock()
}

func (m *matrix) log(t *testing.T) {
	t.Logf("\n| route | request | status | code |\n|---|---|---|---|\n%s", strings.Join(m.rows, "\n"))
}

// attempt is a way a request is sent: its headers (with the daemon's
// token for "TOKEN") and whether it sends the route's body.
type attempt struct {
	name   string
	hdr    map[string]string
	status int
	code   string
}

// crossSite is every way a browser page of another site can send a
// write, and what a program or the dashboard sends wrongly.
var crossSite = []attempt{
	{"Origin foreign, JSON", map[string]string{"Origin": evilOrigin, "Content-Type": "application/json"}, 403, "origin_not_allowed"},
	{"Origin foreign, text/plain (fetch no-cors, form)", map[string]string{"Origin": evilOrigin, "Content-Type": "text/plain"}, 403, "origin_not_allowed"},
	{"Origin foreign, form-urlencoded", map[string]string{"Origin": evilOrigin, "Content-Type": "application/x-www-form-urlencoded"}, 403, "origin_not_allowed"},
	{"Origin foreign, multipart", map[string]string{"Origin": evilOrigin, "Content-Type": "multipart/form-data; boundary=b"}, 403, "origin_not_allowed"},
	{"Origin foreign + the token, JSON", map[string]string{"Origin": evilOrigin, "Content-Type": "application/json", "Authorization": "Bearer TOKEN"}, 403, "origin_not_allowed"},
	{"Origin null, text/plain", map[string]string{"Origin": "null", "Content-Type": "text/plain"}, 403, "origin_not_allowed"},
	{"Origin null, JSON", map[string]string{"Origin": "null", "Content-Type": "application/json"}, 403, "origin_not_allowed"},
	{"no Origin, Sec-Fetch-Site cross-site, JSON", map[string]string{"Sec-Fetch-Site": "cross-site", "Content-Type": "application/json"}, 403, "cross_site"},
	{"no Origin, Sec-Fetch-Site same-site, form-urlencoded", map[string]string{"Sec-Fetch-Site": "same-site", "Content-Type": "application/x-www-form-urlencoded"}, 403, "cross_site"},
	{"no Origin, text/plain", map[string]string{"Content-Type": "text/plain"}, 415, "unsupported_media_type"},
	{"no Origin, form-urlencoded", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, 415, "unsupported_media_type"},
	{"no Origin, multipart", map[string]string{"Content-Type": "multipart/form-data; boundary=b"}, 415, "unsupported_media_type"},
	{"no Origin, no Content-Type, a body", map[string]string{}, 415, "unsupported_media_type"},
	{"Origin allowed, JSON, no token", map[string]string{"Origin": dashOrigin, "Content-Type": "application/json"}, 403, "token_required"},
	{"Origin allowed, JSON, a wrong token", map[string]string{"Origin": dashOrigin, "Content-Type": "application/json", "Authorization": "Bearer nope"}, 403, "bad_token"},
	{"Origin allowed + token, text/plain", map[string]string{"Origin": dashOrigin, "Content-Type": "text/plain", "Authorization": "Bearer TOKEN"}, 415, "unsupported_media_type"},
	{"no Origin, JSON, a wrong token", map[string]string{"Content-Type": "application/json", "Authorization": "Bearer nope"}, 403, "bad_token"},
}

// try sends a write to route as a describes and checks its answer.
func (g *guarded) try(m *matrix, route string, a attempt) {
	g.t.Helper()
	method, path, _ := strings.Cut(route, " ")
	body, ok := routeBodies[route]
	if !ok {
		body = "{}"
	}
	hdr := http.Header{}
	for k, v := range a.hdr {
		hdr.Set(k, strings.Replace(v, "TOKEN", g.token(), 1))
	}
	var e errBody
	status := g.doWith(method, path, body, hdr, &e)
	m.add(route, a.name, status, e.Code)
	if status != a.status || e.Code != a.code || e.Detail == "" {
		g.t.Errorf("%s, %s: %d %+v, want %d %s", route, a.name, status, e, a.status, a.code)
	}
}

// TestCrossSiteWritesAreRefused: every route that changes something, and
// every other method, refuses each way a page of another site (or an
// opaque one) can send a request, a body that is not JSON, and a page of
// the allowed origin without the token; nothing runs and no file
// changes. The daemon's own clients are still served: a program with
// JSON and no Origin, and the dashboard's origin with the token.
func TestCrossSiteWritesAreRefused(t *testing.T) {
	t.Parallel()
	g := startGuarded(t, func(c *coord.Config) { c.AllowedOrigins = []string{"localhost:3000"} })
	before := files(t, g.dir)
	m := &matrix{}
	defer m.log(t)
	routes := writeRoutes(t, g.d)
	for _, route := range routes {
		for _, a := range crossSite {
			g.try(m, route, a)
		}
		_, path, _ := strings.Cut(route, " ")
		for _, method := range []string{"PUT", "DELETE", "PATCH"} {
			g.try(m, method+" "+path, attempt{"Origin foreign, JSON", map[string]string{"Origin": evilOrigin, "Content-Type": "application/json"}, 403, "origin_not_allowed"})
		}
	}
	g.untouched(before)
	var tail struct{ Events []struct{ Msg string } }
	g.get("/debug/tail", &tail)
	for _, ev := range tail.Events {
		if ev.Msg == "from a page" {
			t.Fatal("a refused debug event was stored")
		}
	}

	// The daemon's own clients: a program (JSON, no Origin) and the
	// dashboard's page with the token.
	served := func(route string, hdr http.Header) {
		method, path, _ := strings.Cut(route, " ")
		var e errBody
		status := g.doWith(method, path, `{}`, hdr, &e)
		m.add(route, "served: "+hdr.Get("Origin")+" JSON", status, e.Code)
		if status == 403 || status == 415 || status == 421 {
			t.Errorf("%s with %v: %d %+v", route, hdr, status, e)
		}
	}
	program := http.Header{"Content-Type": {"application/json"}}
	dash := http.Header{"Content-Type": {"application/json"}, "Origin": {dashOrigin}, "Authorization": {"Bearer " + g.token()}}
	for _, route := range routes {
		served(route, program)
		served(route, dash)
	}
	g.send("c1", "hi", http.StatusOK)
	var d dispatched
	if code := g.doWith("POST", "/chat/dispatch", `{"conv":"c2","text":"hi"}`, dash, &d); code != http.StatusOK || !d.Started {
		t.Fatalf("the dashboard's dispatch: %d %+v", code, d)
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return len(strings.Fields(g.agentRuns())) == 2 }, "timed out waiting for the two turns")
}

// untouched checks that nothing was done: no conversation, no run, no turn
// of the agent, no read of the site, no file of the project changed since
// before.
func (g *guarded) untouched(before map[string][32]byte) {
	g.t.Helper()
	var snap struct{ Conversations []any }
	g.get("/chat/snapshot", &snap)
	if len(snap.Conversations) != 0 || len(g.runs()) != 0 || g.agentRuns() != "" || g.site.count(&g.site.heads) != 0 {
		g.t.Fatalf("a refused request acted: conversations %v, runs %v, agent %q, site reads %d",
			snap.Conversations, g.runs(), g.agentRuns(), g.site.count(&g.site.heads))
	}
	if !maps(before, files(g.t, g.dir)) {
		g.t.Fatal("a refused request changed a file of the project")
	}
}

func maps(a, b map[string][32]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestHostIsChecked: a request whose Host is not the daemon's (a page of a
// rebound name) is refused before any handler, reads, writes and the
// event socket alike; the daemon's own names are served, the port aside.
func TestHostIsChecked(t *testing.T) {
	t.Parallel()
	g := startGuarded(t, func(c *coord.Config) { c.AllowedHosts = []string{"coord.test", "*.dev.test"} })
	port := g.url[strings.LastIndex(g.url, ":")+1:]
	m := &matrix{}
	defer m.log(t)
	cases := []struct {
		host string
		ok   bool
	}{
		{"evil.example:" + port, false}, {"evil.example", false}, {"EVIL.example:" + port, false},
		{"localhost.evil.example:" + port, false}, {"127.0.0.1.evil.example", false}, {"[::2]:" + port, false},
		{"10.0.0.1:" + port, false}, {"dev.test:" + port, false}, {"coord.test.evil:" + port, false},
		{"127.0.0.1:" + port, true}, {"localhost:" + port, true}, {"LocalHost:" + port, true}, {"localhost.:" + port, true},
		{"localhost", true}, {"localhost:1", true}, {"[::1]:" + port, true}, {"[::1]", true}, {"127.0.0.2:" + port, true},
		{"coord.test:" + port, true}, {"a.dev.test", true},
	}
	for _, tc := range cases {
		for _, req := range []struct{ method, path, body string }{
			{"GET", "/state", ""}, {"POST", "/chat/dispatch", `{"conv":"h","text":"hi"}`}, {"POST", "/initiative/reorder", `{"id":"nope","wall":"active","order":0}`},
		} {
			hdr := http.Header{"Host": {tc.host}}
			if req.body != "" {
				hdr.Set("Content-Type", "application/json")
			}
			var e errBody
			status := g.doWith(req.method, req.path, req.body, hdr, &e)
			m.add(req.method+" "+req.path, "Host "+tc.host, status, e.Code)
			if refused := status == 421 && e.Code == "bad_host"; refused == tc.ok {
				t.Errorf("Host %s, %s %s: %d %+v", tc.host, req.method, req.path, status, e)
			}
		}
		status, code := dialEvents(t, g.url, tc.host, nil)
		m.add("GET /events (WebSocket)", "Host "+tc.host, status, code)
		if (status == http.StatusSwitchingProtocols) != tc.ok {
			t.Errorf("Host %s, /events: %d %s", tc.host, status, code)
		}
	}
	allowed := 0
	for _, tc := range cases {
		if tc.ok {
			allowed++
		}
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return strings.Count(g.agentRuns(), "h\n") == allowed }, "timed out waiting for a turn for each allowed Host's dispatch")
	// A request with no Host at all (HTTP/1.0) is not one a browser sends.
	conn, err := net.Dial("tcp", strings.TrimPrefix(g.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprint(conn, "GET /state HTTP/1.0\r\n\r\n")
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	m.add("GET /state", "HTTP/1.0, no Host", res.StatusCode, "")
	if res.StatusCode != 421 {
		t.Fatalf("no Host: %d", res.StatusCode)
	}
}

// dialEvents opens /events with Host host and headers hdr: the status
// of the handshake and the code of a refusal (101 and "" when it opened).
func dialEvents(t *testing.T, url, host string, hdr http.Header) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, res, err := websocket.Dial(ctx, strings.Replace(url, "http", "ws", 1)+"/events", &websocket.DialOptions{Host: host, HTTPHeader: hdr})
	if err == nil {
		conn.CloseNow()
		return http.StatusSwitchingProtocols, ""
	}
	if res == nil {
		t.Fatalf("dial /events: %v", err)
	}
	b, _ := io.ReadAll(res.Body)
	var e errBody
	if jsonErr := json.Unmarshal(b, &e); jsonErr != nil || res.Header.Get("Content-Type") != "application/json" {
		t.Errorf("/events refused with %d %q, not a JSON error", res.StatusCode, b)
	}
	return res.StatusCode, e.Code
}

// TestEventsOrigin: the event socket opens for programs (no Origin) and
// the allowed origins, not for a page of another site or an opaque one.
func TestEventsOrigin(t *testing.T) {
	t.Parallel()
	h := start(t, project(t), func(c *coord.Config) { c.AllowedOrigins = []string{"localhost:3000"} })
	m := &matrix{}
	defer m.log(t)
	for _, tc := range []struct {
		name   string
		hdr    http.Header
		status int
		code   string
	}{
		{"no Origin", nil, 101, ""},
		{"Origin allowed", http.Header{"Origin": {dashOrigin}}, 101, ""},
		{"Origin of the daemon itself", http.Header{"Origin": {h.url}}, 101, ""},
		{"Origin foreign", http.Header{"Origin": {evilOrigin}}, 403, "origin_not_allowed"},
		{"Origin foreign on the daemon's port", http.Header{"Origin": {"http://evil.example:" + h.url[strings.LastIndex(h.url, ":")+1:]}}, 403, "origin_not_allowed"},
		{"Origin null", http.Header{"Origin": {"null"}}, 403, "origin_not_allowed"},
		{"no Origin, Sec-Fetch-Site cross-site", http.Header{"Sec-Fetch-Site": {"cross-site"}}, 403, "cross_site"},
	} {
		status, code := dialEvents(t, h.url, "", tc.hdr)
		m.add("GET /events (WebSocket)", tc.name, status, code)
		if status != tc.status || code != tc.code {
			t.Errorf("%s: %d %s, want %d %s", tc.name, status, code, tc.status, tc.code)
		}
	}
	// The library takes "websocket" anywhere in the Upgrade list: so does
	// the guard.
	for _, tc := range []struct {
		name, code string
		hdr        http.Header
	}{
		{"Upgrade: h2c, websocket, no Origin, Sec-Fetch-Site cross-site", "cross_site", http.Header{"Upgrade": {"h2c, websocket"}, "Sec-Fetch-Site": {"cross-site"}}},
		{"Upgrade: websocket, h2c, Origin null", "origin_not_allowed", http.Header{"Upgrade": {"websocket, h2c"}, "Origin": {"null"}}},
		{"Upgrade: h2c and Upgrade: websocket, Origin foreign", "origin_not_allowed", http.Header{"Upgrade": {"h2c", "websocket"}, "Origin": {evilOrigin}}},
	} {
		tc.hdr.Set("Connection", "Upgrade")
		tc.hdr.Set("Sec-WebSocket-Version", "13")
		tc.hdr.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
		status, code := upgradeRaw(t, h.url+"/events", tc.hdr)
		m.add("GET /events (WebSocket)", tc.name, status, code)
		if status != http.StatusForbidden || code != tc.code {
			t.Errorf("%s: %d %s, want 403 %s", tc.name, status, code, tc.code)
		}
	}
}

// upgradeRaw sends a protocol switch with the headers hdr: the status and
// the code of a JSON refusal ("" for any other answer; a socket opened is
// closed at once).
func upgradeRaw(t *testing.T, url string, hdr http.Header) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header = hdr
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var e errBody
	if res.StatusCode != http.StatusSwitchingProtocols {
		json.NewDecoder(res.Body).Decode(&e)
	}
	return res.StatusCode, e.Code
}

// TestClientMessagesAreIgnored: what a client sends on /events is read and
// ignored, the socket stays; a message over 4 KiB closes it (1009), so a
// client cannot make the daemon hold more.
func TestClientMessagesAreIgnored(t *testing.T) {
	t.Parallel()
	h := start(t, project(t), nil)
	ws := h.socket()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, msg := range []string{"hello", `{"type":"subscribe"}`, strings.Repeat("x", 4096)} {
		if err := ws.conn.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
			t.Fatal(err)
		}
	}
	if err := ws.conn.Write(ctx, websocket.MessageBinary, []byte{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	h.clk.Advance(20 * time.Second)
	ws.next("heartbeat")
	if n := h.sockets(); n != 1 {
		t.Fatalf("%d sockets after the client's messages", n)
	}
	ws.conn.Write(ctx, websocket.MessageText, []byte(strings.Repeat("x", 4097)))
	if err := ws.closed(); websocket.CloseStatus(err) != websocket.StatusMessageTooBig {
		t.Fatalf("after a message over 4 KiB: %v", err)
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return h.sockets() == 0 }, "timed out waiting for the socket to go")
}

// TestToken: the daemon's token is made once, private, and kept across
// restarts; with RequireToken every write needs it, programs' too; a
// malformed token file stops the start.
func TestToken(t *testing.T) {
	t.Parallel()
	dir := project(t)
	h := start(t, dir, nil)
	tok := h.token()
	st, err := os.Stat(h.d.TokenFile())
	if err != nil || st.Mode().Perm() != 0o600 || len(tok) < 32 {
		t.Fatalf("token file %v %v, token %q", st, err, tok)
	}
	if want := filepath.Join(dir, ".coord", "token"); h.d.TokenFile() != want {
		t.Fatalf("token file %s, want %s", h.d.TokenFile(), want)
	}
	h.d.Close()
	h = start(t, dir, func(c *coord.Config) { c.RequireToken = true })
	if h.token() != tok {
		t.Fatal("a restart made a new token")
	}
	hdr := http.Header{"Content-Type": {"application/json"}}
	var e errBody
	if code := h.doWith("POST", "/initiative/reorder", `{"id":"search","wall":"active","order":0}`, hdr, &e); code != 403 || e.Code != "token_required" {
		t.Fatalf("a program without the token: %d %+v", code, e)
	}
	hdr.Set("Authorization", "bearer "+tok)
	if code := h.doWith("POST", "/initiative/reorder", `{"id":"search","wall":"active","order":0}`, hdr, nil); code != 200 {
		t.Fatalf("a program with the token: %d", code)
	}
	h.get("/state", nil) // reads need none
	h.d.Close()
	os.WriteFile(h.d.TokenFile(), []byte("short\n"), 0o600)
	d, err := coord.New(coord.Config{Dir: dir, Listener: mustListen(t), Registry: filepath.Join(t.TempDir(), "p.json")})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "token") {
		d.Close()
		t.Fatalf("start with a malformed token file: %v", err)
	}
}

// TestATokenOthersMayKnowIsReplaced: a token file that is not private (a
// .coord/token committed to a repository is checked out 0644, with a
// content its author knows) is replaced by a new token at start, with a
// warning; the known token does not let a page write. The state folder
// gets a .gitignore of "*", and one the developer wrote is kept.
func TestATokenOthersMayKnowIsReplaced(t *testing.T) {
	t.Parallel()
	dir := project(t)
	known := "known-to-the-author-of-the-repository"
	os.MkdirAll(filepath.Join(dir, ".coord"), 0o755)
	if err := os.WriteFile(filepath.Join(dir, ".coord", "token"), []byte(known+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h := start(t, dir, nil)
	tok := h.token()
	if st, err := os.Stat(h.d.TokenFile()); err != nil || st.Mode().Perm() != 0o600 || tok == known || len(tok) < 32 {
		t.Fatalf("token file %v %v, token %q", st, err, tok)
	}
	body := `{"msg":"from the page"}`
	hdr := http.Header{"Content-Type": {"application/json"}, "Origin": {"http://localhost:3000"}, "Authorization": {"Bearer " + known}}
	var e errBody
	if code := h.doWith("POST", "/debug/log", body, hdr, &e); code != 403 || e.Code != "bad_token" {
		t.Fatalf("a page with the committed token: %d %+v", code, e)
	}
	hdr.Set("Authorization", "Bearer "+tok)
	if code := h.doWith("POST", "/debug/log", body, hdr, nil); code != http.StatusAccepted {
		t.Fatalf("a page with the new token: %d", code)
	}
	var tl tail
	h.get("/debug/tail?tags=guard", &tl)
	if len(tl.Events) == 0 || tl.Events[0].Lvl != "warn" || !strings.Contains(tl.Events[0].Msg, "not private") ||
		!strings.Contains(fmt.Sprint(tl.Events[0].Data["why"]), "0644") {
		t.Fatalf("the warning: %+v", tl.Events)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, ".coord", ".gitignore")); !slices.Contains(strings.Split(string(b), "\n"), "*") {
		t.Fatalf(".coord/.gitignore %q", b)
	}

	// A private token is kept across a restart; so is a .gitignore the
	// developer wrote.
	h.d.Close()
	os.WriteFile(filepath.Join(dir, ".coord", ".gitignore"), []byte("debug.jsonl\n"), 0o644)
	h = start(t, dir, nil)
	if h.token() != tok {
		t.Fatal("a private token was replaced")
	}
	if b, _ := os.ReadFile(filepath.Join(dir, ".coord", ".gitignore")); string(b) != "debug.jsonl\n" {
		t.Fatalf("the developer's .gitignore became %q", b)
	}
}

func mustListen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// linesOf returns the lines of log that contain substr.
func linesOf(log *testkit.Buffer, substr string) []string {
	var out []string
	for _, line := range strings.Split(log.String(), "\n") {
		if strings.Contains(line, substr) {
			out = append(out, line)
		}
	}
	return out
}

// TestRefusalsAreLoggedOncePerClient: a refusal is logged at warn (and in
// the debug log) the first time a client sends it, not at every retry.
func TestRefusalsAreLoggedOncePerClient(t *testing.T) {
	t.Parallel()
	logs := &testkit.Buffer{}
	h := start(t, project(t), func(c *coord.Config) {
		c.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	evil := http.Header{"Origin": {evilOrigin}, "Content-Type": {"text/plain"}}
	for range 5 {
		h.doWith("POST", "/chat/dispatch", `{}`, evil, nil)
		h.doWith("GET", "/state", "", http.Header{"Host": {"evil.example"}}, nil)
	}
	h.doWith("POST", "/chat/dispatch", `{}`, http.Header{"Origin": {"http://other.example"}}, nil)
	warns := linesOf(logs, "level=WARN msg=\"request refused\"")
	if len(warns) != 3 || !slices.ContainsFunc(warns, func(l string) bool {
		return strings.Contains(l, "code=bad_host") && strings.Contains(l, "host=evil.example")
	}) {
		t.Fatalf("warnings:\n%s", strings.Join(warns, "\n"))
	}
	if debug := linesOf(logs, "level=DEBUG msg=\"request refused\""); len(debug) != 8 {
		t.Fatalf("%d repeats at debug, want 8", len(debug))
	}
	var tail struct{ Events []struct{ Tag, Lvl string } }
	h.get("/debug/tail?tags=guard", &tail)
	if len(tail.Events) != 3 || tail.Events[0].Lvl != "warn" {
		t.Fatalf("debug log %+v", tail.Events)
	}
}
