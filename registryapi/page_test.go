package registryapi

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/httpx"
	"github.com/agentmesh/mesh/internal/site"
)

// TestLivenessTransitions: a failure starts a run of failures that the
// next success ends; last reachable and last failure stay.
func TestLivenessTransitions(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	down := errors.New("unreachable: connection refused")
	var l Liveness
	l = l.after(at(0), nil)
	if !l.IsReachable() || l.Reachable != at(0).Unix() || l.FailingSince != 0 {
		t.Fatalf("after a success: %+v", l)
	}
	l = l.after(at(10), down)
	l = l.after(at(20), errors.New("unexpected status 500"))
	if l.IsReachable() || l.FailingSince != at(10).Unix() || l.Failed != at(20).Unix() || l.Reason != "unexpected status 500" || l.Reachable != at(0).Unix() {
		t.Fatalf("after two failures: %+v", l)
	}
	l = l.after(at(30), nil)
	if !l.IsReachable() || l.FailingSince != 0 || l.Failed != at(20).Unix() || l.Checked != at(30).Unix() {
		t.Fatalf("after recovering: %+v", l)
	}
	long := errors.New(string(make([]byte, 500)) + "é")
	if r := l.after(at(40), long).Reason; len(r) > maxReasonLen+len("…") {
		t.Fatalf("reason of %d bytes kept", len(r))
	}
}

// TestMirrorCompletesA2AFields: a card lacking what A2A requires gets it,
// and keeps every field it has, unknown ones included.
func TestMirrorCompletesA2AFields(t *testing.T) {
	raw, _, err := parseFullCard([]byte(`{"name":"N","x-extra":{"a":1},"version":"2","skills":[{"id":"s1"}],"pricing":{"unit":"request","amount":10,"currency":"lamports"}}`))
	if err != nil {
		t.Fatal(err)
	}
	a := &Agent{ID: "agent-1", Reg: 1, Endpoint: "https://a.example", Capabilities: []string{"c1"}, FullCard: raw}
	m, err := mirrorCard(a)
	if err != nil {
		t.Fatal(err)
	}
	skill := m["skills"].([]any)[0].(map[string]any)
	if m["name"] != "N" || m["version"] != "2" || m["url"] != "https://a.example" || m["protocolVersion"] != A2AProtocolVersion ||
		m["x-extra"] == nil || m["description"] != "" || skill["name"] != "s1" || skill["tags"] == nil {
		t.Fatalf("mirror %v", m)
	}
	if _, err := mirrorCard(&Agent{ID: "listed", Listing: &Listing{Name: "L"}}); !errors.Is(err, ErrNoCard) {
		t.Fatalf("a listing's card: %v", err)
	}
	for _, bad := range []string{`[]`, `"x"`, `{"skills":[{"name":"no id"}]}`, `{"capabilities":[]}`, `{"pricing":[1]}`, `{`} {
		if _, _, err := parseFullCard([]byte(bad)); err == nil {
			t.Errorf("card %s was taken", bad)
		}
	}
}

// FuzzFullCard: any bytes are refused with a client answer, or kept as a
// card that the mirror and the page's reads take without failing.
func FuzzFullCard(f *testing.F) {
	for _, s := range []string{`{"name":"a","skills":[{"id":"x","tags":["t"]}],"pricing":{"unit":"request","amount":1,"currency":"lamports"}}`,
		`{"pricing":[{"unit":"request","amount":0,"currency":"free"}],"capabilities":{}}`, `{}`, `[`, `null`, `{"skills":[1]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		raw, _, err := parseFullCard(b)
		if err != nil {
			if _, ok := httpx.AsError(err); !ok {
				t.Fatalf("%q: error without a client answer: %v", b, err)
			}
			return
		}
		a := &Agent{ID: "a", Reg: 1, FullCard: raw, Capabilities: []string{"c"}}
		if _, err := mirrorCard(a); err != nil {
			t.Fatalf("%q kept but not mirrored: %v", b, err)
		}
		a.texts()
		a.skills()
		a.pricing()
	})
}

// TestLivenessFollowsEndpoint: an agent that moves to another endpoint
// does not keep the former one's reachability, nor gets a probe sooner
// for it (the new one is due when the former one's probe is refresh old),
// and a probe of the former one that ends late is dropped.
func TestLivenessFollowsEndpoint(t *testing.T) {
	h := newHarness(t)
	key := identity.GenerateKey()
	h.registerKeyed("mover", key)
	a, _ := h.dir.Agent("mover")
	h.dir.RecordProbe("mover", a.Reg, a.Endpoint, h.clock.Now(), nil)
	state := func() string {
		r := h.want(h.do("GET", "/agent/mover", "", "Accept", "application/json"), 200, "")
		return r.body["liveness"].(map[string]any)["state"].(string)
	}
	if s := state(); s != LiveReachable {
		t.Fatalf("after a probe that read the card: %s", s)
	}
	body := jsonBody(map[string]any{"agent_id": "mover", "capabilities": []string{"echo"}, "endpoint": "https://dead.example",
		"pubkey": identity.EncodePublicKey(key.Public().(ed25519.PublicKey))})
	h.want(h.signed(key, "POST", "/v1/agents/register", body), 200, "")
	if s := state(); s != LiveUnchecked {
		t.Fatalf("after moving to another endpoint: %s, want %s", s, LiveUnchecked)
	}
	if due, _, err := h.dir.ProbesDue("", 10, 10, h.clock.Now(), time.Hour); err != nil || len(due) != 0 {
		t.Fatalf("probes due at once after a move: %+v %v", due, err)
	}
	h.clock.Advance(time.Hour)
	due, _, err := h.dir.ProbesDue("", 10, 10, h.clock.Now(), time.Hour)
	if err != nil || len(due) != 1 || due[0].Endpoint != "https://dead.example" {
		t.Fatalf("probes due a refresh on: %+v %v", due, err)
	}
	h.dir.RecordProbe("mover", a.Reg, a.Endpoint, h.clock.Now(), nil) // the former endpoint's, late
	if s := state(); s != LiveUnchecked {
		t.Fatalf("after a late probe of the former endpoint: %s", s)
	}
	h.dir.RecordProbe("mover", a.Reg, "https://dead.example", h.clock.Now(), errors.New("unreachable: timed out"))
	if s := state(); s != LiveUnreachable {
		t.Fatalf("after a failed probe of the new endpoint: %s", s)
	}
}

// TestFullCardDepthBounded: a card nesting past maxCardDepth is refused
// with its registration, and when fetched (the probe's check); brackets
// and escaped quotes inside strings do not count.
func TestFullCardDepthBounded(t *testing.T) {
	h := newHarness(t)
	nested := func(depth int) json.RawMessage {
		inner := `"deep \" [[[{{{"`
		for range depth - 1 {
			inner = `{"a":` + inner + `}`
		}
		return json.RawMessage(`{"name":"n","x":` + inner + `}`)
	}
	register := func(id string, card json.RawMessage) reply {
		return h.do("POST", "/v1/agents/register", jsonBody(map[string]any{"agent_id": id, "capabilities": []string{"x"}, "full_card": card}))
	}
	h.want(register("deep-ok", nested(maxCardDepth)), 201, "")
	r := h.want(register("too-deep", nested(maxCardDepth+1)), 400, "invalid_request")
	if !strings.Contains(r.str("detail"), "32 deep") {
		t.Fatalf("detail %q", r.str("detail"))
	}
	if ValidateFullCard(nested(maxCardDepth)) != nil || ValidateFullCard(nested(maxCardDepth+1)) == nil {
		t.Fatal("the fetched cards' check does not bound the depth at 32")
	}
}

// TestPageLinksOnlyWebURLs: a script URL never becomes a link on the page:
// the catalog refuses one as a listing's url, an endpoint is refused at
// registration, and the template would defuse one that got through.
func TestPageLinksOnlyWebURLs(t *testing.T) {
	h := newHarness(t)
	for _, u := range []string{"javascript:alert(1)", "JavaScript:alert(1)", "data:text/html,<script>alert(1)</script>", "vbscript:x"} {
		cat := jsonBody(map[string]any{"listings": []map[string]any{{"agent_id": "evil-1", "name": "E", "url": u}}})
		h.want(h.signed(h.admin, "POST", "/v1/admin/catalog", cat), 400, "invalid_request")
		h.want(h.do("POST", "/v1/agents/register", jsonBody(map[string]any{"agent_id": "evil-2", "capabilities": []string{"x"}, "endpoint": u})),
			400, "invalid_request")
		var out strings.Builder
		v := &DiscoveryView{AgentID: "evil-1", Name: "E", Listing: &Listing{Name: "E", URL: u}, Card: &u, Endpoint: &u,
			Registered: true, Liveness: LivenessView{State: LiveNoEndpoint}}
		data := (&API{}).newPageData(httptest.NewRequest("GET", "/agent/evil-1", nil), &Agent{ID: "evil-1", Reg: 1}, v)
		if err := newPageTemplates(site.New(site.Info{}, nil)).agent.ExecuteTemplate(&out, "layout", data); err != nil {
			t.Fatal(err)
		}
		if html := strings.ToLower(out.String()); strings.Contains(html, `href="`+strings.ToLower(u[:5])) {
			t.Fatalf("%s became a link:\n%s", u, out.String())
		}
	}
}

// TestPriceOfTokenRows: a page prices a lamports or wrapped SOL row in SOL
// (and in USD at the node's rate), a USDC row in dollars at par, and a
// row in another token in its own smallest unit only.
func TestPriceOfTokenRows(t *testing.T) {
	rt := SolUSDRate{USD: 150}
	cases := []struct {
		row       PriceRow
		sol       float64
		usd       float64 // -1: none
		amountTxt string
	}{
		{PriceRow{Unit: "request", Amount: 5000, Currency: "lamports"}, 0.000005, 0.00075, "0.000005 SOL"},
		{PriceRow{Unit: "request", Amount: 20000, Currency: "wSOL"}, 0.00002, 0.003, "0.00002 wSOL"},
		{PriceRow{Unit: "request", Amount: 10000, Currency: "USDC"}, 0, 0.01, "0.01 USDC"},
		{PriceRow{Unit: "request", Amount: 7, Currency: "BONK"}, 0, -1, "7 BONK (smallest units)"},
	}
	for _, c := range cases {
		v := priceView(c.row, rt, true)
		if v.SOL != c.sol || (c.usd < 0) != (v.USD == nil) || v.USD != nil && *v.USD != c.usd {
			t.Errorf("%s: sol %v usd %v", c.row.Currency, v.SOL, v.USD)
		}
		if got := priceAmount(c.row, v.SOL); got != c.amountTxt {
			t.Errorf("%s: %q, want %q", c.row.Currency, got, c.amountTxt)
		}
	}
}
