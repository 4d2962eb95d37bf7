package registryapi

import (
	"crypto/ed25519"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/admission"
	"github.com/agentmesh/mesh/internal/httpx"
	"github.com/agentmesh/mesh/internal/storetest"
)

// search posts a search and returns the decoded answer.
func (h *harness) search(body string) reply {
	h.t.Helper()
	return h.do("POST", "/v1/search", body)
}

// ids lists the result ids of a search answer, in order.
func ids(r reply) []string {
	var out []string
	for _, res := range r.body["results"].([]any) {
		out = append(out, res.(map[string]any)["agent_id"].(string))
	}
	return out
}

func result(r reply, i int) map[string]any { return r.body["results"].([]any)[i].(map[string]any) }

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// TestSearchRelevanceAndBoost checks scores against hand-computed BM25
// (k1 1.2, b 0.75) and boosts (2 × the weighted score).
func TestSearchRelevanceAndBoost(t *testing.T) {
	h := newHarness(t)
	// Two documents of two terms each: avgdl 2, N 2.
	h.want(h.do("POST", "/v1/agents/register", `{"agent_id":"a1","capabilities":["translate"]}`), 201, "")
	h.want(h.do("POST", "/v1/agents/register", `{"agent_id":"b2","capabilities":["summarize"]}`), 201, "")
	ln2 := math.Log(2) // idf of a term in 1 of 2 documents: ln(1 + 1.5/1.5)
	r := h.want(h.search(`{"query":"translate"}`), 200, "")
	if got := ids(r); len(got) != 1 || got[0] != "a1" {
		t.Fatalf("results %v", got)
	}
	// tf 1, |d| = avgdl: relevance = idf · 2.2 / 2.2.
	if rel := result(r, 0)["score_parts"].(map[string]any)["relevance"].(float64); !near(rel, ln2) {
		t.Fatalf("relevance %v, want ln 2", rel)
	}
	// One successful report without a receipt: weight 0.1, score 1 shrunk
	// by the prior: 1 · 0.1/1.1; boost 2 · that.
	h.want(h.signed(identity.GenerateKey(), "POST", "/v1/agents/b2/feedback", `{"success":true}`), 200, "")
	wantRep, wantBoost := 0.1/1.1, 2*0.1/1.1
	table := []struct {
		query string
		order []string
		score []float64
	}{
		{"translate", []string{"a1"}, []float64{ln2}},
		{"summarize", []string{"b2"}, []float64{ln2 + wantBoost}},
		// Both match once: equal relevance, the boost puts b2 first.
		{"translate summarize", []string{"b2", "a1"}, []float64{ln2 + wantBoost, ln2}},
		// Upper case and punctuation are folded away.
		{"TRANSLATE!", []string{"a1"}, []float64{ln2}},
		{"nothing-here", nil, nil},
	}
	for _, c := range table {
		r := h.want(h.search(jsonBody(map[string]any{"query": c.query})), 200, "")
		if got := ids(r); fmt.Sprint(got) != fmt.Sprint(c.order) {
			t.Fatalf("%q: order %v, want %v", c.query, got, c.order)
		}
		for i, s := range c.score {
			if got := result(r, i)["score"].(float64); !near(got, s) {
				t.Fatalf("%q: result %d score %v, want %v", c.query, i, got, s)
			}
		}
	}
	b := result(h.search(`{"query":"summarize"}`), 0)
	if !near(b["oracle_reputation"].(float64), wantRep) || !near(b["score_parts"].(map[string]any)["reputation_boost"].(float64), wantBoost) {
		t.Fatalf("b2: %v", b)
	}
}

// TestSearchFieldsAndFilters covers the card's fields, each filter and
// the SOL/USD rate.
func TestSearchFieldsAndFilters(t *testing.T) {
	h := newHarnessOn(t, storetest.DB(t), func(c *Config) { c.SolUSD = NewSolUSD(SolUSDConfig{Fixed: 100}) })
	card := func(desc string, lamports int) map[string]any {
		return map[string]any{"description": desc, "tags": []string{"sky"},
			"skills":  []map[string]any{{"id": "forecast", "name": "Forecast", "tags": []string{"rain"}}},
			"pricing": []map[string]any{{"unit": "request", "amount": lamports, "currency": "lamports", "network": "chain"}}}
	}
	cheap := h.want(h.do("POST", "/v1/agents/register", jsonBody(map[string]any{"agent_id": "cheap", "capabilities": []string{"x"},
		"card": card("weather forecasts", 1_000_000)})), 201, "")
	key := identity.GenerateKey()
	h.want(h.signed(key, "POST", "/v1/agents/register", jsonBody(map[string]any{"agent_id": "dear", "capabilities": []string{"x"},
		"pubkey": identity.EncodePublicKey(key.Public().(ed25519.PublicKey)), "card": card("weather oracle", 1_000_000_000)})), 201, "")
	h.want(h.do("POST", "/v1/agents/register", `{"agent_id":"nocard","capabilities":["weather"]}`), 201, "")
	cases := []struct{ body, want string }{
		{`{"query":"weather"}`, "[cheap dear nocard]"},
		{`{"query":"rain"}`, "[cheap dear]"},     // a skill's tag
		{`{"query":"forecast"}`, "[cheap dear]"}, // a skill's id and name
		{`{"query":"weather","verified":true}`, "[dear]"},
		{`{"query":"weather","verified":false}`, "[cheap nocard]"},
		{`{"query":"weather","capabilities":["Weather"]}`, "[nocard]"},
		// 0.001 SOL at 100 USD is 0.1 USD; 1 SOL is 100 USD; no card, no price.
		{`{"query":"weather","max_price_usd":1}`, "[cheap]"},
		{`{"query":"weather","max_price_usd":100}`, "[cheap dear]"},
	}
	for _, c := range cases {
		r := h.want(h.search(c.body), 200, "")
		if got := fmt.Sprint(sortedIDs(r)); got != c.want {
			t.Fatalf("%s: %s, want %s", c.body, got, c.want)
		}
	}
	rt := h.search(`{"query":"weather"}`).body["sol_usd"].(map[string]any)
	if rt["rate"] != 100.0 || rt["source"] != "fixed" || rt["age_s"] != 0.0 {
		t.Fatalf("sol_usd %v", rt)
	}
	// Online: every agent is online right after registering; 11 minutes
	// later only the one that heartbeats is.
	h.clock.Advance(11 * time.Minute)
	tok := h.token("cheap", cheap.str("api_key"))
	h.want(h.do("POST", "/v1/agents/me/heartbeat", "", bearer(tok)...), 200, "")
	for body, want := range map[string]string{`{"query":"weather","online":true}`: "[cheap]", `{"query":"weather","online":false}`: "[dear nocard]"} {
		r := h.want(h.search(body), 200, "")
		if got := fmt.Sprint(sortedIDs(r)); got != want {
			t.Fatalf("%s: %s, want %s", body, got, want)
		}
	}
	if res := result(h.search(`{"query":"dear"}`), 0); res["verified"] != true || res["did"] == nil || res["handle"] != "https://mesh.test/agent/dear" || res["online"] != false {
		t.Fatalf("dear: %v", res)
	}
}

func TestSearchWithoutRate(t *testing.T) {
	h := newHarness(t)
	h.want(h.do("POST", "/v1/agents/register", `{"agent_id":"a","capabilities":["weather"]}`), 201, "")
	h.want(h.search(`{"query":"weather","max_price_usd":1}`), 503, "price_rate_unknown")
	r := h.want(h.search(`{"query":"weather"}`), 200, "")
	if r.body["sol_usd"] != nil || len(ids(r)) != 1 {
		t.Fatalf("%s", r.raw)
	}
}

func sortedIDs(r reply) []string {
	out := ids(r)
	slices.Sort(out)
	return out
}

// TestSearchDeregistrationAndCatalog: a deleted agent vanishes at once; one
// on a catalog listing stays findable as the listing.
func TestSearchDeregistrationAndCatalog(t *testing.T) {
	h := newHarness(t)
	h.want(h.signed(h.admin, "POST", "/v1/admin/catalog", `{"listings":[{"agent_id":"legacy","name":"Legacy","description":"pdf converter"}]}`), 200, "")
	if res := result(h.want(h.search(`{"query":"pdf"}`), 200, ""), 0); res["catalog_only"] != true || res["registered"] != false || res["description"] != "pdf converter" {
		t.Fatalf("stub: %v", res)
	}
	_, tokL := h.registerPlain("legacy")
	_, tokG := h.registerPlain("gone")
	if got := fmt.Sprint(sortedIDs(h.search(`{"query":"legacy gone"}`))); got != "[gone legacy]" {
		t.Fatalf("registered: %s", got)
	}
	if res := result(h.search(`{"query":"legacy"}`), 0); res["registered"] != true || res["catalog_only"] != false {
		t.Fatalf("legacy registered: %v", res)
	}
	h.want(h.do("DELETE", "/v1/agents/me", "", bearer(tokL)...), 200, "")
	h.want(h.do("DELETE", "/v1/agents/me", "", bearer(tokG)...), 200, "")
	r := h.search(`{"query":"legacy gone pdf"}`)
	if got := fmt.Sprint(ids(r)); got != "[legacy]" {
		t.Fatalf("after deletes: %s", got)
	}
	if res := result(r, 0); res["catalog_only"] != true || res["endpoint"] != nil {
		t.Fatalf("stub again: %v", res)
	}
}

// TestSearchPages walks the pages of a search with the cursor.
func TestSearchPages(t *testing.T) {
	h := newHarness(t)
	var want []string
	for i := range 12 {
		id := fmt.Sprintf("p%02d", i)
		want = append(want, id)
		h.want(h.do("POST", "/v1/agents/register", jsonBody(map[string]any{"agent_id": id, "capabilities": []string{"pager"}})), 201, "")
	}
	var got []string
	body := `{"query":"pager","limit":5}`
	for range 3 {
		r := h.want(h.search(body), 200, "")
		got = append(got, ids(r)...)
		c, _ := r.body["next_cursor"].(string)
		body = jsonBody(map[string]any{"query": "pager", "limit": 5, "cursor": c})
	}
	if fmt.Sprint(got) != fmt.Sprint(want) || !strings.Contains(body, `"cursor":""`) {
		t.Fatalf("pages %v (last request %s), want %v", got, body, want)
	}
}

func TestSearchBadInput(t *testing.T) {
	h := newHarness(t)
	long := strings.Repeat("a ", 200)
	for _, c := range []struct{ body, code string }{
		{`[`, "invalid_json"},
		{jsonBody(map[string]any{"query": long}), "invalid_request"},
		{`{"query":"a","limit":-1}`, "invalid_request"},
		{`{"query":"a","max_price_usd":-1}`, "invalid_request"},
		{`{"query":"a","capabilities":[""]}`, "invalid_request"},
		{`{"query":"a","cursor":"zz"}`, "invalid_cursor"},
		{jsonBody(map[string]any{"query": "a", "cursor": encodeCursor(maxSearchWindow)}), "invalid_cursor"},
		{`{"query":"a\u0000"}`, "invalid_request"},
	} {
		h.want(h.search(c.body), 400, c.code)
	}
	h.want(h.search(`{"query":"`+strings.Repeat("a", 5000)+`"}`), http.StatusRequestEntityTooLarge, "body_too_large")
}

func TestSearchBudgetPerAddress(t *testing.T) {
	ad, err := admission.New(admission.Config{Search: admission.Budget{Rate: 1.0 / 60, Burst: 2}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarnessOn(t, storetest.DB(t), func(c *Config) { c.Admission = ad })
	h.want(h.search(`{"query":"a"}`), 200, "")
	h.want(h.search(`{"query":"a"}`), 200, "")
	r := h.want(h.search(`{"query":"a"}`), 429, "search_rate_limited")
	if r.hdr.Get("Retry-After") != "60" {
		t.Fatalf("Retry-After %q", r.hdr.Get("Retry-After"))
	}
	// The budget is taken before the body is read: a bad request past it
	// is refused as such, unread.
	h.want(h.search(`{"query":`), 429, "search_rate_limited")
	if s := ad.Status(); !slices.Equal(s.Budgets, []string{admission.Search}) || s.DirectoryShedding {
		t.Fatalf("admission status %+v", s)
	}
}

func FuzzDecodeSearch(f *testing.F) {
	for _, s := range []string{`{"query":"weather","limit":5}`, `{"query":"a","cursor":"bzU"}`,
		`{"query":"x","capabilities":["a"],"max_price_usd":0.5,"online":true,"verified":false}`, `{}`, `[`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		q, err := DecodeSearch(b)
		if err != nil {
			if _, ok := httpx.AsError(err); !ok {
				t.Fatalf("%q: error without a client answer: %v", b, err)
			}
			return
		}
		if len(q.terms) > maxQueryTerms || q.Limit < 1 || q.Limit > maxLimit ||
			q.offset < 0 || q.offset+q.Limit > maxSearchWindow || len(q.Capabilities) > maxSearchCaps {
			t.Fatalf("%q decoded out of bounds: %+v", b, q)
		}
	})
}
