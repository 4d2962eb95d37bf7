package node

import (
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/site"
	"github.com/agentmesh/mesh/internal/testkit"
	"github.com/agentmesh/mesh/interop"
	"github.com/agentmesh/mesh/interop/soltest"
	"github.com/agentmesh/mesh/registryapi"
)

const acceptJSON = "application/json"

// browserAccept is what a browser sends for a page.
const browserAccept = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"

// agentPage fetches GET /agent/<id> as a browser and checks the page headers.
func agentPage(t *testing.T, n *Node, id string) (int, string) {
	t.Helper()
	resp, b := send(t, n, "GET", "/agent/"+id, "", "Accept", browserAccept)
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
		t.Fatalf("page of %s on %s: Content-Type %q", id, n.URL(), ct)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); csp != site.CSP || strings.Contains(csp, "script-src") {
		t.Fatalf("page of %s: CSP %q", id, csp)
	}
	return resp.StatusCode, string(b)
}

// publicCard fetches GET /agent/<id> as a JSON client.
func publicCard(t *testing.T, n *Node, id string) (int, map[string]any) {
	t.Helper()
	return call(t, n, "GET", "/agent/"+id, "", "Accept", acceptJSON)
}

// a2aSchema is the A2A 0.3.0 AgentCard schema the interop tests use.
func a2aSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	f, err := os.Open("../interop/testdata/a2a/agent-card.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("agent-card.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	return c.MustCompile("agent-card.schema.json")
}

// mirroredCard reads the card n mirrors for id at both well-known paths,
// checks they agree and validates it against the A2A schema.
func mirroredCard(t *testing.T, n *Node, schema *jsonschema.Schema, id string) map[string]any {
	t.Helper()
	var cards []string
	for _, p := range []string{"agent.json", "agent-card.json"} {
		st, body := rawCall(t, n, "GET", "/agent/"+id+"/.well-known/"+p, "")
		if st != 200 {
			t.Fatalf("mirrored %s of %s on %s: %d %s", p, id, n.URL(), st, body)
		}
		v, err := jsonschema.UnmarshalJSON(strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if err := schema.Validate(v); err != nil {
			t.Fatalf("mirrored %s of %s on %s is not an A2A AgentCard: %v\n%s", p, id, n.URL(), err, body)
		}
		cards = append(cards, body)
	}
	if cards[0] != cards[1] {
		t.Fatalf("the two well-known paths differ:\n%s\n%s", cards[0], cards[1])
	}
	var card map[string]any
	json.Unmarshal([]byte(cards[0]), &card)
	return card
}

// TestAgentPageOfEmbeddedAgent: an agent embedded in a node hands its
// card over with its registration; its public address on the directory
// (which knows a SOL/USD rate) and on its own node (which knows none)
// shows it, with pricing in SOL and, where a rate is known, USD.
func TestAgentPageOfEmbeddedAgent(t *testing.T) {
	t.Parallel()
	m := newMeshWith(t, func(c *Config) { c.SolUSD = 150 })
	cfg := m.config(t.TempDir(), RoleNode)
	cfg.Agent = echoAgent("echo-1", soltest.New(t), interop.NewWallet().Address())
	cfg.Agent.HeartbeatInterval = 50 * time.Millisecond
	b := m.start(cfg)
	testkit.Eventually(t, 15*time.Second, b.AgentRegistered, "agent never registered")
	m.waitCaughtUp(b)
	schema := a2aSchema(t)
	own := b.Agent().Card()
	for _, n := range []*Node{m.boot, b} {
		card := mirroredCard(t, n, schema, "echo-1")
		if card["name"] != "Echo" || card["url"] != b.URL() || card["protocolVersion"] != "0.3.0" || card["payment"] == nil {
			t.Fatalf("mirror on %s: %v", n.URL(), card)
		}
		if skills := card["skills"].([]any); len(skills) != len(own.Skills) {
			t.Fatalf("mirror skills %v", skills)
		}
	}
	if st, v := m.signedCall(b, identity.GenerateKey(), "POST", "/v1/agents/echo-1/feedback", `{"success":true,"latency_ms":500}`); st != 200 {
		t.Fatalf("feedback: %d %v", st, v)
	}
	m.waitCaughtUp(b)
	// 5,000 lamports = 0.000005 SOL; at 150 USD a SOL, 0.00075 USD.
	st, v := publicCard(t, m.boot, "echo-1")
	if rep := v["reputation"].(map[string]any); rep["n"] != 1.0 || rep["score"] != 1.0 {
		t.Fatalf("reputation %v", rep)
	}
	if st != 200 || v["name"] != "Echo" || v["online"] != true || v["endpoint"] != b.URL() || v["verified"] != true {
		t.Fatalf("discovery card on the directory: %d %v", st, v)
	}
	price := v["pricing"].([]any)[0].(map[string]any)
	if price["sol"] != 0.000005 || price["usd"] != 0.00075 || price["amount"] != 5000.0 || v["sol_usd"].(map[string]any)["rate"] != 150.0 {
		t.Fatalf("pricing with a rate: %v, rate %v", price, v["sol_usd"])
	}
	if v["card"] != m.boot.URL()+"/agent/echo-1/.well-known/agent.json" || !strings.Contains(strings.Join(anyStrings(v["tags"]), ","), "echo") {
		t.Fatalf("card link %v, tags %v", v["card"], v["tags"])
	}
	_, v = publicCard(t, b, "echo-1")
	price = v["pricing"].([]any)[0].(map[string]any)
	if price["sol"] != 0.000005 || price["usd"] != nil || v["sol_usd"] != nil {
		t.Fatalf("pricing without a rate: %v, rate %v", price, v["sol_usd"])
	}
	st, html := agentPage(t, m.boot, "echo-1")
	for _, want := range []string{`<h1 id="agent-name">Echo</h1>`, `id="online-badge" class="badge online" data-online="true" data-status="online">online, endpoint not checked yet<`, `0.000005 SOL`, `$0.00075`,
		`id="agent-description">echoes its input<`, `<li class="capability">echo</li>`, `<span id="reputation-weighted">Weighted score 0.09 of 1: 0 of 1 report from paying callers.</span>`,
		`<span id="reputation-plain">Plain score 1.00 of 1 (every report counted alike).</span>`, `id="liveness"`, `id="card-link"`} {
		if st != 200 || !strings.Contains(html, want) {
			t.Fatalf("page on the directory lacks %q: %d\n%s", want, st, html)
		}
	}
	if strings.Contains(html, `id="live-banner"`) {
		t.Fatal("an agent without a listing shows the live banner")
	}
	if st, css := rawCall(t, m.boot, "GET", "/assets/site.css", ""); st != 200 || !strings.Contains(css, ".liveness-summary") {
		t.Fatalf("stylesheet: %d %q", st, css)
	}
	_, html = agentPage(t, b, "echo-1")
	if !strings.Contains(html, "No SOL/USD rate is known") || strings.Contains(html, "$0.00075") {
		t.Fatalf("page without a rate:\n%s", html)
	}
	// The agent's card changes: its next heartbeat round sends it again.
	b.Agent().SetURL("https://echo.example")
	testkit.Eventually(t, 15*time.Second, func() bool {
		st, body := rawCall(t, m.boot, "GET", "/agent/echo-1/.well-known/agent.json", "")
		return st == 200 && strings.Contains(body, `"url":"https://echo.example"`)
	}, "the changed card never reached the directory")

}

func anyStrings(v any) []string {
	var out []string
	for _, s := range v.([]any) {
		out = append(out, s.(string))
	}
	return out
}

// registerAgent registers id bound to key at endpoint through n, with
// capabilities, and returns its api key.
func (m *mesh) registerAgent(n *Node, id string, key ed25519.PrivateKey, endpoint string) string {
	m.t.Helper()
	body, _ := json.Marshal(map[string]any{"agent_id": id, "capabilities": []string{"summarize"},
		"endpoint": endpoint, "pubkey": identity.EncodePublicKey(key.Public().(ed25519.PublicKey))})
	st, v := m.signedCall(n, key, "POST", "/v1/agents/register", string(body))
	if st != 201 && st != 200 {
		m.t.Fatalf("register %s on %s: %d %v", id, n.URL(), st, v)
	}
	return v["api_key"].(string)
}

// heartbeat beats for id through n.
func (m *mesh) heartbeat(n *Node, token string) {
	m.t.Helper()
	if st, v := call(m.t, n, "POST", "/v1/agents/me/heartbeat", "", "Authorization", "Bearer "+token); st != 200 {
		m.t.Fatalf("heartbeat on %s: %d %v", n.URL(), st, v)
	}
}

// cardServer is an agent's endpoint on loopback that serves its card at
// A2A's current path only (agent.json is 404), as the directory's
// fallback must find it.
type cardServer struct {
	srv  *httptest.Server
	mu   sync.Mutex
	card string
	hits int // reads of the card
}

func newCardServer(t *testing.T, card string) *cardServer {
	s := &cardServer{card: card}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/.well-known/agent-card.json" {
			http.NotFound(w, r)
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		s.hits++
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, s.card)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *cardServer) reads() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hits
}

func (s *cardServer) set(card string) {
	s.mu.Lock()
	s.card = card
	s.mu.Unlock()
}

// probing lets the directory fetch cards from loopback, probing each agent
// again once the mesh's clock moved a second.
func probing(c *Config) {
	c.SolUSD = 150
	c.Cards.Refresh = time.Second
	c.Cards.Allow = []string{"127.0.0.0/8"}
}

// TestAgentPageFetchedCardAndLiveness: the directory fetches the card of
// an agent that does not hand it over, from its endpoint on loopback (the
// operator allowed it); every node mirrors it, completed into an A2A
// AgentCard, and its page shows what the agent wrote inert. An unchanged
// card takes no log entry. When the endpoint dies while the agent still
// heartbeats, every node's page says so.
func TestAgentPageFetchedCardAndLiveness(t *testing.T) {
	t.Parallel()
	m := newMeshWith(t, probing)
	b := m.join()
	agent := newCardServer(t, `{"name":"Sum <script>alert(1)</script>","description":"<img src=x onerror=alert(2)>",
		"pricing":{"unit":"request","amount":2000000,"currency":"lamports","network":"chain-devnet"},
		"skills":[{"id":"summarize","name":"Summarize"}]}`)
	key := identity.GenerateKey()
	apiKey := m.registerAgent(b, "sum-1", key, agent.srv.URL)
	token := m.token(b, "sum-1", apiKey)
	m.heartbeat(b, token)
	schema := a2aSchema(t)
	testkit.Eventually(t, 15*time.Second, func() bool {
		st, _ := rawCall(t, b, "GET", "/agent/sum-1/.well-known/agent.json", "")
		return st == 200
	}, "the fetched card never reached the replica")

	card := mirroredCard(t, b, schema, "sum-1")
	skill := card["skills"].([]any)[0].(map[string]any)
	if card["url"] != agent.srv.URL || card["protocolVersion"] != "0.3.0" || skill["tags"] == nil || card["pricing"] == nil {
		t.Fatalf("completed mirror: %v", card)
	}
	testkit.Eventually(t, 15*time.Second, func() bool {
		_, v := publicCard(t, m.boot, "sum-1")
		return v["liveness"].(map[string]any)["state"] == registryapi.LiveReachable
	}, "the probe's liveness never showed on the directory")

	m.heartbeat(b, token)
	_, v := publicCard(t, b, "sum-1")
	if v["liveness"].(map[string]any)["state"] != registryapi.LiveReachable {
		t.Fatalf("the replica did not copy liveness with the heartbeat: %v", v["liveness"])
	}
	price := v["pricing"].([]any)[0].(map[string]any)
	if v["name"] != "Sum <script>alert(1)</script>" || price["sol"] != 0.002 || v["online"] != true {
		t.Fatalf("discovery card: %v", v)
	}
	_, html := agentPage(t, b, "sum-1")
	if strings.Contains(html, "<script>alert") || strings.Contains(html, "<img src=x") ||
		!strings.Contains(html, "Sum &lt;script&gt;alert(1)&lt;/script&gt;") || !strings.Contains(html, "0.002 SOL") {
		t.Fatalf("the page does not show the agent's text inert:\n%s", html)
	}

	// Probes of an unchanged card take no log entry.
	seq := m.boot.clog.Seq()
	checked := v["liveness"].(map[string]any)["checked_at"]
	for range 3 {
		m.clock.Advance(2 * time.Second)
		testkit.Eventually(t, 15*time.Second, func() bool {
			_, v := publicCard(t, m.boot, "sum-1")
			c := v["liveness"].(map[string]any)["checked_at"]
			defer func() { checked = c }()
			return c != checked
		}, "the directory never probed again")

	}
	if got := m.boot.clog.Seq(); got != seq {
		t.Fatalf("probes of an unchanged card took %d log entries", got-seq)
	}
	// One probe at registration, then one each time the clock passed
	// the refresh interval: never more.
	if n := agent.reads(); n != 4 {
		t.Fatalf("the card was read %d times, want 4", n)
	}
	if p, c := metric(t, m.boot, `mesh_card_probes_total{result="reachable"}`), metric(t, m.boot, "mesh_cards_fetched_total"); p != 4 || c != 1 {
		t.Fatalf("metrics: %v probes, %v cards proposed", p, c)
	}
	// A changed card is proposed once, and mirrored everywhere.
	agent.set(`{"name":"Summarizer 2","skills":[{"id":"summarize","name":"Summarize","tags":["text"]}]}`)
	m.clock.Advance(2 * time.Second)
	testkit.Eventually(t, 15*time.Second, func() bool {
		m.waitCaughtUp(b)
		_, v := publicCard(t, b, "sum-1")
		return v["name"] == "Summarizer 2"
	}, "the changed card never reached the replica")

	// The endpoint dies; the agent heartbeats on.
	agent.srv.Close()
	m.clock.Advance(2 * time.Second)
	testkit.Eventually(t, 15*time.Second, func() bool {
		_, v := publicCard(t, m.boot, "sum-1")
		return v["liveness"].(map[string]any)["state"] == registryapi.LiveUnreachable
	}, "the dead endpoint never showed on the directory")

	// The replica copies liveness with the heartbeats: at the latest when
	// one passes through it.
	m.heartbeat(b, token)
	_, v = publicCard(t, b, "sum-1")
	l := v["liveness"].(map[string]any)
	if v["online"] != true || l["last_reachable"] == nil || l["failing_since"] == nil || !strings.Contains(l["reason"].(string), "unreachable") {
		t.Fatalf("online %v, liveness %v", v["online"], l)
	}
	_, html = agentPage(t, b, "sum-1")
	if !strings.Contains(html, "online, endpoint not answering since") || !strings.Contains(html, `id="failure-reason"`) ||
		!strings.Contains(html, `data-state="unreachable"`) {
		t.Fatalf("page of an agent with a dead endpoint:\n%s", html)
	}
}

// TestAgentPageListingsAndVanishing: a catalog-only agent shows its
// listing; a live agent that also has one shows it under a live banner,
// and its card 404s while it has none; unknown ids answer 404 as HTML to
// browsers and as JSON to JSON clients; a deregistered agent vanishes from
// every node (or falls back to its listing). A bad full_card is refused.
func TestAgentPageListingsAndVanishing(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	b := m.join()
	listing := `{"listings":[{"agent_id":"listed-only","name":"Old Listing","description":"scraped <b>once</b>","url":"https://old.example","capabilities":["ocr"]},
		{"agent_id":"listed-live","name":"Live Listing","description":"scraped and live"}]}`
	if st, v := m.signedCall(b, m.boot.key, "POST", "/v1/admin/catalog", listing); st != 200 {
		t.Fatalf("catalog import: %d %v", st, v)
	}
	liveKey := m.register(b, "listed-live", identity.GenerateKey())
	goneKey := m.register(b, "gone-1", identity.GenerateKey())
	m.waitCaughtUp(b)
	for _, n := range []*Node{m.boot, b} {
		st, html := agentPage(t, n, "listed-only")
		if st != 200 || !strings.Contains(html, `<h1 id="agent-name">Old Listing</h1>`) || strings.Contains(html, `id="listing-name"`) ||
			!strings.Contains(html, "scraped &lt;b&gt;once&lt;/b&gt;") || strings.Contains(html, `id="live-banner"`) ||
			!strings.Contains(html, `class="badge catalog"`) {
			t.Fatalf("catalog-only page on %s: %d\n%s", n.URL(), st, html)
		}
		st, v := publicCard(t, n, "listed-only")
		if st != 200 || v["catalog_only"] != true || v["online"] != false || v["listing"] == nil || v["card"] != nil {
			t.Fatalf("catalog-only discovery card on %s: %d %v", n.URL(), st, v)
		}
		st, html = agentPage(t, n, "listed-live")
		if st != 200 || !strings.Contains(html, `id="live-banner"`) || !strings.Contains(html, "Live Listing") {
			t.Fatalf("live listed page on %s: %d\n%s", n.URL(), st, html)
		}
		for _, id := range []string{"listed-only", "listed-live"} {
			if st, v := call(t, n, "GET", "/agent/"+id+"/.well-known/agent.json", ""); st != 404 || v["code"] != "card_not_found" {
				t.Fatalf("card of %s on %s: %d %v", id, n.URL(), st, v)
			}
		}
	}
	m.deleteAgent(b, "gone-1", goneKey)
	m.deleteAgent(b, "listed-live", liveKey)
	m.waitCaughtUp(b)
	for _, n := range []*Node{m.boot, b} {
		for _, id := range []string{"gone-1", "nobody", "bad%20id"} {
			st, html := agentPage(t, n, id)
			if st != 404 || !strings.Contains(html, `<section id="not-found" data-status="404">`) {
				t.Fatalf("page of %s on %s: %d\n%s", id, n.URL(), st, html)
			}
			if st, v := publicCard(t, n, id); st != 404 || v["code"] != "agent_not_found" {
				t.Fatalf("discovery card of %s on %s: %d %v", id, n.URL(), st, v)
			}
			if st, v := call(t, n, "GET", "/agent/"+id+"/.well-known/agent-card.json", ""); st != 404 || v["code"] != "agent_not_found" {
				t.Fatalf("card of %s on %s: %d %v", id, n.URL(), st, v)
			}
		}
		st, html := agentPage(t, n, "listed-live")
		if st != 200 || strings.Contains(html, `id="live-banner"`) || !strings.Contains(html, `class="badge catalog"`) {
			t.Fatalf("deregistered listed agent on %s: %d\n%s", n.URL(), st, html)
		}
	}
	key := identity.GenerateKey()
	pub := identity.EncodePublicKey(key.Public().(ed25519.PublicKey))
	for card, want := range map[string]string{`"nope"`: "JSON object", `{"name":7}`: "name", `[1]`: "JSON object"} {
		body := `{"agent_id":"bad-card","pubkey":"` + pub + `","full_card":` + card + `}`
		if st, v := m.signedCall(b, key, "POST", "/v1/agents/register", body); st != 400 || !strings.Contains(v["detail"].(string), want) {
			t.Fatalf("full_card %s: %d %v", card, st, v)
		}
	}
}

// TestAgentPageSurvivesDirectoryRestart: a fetched card (in the log) and
// the probes' liveness (flushed with the heartbeats) outlive a restart of
// the directory, and the per-agent refresh with them: no probe is due.
func TestAgentPageSurvivesDirectoryRestart(t *testing.T) {
	t.Parallel()
	m := &mesh{t: t, clock: newTestClock()}
	cfg := m.config(t.TempDir(), RoleBootstrap)
	probing(&cfg)
	m.boot = m.start(cfg)
	agent := newCardServer(t, `{"name":"Kept","skills":[{"id":"keep","name":"Keep","tags":["k"]}]}`)
	m.registerAgent(m.boot, "kept-1", identity.GenerateKey(), agent.srv.URL)
	testkit.Eventually(t, 15*time.Second, func() bool {
		_, v := publicCard(t, m.boot, "kept-1")
		return v["liveness"].(map[string]any)["state"] == registryapi.LiveReachable && v["card"] != nil
	}, "the card was never fetched")

	_, before := publicCard(t, m.boot, "kept-1")
	if err := m.boot.Close(); err != nil {
		t.Fatal(err)
	}
	m.boot = m.start(cfg)
	_, after := publicCard(t, m.boot, "kept-1")
	if after["name"] != "Kept" || fmt.Sprint(after["liveness"]) != fmt.Sprint(before["liveness"]) {
		t.Fatalf("after a restart: %v\nbefore: %v", after, before)
	}
	mirroredCard(t, m.boot, a2aSchema(t), "kept-1")
	// A round of probes that reached a newer agent went past kept-1 ("kept"
	// sorts first) without probing it.
	other := newCardServer(t, `{"name":"Other"}`)
	m.registerAgent(m.boot, "other-1", identity.GenerateKey(), other.srv.URL)
	testkit.Eventually(t, 15*time.Second, func() bool { return other.reads() > 0 }, "the new agent was never probed")
	if n := agent.reads(); n != 1 {
		t.Fatalf("the card was read %d times: the restart forgot when it was probed", n)
	}
}

// TestCardFetchStaysOnTheWellKnownPath: an endpoint with a query and a
// fragment does not aim the directory's fetch at another URL of its host:
// the fetches go to the well-known paths under the endpoint's path.
func TestCardFetchStaysOnTheWellKnownPath(t *testing.T) {
	t.Parallel()
	m := newMeshWith(t, probing)
	var mu sync.Mutex
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, r.URL.RequestURI())
		mu.Unlock()
		http.NotFound(w, r)
	}))
	defer srv.Close()
	m.registerAgent(m.boot, "steer-1", identity.GenerateKey(), srv.URL+"/api/delete?id=5#")
	testkit.Eventually(t, 15*time.Second, func() bool {
		_, v := publicCard(t, m.boot, "steer-1")
		return v["liveness"].(map[string]any)["state"] == registryapi.LiveUnreachable
	}, "the endpoint was never probed")

	mu.Lock()
	defer mu.Unlock()
	for _, uri := range asked {
		if uri != "/api/delete/.well-known/agent.json" && uri != "/api/delete/.well-known/agent-card.json" {
			t.Fatalf("the directory asked for %q (all: %q)", uri, asked)
		}
	}
}

// TestProbeReasonHidesResolvedAddress: a refused endpoint's reason names
// the class of address it led to, not the address the directory resolved
// (its resolver may answer for internal names).
func TestProbeReasonHidesResolvedAddress(t *testing.T) {
	t.Parallel()
	m := newMeshWith(t, func(c *Config) {
		probing(c)
		c.Cards.Allow = nil
	})
	m.registerAgent(m.boot, "inner-1", identity.GenerateKey(), "http://localhost:1/")
	var reason string
	testkit.Eventually(t, 15*time.Second, func() bool {
		_, v := publicCard(t, m.boot, "inner-1")
		l := v["liveness"].(map[string]any)
		reason, _ = l["reason"].(string)
		return l["state"] == registryapi.LiveUnreachable
	}, "the endpoint was never probed")

	if !strings.Contains(reason, "loopback") || strings.Contains(reason, "127.0.0.1") || strings.Contains(reason, "::1") {
		t.Fatalf("reason %q", reason)
	}
}
