package node

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/testkit"
	"github.com/agentmesh/mesh/interop"
	"github.com/agentmesh/mesh/interop/soltest"
)

// ranking is what a search answers, less what names the node asked (the
// handle): ids with their scores, in order.
func ranking(t *testing.T, n *Node, query string) string {
	t.Helper()
	st, v := call(t, n, "POST", "/v1/search", `{"query":"`+query+`","limit":50}`)
	if st != 200 {
		t.Fatalf("search on %s: %d %v", n.URL(), st, v)
	}
	out := ""
	for _, r := range v["results"].([]any) {
		res := r.(map[string]any)
		out += fmt.Sprintf("%s=%.12f/%v ", res["agent_id"], res["score"], res["catalog_only"])
	}
	return out
}

// TestSearchSameOnEveryNode: the directory, a replica, the replica after a
// restart and a late joiner (from a snapshot) rank alike; a deleted agent vanishes from all.
func TestSearchSameOnEveryNode(t *testing.T) {
	t.Parallel()
	m := newMeshWith(t, func(c *Config) { c.SolUSD = 150 })
	bCfg := m.config(t.TempDir(), RoleNode)
	b := m.start(bCfg)
	m.waitCaughtUp(b)
	keys := map[string]string{}
	for i, id := range []string{"translator-1", "translator-2", "summarizer", "gone-translator"} {
		keys[id] = m.register([]*Node{m.boot, b}[i%2], id, identity.GenerateKey())
	}
	if st, v := m.signedCall(b, identity.GenerateKey(), "POST", "/v1/agents/translator-2/feedback", `{"success":true,"latency_ms":500}`); st != 200 {
		t.Fatalf("feedback: %d %v", st, v)
	}
	m.deleteAgent(b, "gone-translator", keys["gone-translator"])
	// b forwarded the delete and waited for its replica: gone at once there.
	want := ranking(t, b, "translator echo")
	m.waitCaughtUp(b)
	if got := ranking(t, m.boot, "translator echo"); got != want {
		t.Fatalf("directory ranks\n%s\nreplica ranks\n%s", got, want)
	}
	if !strings.HasPrefix(want, "translator-2=") || strings.Contains(want, "gone-translator") || len(strings.Fields(want)) != 3 {
		t.Fatalf("ranking %q: want translator-2 first (its reputation) and no deleted agent", want)
	}
	b.Close()
	b = m.start(bCfg)
	m.waitCaughtUp(b)
	if got := ranking(t, b, "translator echo"); got != want {
		t.Fatalf("after a restart\n%s\nwant\n%s", got, want)
	}
	// The late joiner cannot replay the log: it installs a snapshot.
	if err := m.boot.clog.Compact(1); err != nil {
		t.Fatal(err)
	}
	c := m.join()
	if c.clog.First() <= 2 {
		t.Fatalf("the late joiner replayed the log from %d instead of installing a snapshot", c.clog.First())
	}
	if got := ranking(t, c, "translator echo"); got != want {
		t.Fatalf("late joiner\n%s\nwant\n%s", got, want)
	}
	st, v := call(t, c, "POST", "/v1/search", `{"query":"echo","max_price_usd":1}`)
	if st != 503 || v["code"] != "price_rate_unknown" {
		t.Fatalf("price filter without a rate: %d %v", st, v)
	}
	_, v = call(t, m.boot, "POST", "/v1/search", `{"query":"echo"}`)
	if r := v["sol_usd"].(map[string]any); r["rate"] != 150.0 {
		t.Fatalf("sol_usd %v", r)
	}
}

// TestSearchFindsEmbeddedAgentByCard: an embedded agent registers its
// discovery card, so the directory finds it by its description and
// filters it by its price.
func TestSearchFindsEmbeddedAgentByCard(t *testing.T) {
	t.Parallel()
	m := newMeshWith(t, func(c *Config) { c.SolUSD = 150 })
	cfg := m.config(t.TempDir(), RoleNode)
	cfg.Agent = echoAgent("echo-1", soltest.New(t), interop.NewWallet().Address())
	n := m.start(cfg)
	testkit.Eventually(t, 15*time.Second, n.AgentRegistered, "agent never registered")
	// 5,000 lamports at 150 USD a SOL: 0.00075 USD a request.
	for body, want := range map[string]int{
		`{"query":"echoes input"}`:                        1,
		`{"query":"echoes","max_price_usd":0.001}`:        1,
		`{"query":"echoes","max_price_usd":0.0007}`:       0,
		`{"query":"echoes","capabilities":["echo"]}`:      1,
		`{"query":"echoes","capabilities":["translate"]}`: 0,
	} {
		st, v := call(t, m.boot, "POST", "/v1/search", body)
		if st != 200 || len(v["results"].([]any)) != want {
			t.Fatalf("%s: %d %v, want %d results", body, st, v, want)
		}
		if want == 1 {
			if r := v["results"].([]any)[0].(map[string]any); r["price_lamports"] != 5000.0 || r["name"] != "Echo" {
				t.Fatalf("%s: %v", body, r)
			}
		}
	}
}

// TestSearchMeteredByAdmission: the search's budget (--search-rate,
// --search-burst) is admission control's: a refusal is 429
// search_rate_limited, counted and shown in /health like a write's.
func TestSearchMeteredByAdmission(t *testing.T) {
	t.Parallel()
	m := newMeshWith(t, func(c *Config) { c.SearchRate, c.SearchBurst = 1, 1 })
	if st, v := call(t, m.boot, "POST", "/v1/search", `{"query":"echo"}`); st != 200 {
		t.Fatalf("first search: %d %v", st, v)
	}
	st, hdr, v := callFull(t, m.boot, "POST", "/v1/search", `{"query":"echo"}`)
	if st != 429 || v["code"] != "search_rate_limited" || hdr.Get("Retry-After") == "" {
		t.Fatalf("second search: %d %v %v", st, v, hdr)
	}
	_, h := call(t, m.boot, "GET", "/health", "")
	if a := h["admission"].(map[string]any); a["shedding"] != true || fmt.Sprint(a["budgets"]) != "[search]" || a["directory_shedding"] != false {
		t.Fatalf("health admission %v", a)
	}
	if got := metric(t, m.boot, `mesh_admission_refused_total{reason="search",surface="search"}`); got != 1 {
		t.Fatalf("refusals counted: %v", got)
	}
}

// TestSearchRateZeroIsUnlimited: SearchRate 0 (--search-rate 0) meters
// nothing, as 0 does for every rate; the burst does not matter then.
func TestSearchRateZeroIsUnlimited(t *testing.T) {
	t.Parallel()
	m := newMeshWith(t, func(c *Config) { c.SearchRate, c.SearchBurst = 0, 1 })
	for i := range 5 {
		if st, v := call(t, m.boot, "POST", "/v1/search", `{"query":"echo"}`); st != 200 {
			t.Fatalf("search %d: %d %v", i, st, v)
		}
	}
}

// TestSearchReadsAgentsCardsOnEveryNode: an agent whose card the directory
// fetches from its endpoint, and one that hands its full card over, are
// found by the words of their cards and priced by their cards' rows (a
// free card is 0) on the directory, a replica and a late joiner that
// installed a snapshot; a search by filters alone finds both.
func TestSearchReadsAgentsCardsOnEveryNode(t *testing.T) {
	t.Parallel()
	m := newMeshWith(t, probing)
	b := m.joinWith(func(c *Config) { c.SolUSD = 150 })
	fetched := newCardServer(t, `{"name":"Tide Oracle","description":"harbour tides for sailors",
		"pricing":{"unit":"request","amount":2000000,"currency":"lamports","network":"chain-devnet"},
		"skills":[{"id":"tides","name":"Tide tables","tags":["nautical"]}]}`)
	m.registerAgent(b, "tide-1", identity.GenerateKey(), fetched.srv.URL)
	key := identity.GenerateKey()
	handed := `{"agent_id":"free-1","capabilities":[],"pubkey":"` + identity.EncodePublicKey(key.Public().(ed25519.PublicKey)) + `",
		"full_card":{"name":"Gratis Glossary","description":"defines lighthouse words","pricing":{"unit":"request","amount":0,"currency":"free"}}}`
	if st, v := m.signedCall(b, key, "POST", "/v1/agents/register", handed); st != 201 {
		t.Fatalf("register with a full card: %d %v", st, v)
	}
	testkit.Eventually(t, 15*time.Second, func() bool {
		_, v := call(t, m.boot, "GET", "/agent/tide-1", "", "Accept", "application/json")
		return v["name"] == "Tide Oracle"
	}, "the directory never fetched tide-1's card")

	if err := m.boot.clog.Compact(1); err != nil {
		t.Fatal(err)
	}
	late := m.joinWith(func(c *Config) { c.SolUSD = 150 })
	for _, n := range []*Node{m.boot, b, late} {
		m.waitCaughtUp(n)
		// 0.002 SOL at 150 USD is 0.30 USD a request.
		for body, want := range map[string]string{
			`{"query":"nautical sailors"}`:                    "tide-1:Tide Oracle:2000000",
			`{"query":"lighthouse"}`:                          "free-1:Gratis Glossary:0",
			`{"query":"tides glossary","max_price_usd":0.3}`:  "free-1:Gratis Glossary:0 tide-1:Tide Oracle:2000000",
			`{"query":"tides glossary","max_price_usd":0.29}`: "free-1:Gratis Glossary:0",
			`{"max_price_usd":0}`:                             "free-1:Gratis Glossary:0",
			`{"verified":true,"max_price_usd":1,"limit":100}`: "free-1:Gratis Glossary:0 tide-1:Tide Oracle:2000000",
		} {
			st, v := call(t, n, "POST", "/v1/search", body)
			var got []string
			for _, r := range v["results"].([]any) {
				res := r.(map[string]any)
				got = append(got, fmt.Sprintf("%s:%s:%.0f", res["agent_id"], res["name"], res["price_lamports"]))
			}
			slices.Sort(got)
			if st != 200 || strings.Join(got, " ") != want {
				t.Fatalf("%s on %s: %d %v, want %s", body, n.URL(), st, got, want)
			}
		}
	}
	if late.clog.First() <= 2 {
		t.Fatalf("the late joiner replayed the log from %d instead of installing a snapshot", late.clog.First())
	}
}

// TestSearchWhileTheIndexBuilds: a node starting on a store of agents
// serves /health, agents and its front door before its search index is
// built; searches answer 503 index_building with a Retry-After meanwhile;
// a registration made during the build is found once it is done.
func TestSearchWhileTheIndexBuilds(t *testing.T) {
	m := newMesh(t)
	m.register(m.boot, "translator-1", identity.GenerateKey())
	cfg := m.boot.cfg
	cfg.PublicURL = "" // the next start's address
	m.boot.Close()
	release := make(chan struct{})
	cfg.beforeIndex = func(ctx context.Context) {
		select {
		case <-release:
		case <-ctx.Done():
		}
	}
	m.boot = m.start(cfg)
	if st, h := call(t, m.boot, "GET", "/health", ""); st != 200 || h["status"] != "ok" {
		t.Fatalf("health while the index builds: %d %v", st, h)
	}
	if st, v := call(t, m.boot, "GET", "/v1/agents/translator-1", ""); st != 200 {
		t.Fatalf("an agent while the index builds: %d %v", st, v)
	}
	if st, _ := rawCall(t, m.boot, "GET", "/", ""); st != 200 {
		t.Fatalf("the front door while the index builds: %d", st)
	}
	resp, body := send(t, m.boot, "POST", "/v1/search", `{"query":"translator"}`)
	if resp.StatusCode != 503 || !strings.Contains(string(body), `"index_building"`) || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("search while the index builds: %d %s (Retry-After %q)", resp.StatusCode, body, resp.Header.Get("Retry-After"))
	}
	m.register(m.boot, "translator-2", identity.GenerateKey())
	close(release)
	testkit.Eventually(t, 15*time.Second, func() bool {
		st, _ := call(t, m.boot, "POST", "/v1/search", `{"query":"translator"}`)
		return st == 200
	}, "the index was never built")
	if got := ranking(t, m.boot, "translator"); !strings.Contains(got, "translator-1=") || !strings.Contains(got, "translator-2=") {
		t.Fatalf("after the build: %s", got)
	}
}
