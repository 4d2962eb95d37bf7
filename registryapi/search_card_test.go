package registryapi

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentmesh/mesh/internal/storetest"
)

// TestSearchReadsFullCard: an agent that hands its full card over is found
// by the card's words (name, description, a skill's name and tag), with
// the card's name, and priced by its cheapest request row: a free card
// counts 0, a skill's own row counts, a card of other units prices
// nothing. A card row's tier stays on the discovery card.
func TestSearchReadsFullCard(t *testing.T) {
	h := newHarnessOn(t, storetest.DB(t), func(c *Config) { c.SolUSD = NewSolUSD(SolUSDConfig{Fixed: 100}) })
	register := func(id, card string) {
		h.want(h.do("POST", "/v1/agents/register", fmt.Sprintf(`{"agent_id":%q,"capabilities":[],"full_card":%s}`, id, card)), 201, "")
	}
	register("wx", `{"name":"Weather Oracle","description":"forecasts for sailors",
		"pricing":{"unit":"request","amount":0,"currency":"free"},
		"skills":[{"id":"tide","name":"Tide tables","tags":["harbour"]}]}`)
	register("ocr", `{"name":"Scanner","description":"reads receipts",
		"pricing":[{"unit":"request","amount":9000000,"currency":"lamports","network":"chain","tier":"standard"},
		           {"unit":"page","amount":1000,"currency":"lamports","network":"chain"}],
		"skills":[{"id":"scan","pricing":{"unit":"request","amount":3000000,"currency":"lamports","network":"chain"}}]}`)
	register("minutes", `{"name":"Minute taker","pricing":{"unit":"minute","amount":5,"currency":"lamports","network":"chain"}}`)

	for query, want := range map[string]string{
		"weather": "[wx]", "sailors": "[wx]", "tide": "[wx]", "harbour": "[wx]", "receipts": "[ocr]", "scan": "[ocr]", "minute": "[minutes]",
	} {
		if got := fmt.Sprint(ids(h.want(h.search(jsonBody(map[string]any{"query": query})), 200, ""))); got != want {
			t.Fatalf("%q finds %s, want %s", query, got, want)
		}
	}
	res := result(h.search(`{"query":"weather"}`), 0)
	if res["name"] != "Weather Oracle" || res["description"] != "forecasts for sailors" || res["price_lamports"] != 0.0 {
		t.Fatalf("the free card's result: %v", res)
	}
	// The skill's row (0.003 SOL) is below the card's (0.009 SOL); the
	// page row is no request price.
	if res := result(h.search(`{"query":"scan"}`), 0); res["name"] != "Scanner" || res["price_lamports"] != 3e6 {
		t.Fatalf("the priced card's result: %v", res)
	}
	if res := result(h.search(`{"query":"minute"}`), 0); res["price_lamports"] != nil {
		t.Fatalf("a card without a request price: %v", res)
	}
	// 0.003 SOL at 100 USD is 0.30 USD.
	for body, want := range map[string]string{
		`{"max_price_usd":0}`:    "[wx]",
		`{"max_price_usd":0.3}`:  "[ocr wx]",
		`{"max_price_usd":0.29}`: "[wx]",
	} {
		if got := fmt.Sprint(sortedIDs(h.want(h.search(body), 200, ""))); got != want {
			t.Fatalf("%s: %s, want %s", body, got, want)
		}
	}
	card := h.want(h.do("GET", "/agent/ocr", "", "Accept", "application/json"), 200, "")
	rows := card.body["pricing"].([]any)
	if tier := rows[0].(map[string]any)["tier"]; tier != "standard" {
		t.Fatalf("pricing %v: the tier is lost", rows)
	}
}

// TestSearchReadsTokenRows: a card's SPL token rows are no lamports: an
// agent priced 0.05 SOL and 0.01 USDC costs 50,000,000 lamports, one
// priced only in USDC none (price_lamports null); max_price_usd reads a
// USDC row at par with the dollar, a lamports row at the node's rate.
func TestSearchReadsTokenRows(t *testing.T) {
	h := newHarnessOn(t, storetest.DB(t), func(c *Config) { c.SolUSD = NewSolUSD(SolUSDConfig{Fixed: 100}) })
	sol := `{"unit":"request","amount":50000000,"currency":"lamports","network":"chain"}`
	usdc := `{"unit":"request","amount":10000,"currency":"USDC","network":"chain","asset":"EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v"}`
	for id, pricing := range map[string]string{"both": "[" + sol + "," + usdc + "]", "usdconly": usdc, "solonly": sol} {
		card := fmt.Sprintf(`{"name":"Tolls %s","pricing":%s,"skills":[{"id":"toll","pricing":%s}]}`, id, pricing, pricing)
		h.want(h.do("POST", "/v1/agents/register", fmt.Sprintf(`{"agent_id":%q,"capabilities":[],"full_card":%s}`, id, card)), 201, "")
	}
	got := map[string]any{}
	for _, r := range h.want(h.search(`{"query":"tolls"}`), 200, "").body["results"].([]any) {
		got[r.(map[string]any)["agent_id"].(string)] = r.(map[string]any)["price_lamports"]
	}
	if len(got) != 3 || got["both"] != 5e7 || got["solonly"] != 5e7 || got["usdconly"] != nil {
		t.Fatalf("price_lamports %v", got)
	}
	// The agent page prices each in its lamports, else in USDC, and says
	// how to pay: mesh call for lamports, an x402 v2 client for tokens.
	endpoint := "https://tolls.example"
	for id, want := range map[string][2]string{
		"both":     {"0.05 SOL ($5.00) per request", "mesh call both toll --data '{}' --max-lamports 50000000"},
		"usdconly": {"0.01 USDC per request", "curl -X POST https://tolls.example/v1/toll -H 'Content-Type: application/json' -d '{}'\n# answers 402 with PAYMENT-REQUIRED: pay it with an x402 v2 client (@x402/fetch with @x402/svm)"},
	} {
		ag, err := h.dir.Lookup(id)
		if err != nil {
			t.Fatal(err)
		}
		rate := 100.0
		call := (&API{}).howToCall(httptest.NewRequest("GET", "/agent/"+id, nil), ag, &DiscoveryView{AgentID: id, SolUSD: &rateView{Rate: rate},
			Endpoint: &endpoint, Skills: []SkillView{{ID: "toll"}}})
		if len(call.Skills) != 1 || call.Skills[0].Price != want[0] || !strings.HasPrefix(call.Skills[0].Command, want[1]) {
			t.Fatalf("%s's page calls toll %+v, want %q", id, call.Skills, want)
		}
	}
	// 0.05 SOL at 100 USD is 5 USD; 0.01 USDC is 0.01 USD.
	for body, want := range map[string]string{
		`{"query":"tolls","max_price_usd":0.009}`: "[]",
		`{"query":"tolls","max_price_usd":0.01}`:  "[both usdconly]",
		`{"query":"tolls","max_price_usd":5}`:     "[both solonly usdconly]",
	} {
		if got := fmt.Sprint(sortedIDs(h.want(h.search(body), 200, ""))); got != want {
			t.Fatalf("%s: %s, want %s", body, got, want)
		}
	}
}

// TestSearchByFiltersAlone: a search without a query (or with no word in
// it) ranks the agents passing the filters by reputation, then id; a
// limit over the bound is clamped and says so.
func TestSearchByFiltersAlone(t *testing.T) {
	h := newHarness(t)
	for _, id := range []string{"c", "a", "b"} {
		h.want(h.do("POST", "/v1/agents/register", jsonBody(map[string]any{"agent_id": id, "capabilities": []string{"ocr", id}})), 201, "")
	}
	_, tok := h.registerPlain("d-other")
	h.want(h.signed(h.admin, "POST", "/v1/agents/c/feedback", `{"success":true}`), 200, "")
	for body, want := range map[string]string{
		`{}`:                            "[c a b d-other]",
		`{"capabilities":["ocr"]}`:      "[c a b]",
		`{"capabilities":["OCR","b"]}`:  "[b]",
		`{"query":"!!"}`:                "[c a b d-other]",
		`{"query":"","verified":false}`: "[c a b d-other]",
		`{"online":true}`:               "[]",
	} {
		if got := fmt.Sprint(ids(h.want(h.search(body), 200, ""))); got != want {
			t.Fatalf("%s: %s, want %s", body, got, want)
		}
	}
	h.want(h.do("POST", "/v1/agents/me/heartbeat", "", bearer(tok)...), 200, "")
	if got := fmt.Sprint(ids(h.search(`{"online":true}`))); got != "[d-other]" {
		t.Fatalf("online after its heartbeat: %s", got)
	}
	if got := fmt.Sprint(ids(h.search(`{"online":false,"limit":2}`))); got != "[c a]" {
		t.Fatalf("offline, two: %s", got)
	}
	r := h.want(h.search(`{"limit":500}`), 200, "")
	if notes, _ := r.body["notes"].([]any); len(notes) != 1 || notes[0] != "limit 500 is over 50: at most 50 results are returned" {
		t.Fatalf("a clamped limit: %s", r.raw)
	}
	if _, ok := h.search(`{"limit":50}`).body["notes"]; ok {
		t.Fatal("notes without anything to note")
	}
	if r := h.search(`{"query":"!!"}`); r.body["notes"] == nil {
		t.Fatalf("a query without words: %s", r.raw)
	}
}

// TestListedCapabilitiesOnce: an agent registered with capabilities its
// listing names too shows each once, in search and on its discovery card.
func TestListedCapabilitiesOnce(t *testing.T) {
	h := newHarness(t)
	h.want(h.signed(h.admin, "POST", "/v1/admin/catalog", `{"listings":[{"agent_id":"scan-1","name":"Scan","capabilities":["ocr","PDF","fax"]}]}`), 200, "")
	h.want(h.do("POST", "/v1/agents/register", `{"agent_id":"scan-1","capabilities":["ocr","pdf"]}`), 201, "")
	if got := fmt.Sprint(result(h.search(`{"query":"scan"}`), 0)["capabilities"]); got != "[ocr pdf fax]" {
		t.Fatalf("search capabilities %s", got)
	}
	card := h.want(h.do("GET", "/agent/scan-1", "", "Accept", "application/json"), 200, "")
	if got := fmt.Sprint(card.body["capabilities"], card.body["tags"]); got != "[ocr pdf fax] [ocr pdf fax]" {
		t.Fatalf("discovery card capabilities and tags %s", got)
	}
}
