package node

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"io"
	"math"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/testkit"
)

func testConfig(t testing.TB, dir string) Config {
	cfg := DefaultConfig()
	cfg.DataDir = dir
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.SyncWrites = false
	// A port a restart can listen on again (testkit.Port).
	cfg.Listen = []string{"/ip4/127.0.0.1/tcp/" + strconv.Itoa(testkit.Port(t))}
	// Tests reach loopback only: the directory does not probe the
	// example endpoints agents register (a lookup of their names would
	// leave the machine). Tests of probes turn them on (probing).
	cfg.Cards.Refresh = 0
	return cfg
}

func startNode(t testing.TB, cfg Config) *Node {
	t.Helper()
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// send sends a request to n, with headers hdr (name, value, ...), and
// returns the response and its body.
func send(t testing.TB, n *Node, method, path, body string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	resp, raw, err := trySend(n, method, path, body, hdr...)
	if err != nil {
		t.Fatal(err)
	}
	return resp, raw
}

// trySend is send for a goroutine other than the test's: it returns the
// error that send fails the test with.
func trySend(n *Node, method, path, body string, hdr ...string) (*http.Response, []byte, error) {
	req, _ := http.NewRequestWithContext(context.Background(), method, n.URL()+path, strings.NewReader(body))
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return resp, raw, err
}

// call sends a request to n and decodes the JSON answer.
func call(t testing.TB, n *Node, method, path, body string, hdr ...string) (int, map[string]any) {
	t.Helper()
	st, _, v := callFull(t, n, method, path, body, hdr...)
	return st, v
}

// callFull sends a request to n and returns its status, headers and JSON
// answer.
func callFull(t testing.TB, n *Node, method, path, body string, hdr ...string) (int, http.Header, map[string]any) {
	t.Helper()
	resp, raw := send(t, n, method, path, body, hdr...)
	var v map[string]any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("%s %s: %d non-JSON %q", method, path, resp.StatusCode, raw)
	}
	return resp.StatusCode, resp.Header, v
}

func TestRestartKeepsEverything(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	n := startNode(t, testConfig(t, dir))
	did := n.DID()
	key, caller := identity.GenerateKey(), identity.GenerateKey()
	body := `{"agent_id":"keeper","capabilities":["c"],"pubkey":"` + identity.EncodePublicKey(key.Public().(ed25519.PublicKey)) + `"}`
	st, reg := call(t, n, "POST", "/v1/agents/register", body, identity.SigHeaderName, identity.Sign(key, "POST", "/v1/agents/register", []byte(body), time.Now()))
	if st != 201 {
		t.Fatalf("register: %d %v", st, reg)
	}
	_, tok := call(t, n, "POST", "/v1/agents/token", `{"agent_id":"keeper","api_key":"`+reg["api_key"].(string)+`"}`)
	report := `{"success":true,"latency_ms":10}`
	fbSig := identity.Sign(caller, "POST", "/v1/agents/keeper/feedback", []byte(report), time.Now())
	if st, v := call(t, n, "POST", "/v1/agents/keeper/feedback", report, identity.SigHeaderName, fbSig); st != 200 {
		t.Fatalf("feedback: %d %v", st, v)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}

	n2 := startNode(t, testConfig(t, dir))
	if n2.DID() != did {
		t.Fatalf("node identity changed across restart: %s -> %s", did, n2.DID())
	}
	if st, v := call(t, n2, "GET", "/v1/agents/keeper", ""); st != 200 || v["pubkey"] == nil {
		t.Fatalf("agent after restart: %d %v", st, v)
	}
	// The token issued before the restart still works.
	if st, v := call(t, n2, "POST", "/v1/agents/me/heartbeat", "", "Authorization", "Bearer "+tok["token"].(string)); st != 200 {
		t.Fatalf("heartbeat with old token: %d %v", st, v)
	}
	// So does the api_key, and the report and its nonce are remembered.
	if st, _ := call(t, n2, "POST", "/v1/agents/token", `{"agent_id":"keeper","api_key":"`+reg["api_key"].(string)+`"}`); st != 200 {
		t.Fatalf("api_key after restart: %d", st)
	}
	if st, v := call(t, n2, "POST", "/v1/agents/keeper/feedback", report, identity.SigHeaderName, fbSig); st != 401 || v["code"] != "nonce_reused" {
		t.Fatalf("replay after restart: %d %v", st, v)
	}
	if _, v := call(t, n2, "GET", "/v1/agents/keeper/reputation", ""); v["n"] != 1.0 {
		t.Fatalf("reputation after restart: %v", v)
	}
	if _, v := call(t, n2, "GET", "/health", ""); v["directory"].(map[string]any)["agents"] != 1.0 {
		t.Fatalf("health after restart: %v", v)
	}
}

func TestHealthAndMetrics(t *testing.T) {
	t.Parallel()
	n := startNode(t, testConfig(t, t.TempDir()))
	st, v := call(t, n, "GET", "/health", "")
	if st != 200 || v["status"] != "ok" || v["version"] != Version || v["did"] != n.DID() || v["role"] != "bootstrap" {
		t.Fatalf("health: %d %v", st, v)
	}
	resp, err := http.Get(n.URL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`mesh_http_requests_total{code="200",route="GET /health"} 1`, "mesh_directory_seq 0", "mesh_agents_registered 0"} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// TestMetricsCountAnswersAsSent: the route metrics count each request
// under the status its client got: a route's answer, the mux's own 404
// and 405, and a WebSocket upgrade (101), whose connection the wall takes
// over before net/http writes any status.
func TestMetricsCountAnswersAsSent(t *testing.T) {
	t.Parallel()
	n := startNode(t, testConfig(t, t.TempDir()))
	mustCall(t, n, 201, "POST", "/v1/agents/register", `{"agent_id":"a1"}`)
	mustCall(t, n, 200, "GET", "/v1/agents/a1", "")
	mustCall(t, n, 404, "GET", "/v1/agents/nobody", "")
	mustCall(t, n, 404, "GET", "/v1/nowhere", "")
	mustCall(t, n, 405, "PUT", "/v1/agents/a1", "")
	id := createCluster(t, n, `{"visibility":"public"}`)["cluster_id"].(string)
	mustCall(t, n, 426, "GET", "/v1/clusters/"+id+"/ws?agent=alice", "")
	enterWall(t, n, id, q("agent", "alice"))
	ws := `mesh_http_requests_total{code="101",route="GET /v1/clusters/{id}/ws"}`
	waitFor(t, func() bool { return metric(t, n, ws) == 1 }, ws) // counted once the handler is done
	for series, want := range map[string]float64{
		`mesh_http_requests_total{code="201",route="POST /v1/agents/register"}`: 1,
		`mesh_http_requests_total{code="200",route="GET /v1/agents/{id}"}`:      1,
		`mesh_http_requests_total{code="404",route="GET /v1/agents/{id}"}`:      1,
		`mesh_http_requests_total{code="404",route="unmatched"}`:                1,
		`mesh_http_requests_total{code="405",route="unmatched"}`:                1,
		`mesh_http_requests_total{code="426",route="GET /v1/clusters/{id}/ws"}`: 1,
		`mesh_http_requests_total{code="200",route="GET /v1/clusters/{id}/ws"}`: 0,
	} {
		if got := metric(t, n, series); got != want {
			t.Errorf("%s %v, want %v", series, got, want)
		}
	}
}

func TestStartFailureCleansUp(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dir := t.TempDir()
	cfg := testConfig(t, dir)
	cfg.HTTPAddr = ln.Addr().String()
	n, _ := New(cfg)
	if err := n.Start(context.Background()); err == nil {
		t.Fatal("Start on a busy port succeeded")
	}
	n.Close()
	// The store was released: another node opens the same directory.
	startNode(t, testConfig(t, dir))
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, c := range []Config{
		{HTTPAddr: "127.0.0.1:0"},                               // no data dir
		{DataDir: "x", HTTPAddr: "nonsense"},                    // bad address
		{InMemory: true, HTTPAddr: ":0", OnlineWindow: -1},      // negative window
		{InMemory: true, HTTPAddr: ":0", Key: make([]byte, 12)}, // bad key
		{InMemory: true, HTTPAddr: ":0", WallSocketRate: -1},    // negative rate
		{InMemory: true, HTTPAddr: ":0", WallRoomRate: math.NaN()},
		{InMemory: true, HTTPAddr: ":0", WallRoomRate: math.Inf(1)},
		{InMemory: true, HTTPAddr: ":0", GossipQueueBytes: 1}, // gossip queue under one message
	} {
		if _, err := New(c); err == nil {
			t.Errorf("New(%+v) accepted", c)
		}
	}
	cfg := testConfig(t, t.TempDir())
	cfg.TrustedProxies = []string{"10.0.0.0/8", "192.0.2.1", "fd00::/8", "::1"}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("trusted proxies refused: %v", err)
	}
	for _, bad := range []string{"10.0.0.0/33", "10.0.0.256", "proxy.example", ""} {
		cfg.TrustedProxies = []string{"10.0.0.0/8", bad}
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), `trusted proxy "`+bad+`"`) {
			t.Errorf("trusted proxy %q: %v", bad, err)
		}
	}
}

// TestCloseLeavesNoGoroutines: a mesh whose nodes hold sockets of one
// cluster, on two nodes, with messages acked across them, ends every
// goroutine it started when its nodes close: rooms, sockets, acks,
// receipts, topics, streams.
func TestCloseLeavesNoGoroutines(t *testing.T) { // not parallel: it counts the process's goroutines
	before := runtime.NumGoroutine()
	m := newMesh(t)
	b, c := m.join(), m.join()
	id := createCluster(t, b, `{"visibility":"public"}`)["cluster_id"].(string)
	x := enterWall(t, b, id, q("agent", "x"))
	y := enterWall(t, c, id, q("agent", "y"))
	x.send("hi")
	y.next("message")
	x.next("ack")
	y.send(map[string]any{"to": "x", "payload": "hi back"})
	x.next("message")
	y.next("ack")
	for _, n := range []*Node{c, b, m.boot} {
		n.Close()
		n.Close() // twice is fine
	}
	for _, s := range []*wsClient{x, y} {
		<-s.done
		s.conn.CloseNow()
	}
	http.DefaultClient.CloseIdleConnections()
	testkit.Eventually(t, 10*time.Second, func() bool { return runtime.NumGoroutine() <= before },
		"%d goroutines before Close, more after:\n%s", before, goroutines{})
}

// goroutines prints the stacks of every goroutine, when a failure is.
type goroutines struct{}

func (goroutines) String() string {
	buf := make([]byte, 1<<20)
	return string(buf[:runtime.Stack(buf, true)])
}

// TestAnswersNameTheHostWithoutPublicURL: a node listening on every
// interface without a public URL names, in its answers, the address each
// client used, never 0.0.0.0 or [::], and its metrics still count each
// request under its route.
func TestAnswersNameTheHostWithoutPublicURL(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, t.TempDir())
	cfg.HTTPAddr = "0.0.0.0:0"
	n := startNode(t, cfg)
	if strings.Contains(n.URL(), "0.0.0.0") || strings.Contains(n.URL(), "[::]") {
		t.Fatalf("node URL %s", n.URL())
	}
	for _, host := range []string{"", "mesh.example:7777"} {
		req, _ := http.NewRequest("POST", n.URL()+"/v1/agents/register", strings.NewReader(`{"agent_id":"h`+strconv.Itoa(len(host))+`"}`))
		if host != "" {
			req.Host = host
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var v map[string]any
		json.NewDecoder(resp.Body).Decode(&v)
		resp.Body.Close()
		want := "http://" + req.Host + "/agent/"
		if h, _ := v["handle"].(string); !strings.HasPrefix(h, want) {
			t.Fatalf("Host %q: handle %v, want it under %s", req.Host, v["handle"], want)
		}
		req, _ = http.NewRequest("POST", n.URL()+"/v1/clusters", strings.NewReader(`{}`))
		if host != "" {
			req.Host = host
		}
		resp, err = http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		v = nil
		json.NewDecoder(resp.Body).Decode(&v)
		resp.Body.Close()
		want = "ws://" + req.Host + "/v1/clusters/"
		if ws, _ := v["ws"].(string); !strings.HasPrefix(ws, want) {
			t.Fatalf("Host %q: cluster ws %v, want it under %s", req.Host, v["ws"], want)
		}
	}
	// The metrics still name each request's route.
	if got := metric(t, n, `mesh_http_requests_total{code="201",route="POST /v1/agents/register"}`); got != 2 {
		t.Fatalf("register requests counted under their route: %v, want 2", got)
	}
}

// TestListenPortsSurviveRestart: a node given no listen addresses keeps
// the ports of its first start, so others find it at the same address
// after a restart; when they are taken it starts on new ones.
func TestListenPortsSurviveRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := testConfig(t, dir)
	cfg.Listen = nil
	n := startNode(t, cfg)
	first := n.host.ListenAddrs()
	n.Close()
	n = startNode(t, cfg)
	if again := n.host.ListenAddrs(); !slices.Equal(again, first) {
		t.Fatalf("restart listens on %v, first start on %v", again, first)
	}
	// Another program takes the remembered TCP port while it is down.
	n.Close()
	port := strings.Split(first[slices.IndexFunc(first, func(a string) bool { return strings.Contains(a, "/tcp/") })], "/")[4]
	ln, err := net.Listen("tcp", "0.0.0.0:"+port)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	n = startNode(t, cfg)
	moved := n.host.ListenAddrs()
	if slices.Equal(moved, first) || len(moved) != len(first) || !slices.ContainsFunc(moved, func(a string) bool { return strings.Contains(a, "/tcp/") }) {
		t.Fatalf("with its TCP port taken the node listens on %v (first start: %v)", moved, first)
	}
	// The new ports are remembered.
	n.Close()
	n = startNode(t, cfg)
	if again := n.host.ListenAddrs(); !slices.Equal(again, moved) {
		t.Fatalf("after moving, a restart listens on %v, want %v", again, moved)
	}
}
