package node

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/admission"
	"github.com/agentmesh/mesh/internal/httpx"
	"github.com/agentmesh/mesh/internal/testkit"
)

// anonymous is the body of a registration with no key.
func anonymous(id string) string { return `{"agent_id":"` + id + `","capabilities":["echo"]}` }

// healthAdmission is the admission part of n's /health.
func healthAdmission(t *testing.T, n *Node) map[string]any {
	t.Helper()
	_, h := call(t, n, "GET", "/health", "")
	return h["admission"].(map[string]any)
}

// TestAnAddressOverItsBudgetWritesNothing: past its budget, one client
// address (an IPv4 address, an IPv6 /64) gets 429 rate_limited with
// Retry-After on any write surface, and nothing it sent is written on any
// node; another address behind the same proxy still gets in; the node
// shows it sheds load.
func TestAnAddressOverItsBudgetWritesNothing(t *testing.T) {
	t.Parallel()
	tight := func(c *Config) {
		c.Budgets.Client = admission.Budget{Rate: 0.001, Burst: 3} // no refill during the test
		c.TrustedProxies = []string{"127.0.0.1"}                   // the test names its clients
	}
	m := newMeshWith(t, tight)
	b := m.joinWith(tight)
	c := m.join()

	from := func(ip string) []string { return []string{httpx.HeaderForwardedFor, ip} }
	for i := range 3 {
		if st, v := call(t, b, "POST", "/v1/agents/register", anonymous(fmt.Sprint("flood-", i)), from("198.51.100.7")...); st != 201 {
			t.Fatalf("registration %d within the budget: %d %v", i, st, v)
		}
	}
	seq := m.boot.clog.Seq()
	refused := []struct{ method, path, body string }{
		{"POST", "/v1/agents/register", anonymous("flood-over")},
		{"POST", "/v1/clusters", `{"name":"Flood","visibility":"public"}`},
		{"POST", "/v1/agents/token", `{"agent_id":"flood-0","api_key":"mk_x"}`},
	}
	for _, q := range refused {
		st, hdr, v := callFull(t, b, q.method, q.path, q.body, from("198.51.100.7")...)
		if st != 429 || v["code"] != "rate_limited" || hdr.Get("Retry-After") == "" {
			t.Fatalf("%s %s over the budget: %d %v %v", q.method, q.path, st, hdr, v)
		}
	}
	// An IPv6 host is one address for all of its /64.
	for i := range 3 {
		if st, v := call(t, b, "POST", "/v1/agents/register", anonymous(fmt.Sprint("six-", i)), from(fmt.Sprintf("2001:db8:1:2::%d", i+1))...); st != 201 {
			t.Fatalf("IPv6 registration %d: %d %v", i, st, v)
		}
	}
	if st, _ := call(t, b, "POST", "/v1/agents/register", anonymous("six-over"), from("2001:db8:1:2:ffff::9")...); st != 429 {
		t.Fatalf("another address of the same /64 over its budget: %d", st)
	}
	// Another client of the same node is not held back.
	if st, v := call(t, b, "POST", "/v1/agents/register", anonymous("bystander"), from("203.0.113.9")...); st != 201 {
		t.Fatalf("another address: %d %v", st, v)
	}
	if got, want := m.boot.clog.Seq(), seq+4; got != want {
		t.Fatalf("the directory logged %d entries since the address went over its budget, want 4 (the IPv6 host's 3 and the bystander)", got-seq)
	}
	m.waitCaughtUp(b)
	m.waitCaughtUp(c)
	for _, n := range []*Node{m.boot, b, c} {
		if st, _ := call(t, n, "GET", "/v1/agents/flood-over", ""); st != 404 {
			t.Errorf("a refused registration is on %s: %d", n.URL(), st)
		}
		if st, _ := call(t, n, "GET", "/v1/clusters/flood", ""); st != 404 {
			t.Errorf("a refused cluster is on %s: %d", n.URL(), st)
		}
	}
	if a := healthAdmission(t, b); a["shedding"] != true || fmt.Sprint(a["budgets"]) != "[client]" || a["directory_shedding"] != false {
		t.Errorf("b's health: %v", a)
	}
	if n := metric(t, b, `mesh_admission_refused_total{reason="client",surface="register"}`); n != 2 {
		t.Errorf("refused registrations counted on b: %v, want 2", n)
	}
	if a := healthAdmission(t, c); a["shedding"] != false {
		t.Errorf("c, which refused nothing, says it sheds: %v", a)
	}
}

// TestASignedClientKeepsItsBudget: an agent that signs with its bound key,
// or presents its token, spends its own budget, so that it still gets in
// behind an address others used up; a key bound to nothing costs nothing
// to make and counts at its address.
func TestASignedClientKeepsItsBudget(t *testing.T) {
	t.Parallel()
	tight := func(c *Config) {
		c.Budgets.Client = admission.Budget{Rate: 0.001, Burst: 2}
		c.Budgets.Credential = admission.Budget{Rate: 0.001, Burst: 3}
	}
	m := newMeshWith(t, tight)
	b := m.joinWith(tight)
	key := identity.GenerateKey()
	apiKey := m.register(b, "owner", key) // the address's first write
	tok := m.token(b, "owner", apiKey)    // and its second
	if st, _ := call(t, b, "POST", "/v1/agents/register", anonymous("neighbour")); st != 429 {
		t.Fatalf("an anonymous write from the spent address: %d", st)
	}
	stranger := identity.GenerateKey()
	body, _ := json.Marshal(map[string]any{"agent_id": "fresh-key", "capabilities": []string{}, "pubkey": identity.EncodePublicKey(stranger.Public().(ed25519.PublicKey))})
	if st, _ := m.signedCall(b, stranger, "POST", "/v1/agents/register", string(body)); st != 429 {
		t.Fatalf("a registration signed by a key bound to nothing, from the spent address: %d", st)
	}
	again, _ := json.Marshal(map[string]any{"agent_id": "owner", "capabilities": []string{"echo", "more"}, "pubkey": identity.EncodePublicKey(key.Public().(ed25519.PublicKey))})
	if st, v := m.signedCall(b, key, "POST", "/v1/agents/register", string(again)); st != 200 {
		t.Fatalf("the owner's signed update from the spent address: %d %v", st, v)
	}
	for i := range 2 {
		if st, v := call(t, b, "POST", "/v1/agents/me/heartbeat", "", "Authorization", "Bearer "+tok); st != 200 {
			t.Fatalf("heartbeat %d with the owner's token: %d %v", i, st, v)
		}
	}
	if st, _ := call(t, b, "POST", "/v1/agents/me/heartbeat", "", "Authorization", "Bearer "+tok); st != 429 {
		t.Fatalf("the owner over its own budget: %d", st)
	}
	if n := metric(t, b, `mesh_admission_refused_total{reason="credential",surface="heartbeat"}`); n != 1 {
		t.Errorf("credential refusals counted: %v", n)
	}
}

// TestARogueNodeIsCapped: a node forwarding writes at full speed, each
// naming a client of its own invention, gets no more than its node budget
// from the directory (the rest: 503 directory_busy with Retry-After),
// while another node's client registers within 2 s.
func TestARogueNodeIsCapped(t *testing.T) {
	t.Parallel()
	const rate, burst = 1, 40 // a slow refill: the checks after the flood find the budget spent
	m := newMeshWith(t, func(c *Config) { c.Budgets.Node = admission.Budget{Rate: rate, Burst: burst} })
	rogue := m.join()
	honest := m.join()

	ctx, cancel := context.WithCancel(context.Background())
	var accepted, busy, other atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for w := range 16 {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				req, _ := http.NewRequest("POST", "/v1/agents/register", strings.NewReader(anonymous(fmt.Sprintf("rogue-%d-%d", w, i))))
				req.Header.Set(clientHeader, fmt.Sprintf("10.%d.%d.%d", w, i/250%250, i%250))
				resp, err := rogue.roundTrip(ctx, req, nil)
				if err != nil {
					continue
				}
				body, _ := io.ReadAll(resp.Body)
				switch {
				case resp.StatusCode == 201:
					accepted.Add(1)
				case resp.StatusCode == 503 && errorCode(body) == "directory_busy" && resp.Header.Get("Retry-After") != "":
					busy.Add(1)
				default:
					other.Add(1)
				}
			}
		})
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return busy.Load() > 0 }, "the rogue's flood never met its budget")
	for i := range 5 { // its latency under the flood is measured by mesh bench write-flood
		st, v := call(t, honest, "POST", "/v1/agents/register", anonymous(fmt.Sprint("honest-", i)))
		if st != 201 {
			t.Errorf("honest registration %d during the flood: %d %v", i, st, v)
		}
		time.Sleep(200 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	t.Logf("rogue: %d accepted, %d refused busy, %d other in %.1f s", accepted.Load(), busy.Load(), other.Load(), elapsed)
	if max := burst + rate*elapsed + 5; float64(accepted.Load()) > max {
		t.Errorf("the rogue got %d writes in, want at most %.0f (its node budget)", accepted.Load(), max)
	}
	// At full speed the flood sends many times its budget (some 30 times
	// here; a few times with the race detector).
	if accepted.Load() < burst || busy.Load() < 2*accepted.Load() || other.Load() != 0 {
		t.Errorf("%d accepted, %d refused busy, %d refused otherwise: the flood did not spend its budget and more, or was refused otherwise", accepted.Load(), busy.Load(), other.Load())
	}
	if a := healthAdmission(t, m.boot); a["directory_shedding"] != true || !strings.Contains(fmt.Sprint(a["budgets"]), "node") {
		t.Errorf("the directory's health: %v", a)
	}
	if a := healthAdmission(t, honest); a["directory_shedding"] != false {
		t.Errorf("the honest node, none of whose writes was refused, says the directory shed them: %v", a)
	}
	// The rogue passes the refusal on to its client, and knows the
	// directory sheds its writes. (Whatever refilled since the flood is
	// spent first.)
	for i := 0; i < 100; i++ {
		req, _ := http.NewRequest("POST", "/v1/agents/register", strings.NewReader(anonymous(fmt.Sprint("drain-", i))))
		if resp, err := rogue.roundTrip(context.Background(), req, nil); err == nil && resp.StatusCode == 503 {
			break
		}
	}
	if st, hdr, v := callFull(t, rogue, "POST", "/v1/agents/register", anonymous("rogue-client")); st != 503 || v["code"] != "directory_busy" || hdr.Get("Retry-After") == "" {
		t.Errorf("a client of the rogue: %d %v %v", st, hdr, v)
	}
	if a := healthAdmission(t, rogue); a["directory_shedding"] != true {
		t.Errorf("the rogue's health: %v", a)
	}
}

// forwardFrom sends a request from n to the directory over the forward
// stream, as n forwards its clients' writes.
func forwardFrom(t *testing.T, n *Node, method, path, body string, hdr ...string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(method, path, strings.NewReader(body))
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := n.roundTrip(context.Background(), req, nil)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp
}

// TestForwardStreamServesOnlyForwardedRoutes: whatever a peer sends on the
// forward stream, the directory serves only the routes nodes forward, and
// answers anything else with JSON 404 or 405, never a 500 and never an
// upgrade; it checks the origin URL and client address the peer names.
func TestForwardStreamServesOnlyForwardedRoutes(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	peer := m.join() // any identity on the mesh: the forward stream takes every peer

	send := func(method, path, body string, hdr ...string) (int, http.Header, map[string]any) {
		t.Helper()
		resp := forwardFrom(t, peer, method, path, body, hdr...)
		raw, _ := io.ReadAll(resp.Body)
		var v map[string]any
		if err := json.Unmarshal(raw, &v); err != nil {
			t.Fatalf("%s %s: %d non-JSON %q", method, path, resp.StatusCode, raw)
		}
		return resp.StatusCode, resp.Header, v
	}
	upgrade := []string{"Connection", "Upgrade", "Upgrade", "websocket", "Sec-WebSocket-Version", "13", "Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="}
	for _, q := range []struct {
		method, path string
		hdr          []string
		status       int
		code         string
	}{
		{"GET", "/metrics", nil, 404, "not_found"},
		{"GET", "/health", nil, 404, "not_found"},
		{"GET", "/v1/clusters/c_lobby/ws?agent=x&vis=ghost", upgrade, 404, "not_found"},
		{"POST", "/v1/clusters", nil, 404, "not_found"},
		{"GET", "/v1/admin/catalog", nil, 405, "method_not_allowed"},
		{"PUT", "/v1/agents/me/heartbeat", nil, 405, "method_not_allowed"},
		{"POST", "/v1/agents/register", []string{originHeader, "https://user:pw@edge.example"}, 400, "invalid_origin"},
		{"POST", "/v1/agents/register", []string{originHeader, "javascript:alert(1)"}, 400, "invalid_origin"},
		{"POST", "/v1/agents/register", []string{originHeader, "https://edge.example/?x=1"}, 400, "invalid_origin"},
		{"POST", "/v1/agents/register", []string{clientHeader, "not-an-address"}, 400, "invalid_client_addr"},
		{"POST", "/v1/agents/register", []string{clientHeader, "2001:db8::1"}, 400, "invalid_client_addr"},
	} {
		st, hdr, v := send(q.method, q.path, anonymous("probe"), q.hdr...)
		if st != q.status || v["code"] != q.code || hdr.Get("Upgrade") != "" {
			t.Errorf("%s %s %v: %d %v %v, want %d %s", q.method, q.path, q.hdr, st, hdr, v, q.status, q.code)
		}
	}
	// A request that is no HTTP at all.
	raw, err := peer.host.Request(context.Background(), m.boot.host.ID(), forwardProto, []byte("\x00\x01 not http\r\n\r\n"), maxForwardResp)
	if err != nil || !strings.HasPrefix(string(raw), "HTTP/1.1 400") {
		t.Errorf("garbage on the forward stream: %q, %v", raw, err)
	}
	// What nodes forward is served, under the origin the peer named.
	st, _, v := send("POST", "/v1/agents/register", anonymous("probe"), originHeader, "https://edge.example", clientHeader, "198.51.100.7")
	if st != 201 || !strings.HasPrefix(fmt.Sprint(v["handle"]), "https://edge.example/agent/") {
		t.Fatalf("a forwarded registration: %d %v", st, v)
	}
	if st, _, v := send("GET", "/v1/agents/probe", ""); st != 200 || v["agent_id"] != "probe" {
		t.Fatalf("the lookup a catching-up node forwards: %d %v", st, v)
	}
	_, body := rawCall(t, m.boot, "GET", "/metrics", "")
	if strings.Contains(body, `code="500"`) {
		t.Errorf("the directory answered a 500:\n%s", body)
	}
	for reason, want := range map[string]float64{"route": 6, "origin": 3, "client_addr": 2} {
		got := 0.0
		for _, line := range strings.Split(body, "\n") {
			if strings.HasPrefix(line, "mesh_admission_refused_total{") && strings.Contains(line, `reason="`+reason+`"`) {
				var f float64
				fmt.Sscan(line[strings.LastIndex(line, " ")+1:], &f)
				got += f
			}
		}
		if got != want {
			t.Errorf("forward refusals for %s: %v, want %v", reason, got, want)
		}
	}
}

// TestForwardedRoutesAreDocumented: docs/architecture.md lists exactly
// the routes the forward stream serves, so that a route added to the
// registry's write table is not forwarded undocumented.
func TestForwardedRoutesAreDocumented(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	_, list, _ := strings.Cut(string(doc), "**The forward stream serves only what nodes forward**")
	list, _, _ = strings.Cut(list, "\n\nA node forwards")
	documented := regexp.MustCompile("`((?:GET|POST|DELETE) [^`]+)`").FindAllStringSubmatch(list, -1)
	var got []string
	for _, m := range documented {
		got = append(got, m[1])
	}
	slices.Sort(got)
	want := forwardedRoutes()
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("docs/architecture.md lists the forwarded routes %q, the code serves %q", got, want)
	}
}

// TestForwardStreamChargesOnlyWhatItServes: requests the forward stream
// refuses (routes nodes do not forward, malformed origins) cost the peer
// nothing of its node budget; what it serves does.
func TestForwardStreamChargesOnlyWhatItServes(t *testing.T) {
	t.Parallel()
	const burst = 3
	m := newMeshWith(t, func(c *Config) { c.Budgets.Node = admission.Budget{Rate: 0.001, Burst: burst} })
	peer := m.join()
	forward := func(method, path, body string, hdr ...string) int {
		t.Helper()
		resp := forwardFrom(t, peer, method, path, body, hdr...)
		resp.Body.Close()
		return resp.StatusCode
	}
	for range 2 * burst {
		forward("GET", "/metrics", "")
		forward("POST", "/v1/agents/register", anonymous("x"), originHeader, "javascript:alert(1)")
	}
	for i := range burst {
		if st := forward("POST", "/v1/agents/register", anonymous(fmt.Sprint("served-", i))); st != 201 {
			t.Fatalf("registration %d within the node budget, after refused requests: %d", i, st)
		}
	}
	if st := forward("POST", "/v1/agents/register", anonymous("over")); st != 503 {
		t.Fatalf("a registration past the node budget: %d", st)
	}
}

// TestAShedWriteCostsItsClientNothing: writes the directory sheds (its
// log at capacity) give back the tokens they took, on the node that
// forwarded or proposed them and on the directory: the client's next
// writes are still within its budget.
func TestAShedWriteCostsItsClientNothing(t *testing.T) {
	t.Parallel()
	tight := func(c *Config) {
		c.Budgets.Client = admission.Budget{Rate: 0.001, Burst: 2}
		c.TrustedProxies = []string{"127.0.0.1"}
	}
	m := newMeshWith(t, func(c *Config) {
		tight(c)
		c.Budgets.Directory = admission.Budget{Rate: 0.001, Burst: 1}
	})
	b := m.joinWith(tight)
	from := []string{httpx.HeaderForwardedFor, "198.51.100.7"}
	if st, v := call(t, b, "POST", "/v1/agents/register", anonymous("first"), from...); st != 201 {
		t.Fatalf("the first write: %d %v", st, v)
	}
	// The directory's log is at capacity: it sheds registrations
	// (forwarded) and cluster creations (proposed) alike.
	for i := range 3 {
		for _, w := range [][2]string{{"/v1/agents/register", anonymous(fmt.Sprint("shed-", i))}, {"/v1/clusters", `{"visibility":"public"}`}} {
			if st, v := call(t, b, "POST", w[0], w[1], from...); st != 503 || v["code"] != "directory_busy" {
				t.Fatalf("%s with the log at capacity: %d %v", w[0], st, v)
			}
		}
	}
	// A token request takes no room in the log: the client's second
	// token is still there, on b and on the directory.
	if st, v := call(t, b, "POST", "/v1/agents/token", `{"agent_id":"first","api_key":"mk_wrong"}`, from...); st != 401 {
		t.Fatalf("the client's second write: %d %v", st, v)
	}
	if st, v := call(t, b, "POST", "/v1/agents/token", `{"agent_id":"first","api_key":"mk_wrong"}`, from...); st != 429 {
		t.Fatalf("the client's third write: %d %v", st, v)
	}
}
