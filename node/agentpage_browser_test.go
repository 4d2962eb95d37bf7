package node

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/browsertest"
	"github.com/agentmesh/mesh/internal/testkit"
	"github.com/agentmesh/mesh/interop"
	"github.com/agentmesh/mesh/interop/soltest"
	"github.com/agentmesh/mesh/registryapi"
)

// A card whose text would run script if the page put it in as HTML: the
// payloads set window.pwned.
const (
	xssCardName = `Sum <script>window.pwned = "name"</script>`
	xssCardDesc = `<img src=x onerror="window.pwned = 'description'"> & "more"`
)

// agentBrowserFixture is a mesh whose directory probes cards on loopback
// and knows a fixed SOL/USD rate, and a node b, at the same rate, that
// embeds agent echo-1 (listed in the catalog too, with one report filed)
// and relays agent sum-1, whose card is served by an endpoint on
// loopback. listed-only is in the catalog only.
type agentBrowserFixture struct {
	m        *mesh
	b        *Node
	sum      *cardServer
	sumKey   string // sum-1's api key
	sumToken string
}

func newAgentBrowserFixture(t *testing.T) *agentBrowserFixture {
	t.Helper()
	m := newMeshWith(t, probing)
	cfg := m.config(t.TempDir(), RoleNode)
	cfg.SolUSD = 150
	cfg.Agent = echoAgent("echo-1", soltest.New(t), interop.NewWallet().Address())
	cfg.Agent.HeartbeatInterval = 50 * time.Millisecond
	f := &agentBrowserFixture{m: m, b: m.start(cfg)}
	testkit.Eventually(t, 15*time.Second, f.b.AgentRegistered, "echo-1 never registered")
	listings := `{"listings":[{"agent_id":"echo-1","name":"Echo Listing","description":"listed before it went live","url":"https://echo.example/about"},
		{"agent_id":"listed-only","name":"Old Listing","description":"scraped <b>once</b>","url":"https://old.example/","capabilities":["ocr"]}]}`
	if st, v := m.signedCall(f.b, m.boot.key, "POST", "/v1/admin/catalog", listings); st != 200 {
		t.Fatalf("catalog import: %d %v", st, v)
	}
	if st, v := m.signedCall(f.b, identity.GenerateKey(), "POST", "/v1/agents/echo-1/feedback", `{"success":true,"latency_ms":500}`); st != 200 {
		t.Fatalf("feedback: %d %v", st, v)
	}
	f.sum = newCardServer(t, fmt.Sprintf(`{"name":%q,"description":%q,
		"pricing":{"unit":"request","amount":2000000,"currency":"lamports","network":"chain-devnet"},
		"skills":[{"id":"summarize","name":"Summarize","tags":["text"]}]}`, xssCardName, xssCardDesc))
	f.sumKey = m.registerAgent(f.b, "sum-1", identity.GenerateKey(), f.sum.srv.URL)
	f.sumToken = m.token(f.b, "sum-1", f.sumKey)
	m.heartbeat(f.b, f.sumToken)
	m.waitCaughtUp(f.b)
	return f
}

// TestAgentPagesInBrowser: what a person sees of agents' public addresses
// in chromium, on a node that is not the directory (and on the directory
// where only it knows yet): a live embedded agent, read with script off
// (the pages' policy allows none), with its pricing in SOL and USD, its
// report and its listing under a live banner; a
// catalog-only agent's listing; a fetched card's script-like text shown
// as text and run nowhere; its endpoint dying while it heartbeats; its
// heartbeats stopping; its deregistration.
func TestAgentPagesInBrowser(t *testing.T) {
	browsertest.Need(t) // not parallel: the tests share one browser
	f := newAgentBrowserFixture(t)
	tab := browsertest.Tab(t, 90*time.Second)
	problems := browsertest.Problems(tab)
	f.checkLiveAgent(t, tab)
	f.checkCatalogOnly(t, tab)
	f.checkScriptInCard(t, tab)
	f.checkDeadEndpoint(t, tab)
	f.checkHeartbeatsStop(t, tab)
	// Before the 404 page, which the browser reports as a failed load.
	if p := problems(); len(p) > 0 {
		t.Fatalf("the pages reported errors (a refused script or style?): %q", p)
	}
	f.checkDeregistered(t, tab)
}

// checkLiveAgent: echo-1's page on b, script off, shows its card, online,
// its price at the node's rate, its report, its listing under the live
// banner, and its stylesheet applies.
func (f *agentBrowserFixture) checkLiveAgent(t *testing.T, tab context.Context) {
	t.Helper()
	if _, err := chromedp.Call(tab, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true}); err != nil {
		t.Fatal(err)
	}
	defer chromedp.Call(tab, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: false})
	url := f.b.URL() + "/agent/echo-1"
	browsertest.UntilLoaded(t, tab, url, `document.querySelector("#reputation").dataset.n === "1" && document.querySelector("#liveness").dataset.state === "reachable"`,
		"the filed report and a probe of the endpoint")
	want := map[string][]string{
		"#agent-name": {"Echo"}, "#agent-description": {"echoes its input"}, "#agent-id": {"echo-1"},
		"#agent-handle": {url}, "#agent-endpoint": {f.b.URL()}, "#online-badge.answering[data-online=true]": {"online, answering"},
		"#capabilities li.capability": {"echo"}, "#skills li.skill[data-skill-id=echo] .skill-name": {"Echo"},
		"#pricing li.price-row .price-sol": {"0.000005 SOL"}, "#pricing li.price-row .price-usd": {"$0.00075"},
		"#pricing li.price-row .price-network": {"chain-devnet"}, "#sol-usd-rate": {"At 150 USD per SOL (fixed rate, 0 s old)."},
		"#reputation[data-n='1'] #reputation-weighted": {"Weighted score 0.09 of 1: 0 of 1 report from paying callers."},
		"#reputation-plain":                            {"Plain score 1.00 of 1 (every report counted alike)."},
		"#live-banner":                                 {"This directory listing belongs to an agent registered on the mesh with a verified key: what it registered comes first, the listing below."},
		"#listing-name":                                {"Echo Listing"}, "#listing-description": {"listed before it went live"}, "#listing-url": {"https://echo.example/about"},
		"#card-link": {url + "/.well-known/agent.json"}, "#liveness[data-state=reachable] #last-reachable": {"*"}, "#last-heartbeat": {"*"},
	}
	checkSeen(t, tab, want)
	if did := seen(t, tab, "#agent-did"); len(did) != 1 || !strings.HasPrefix(did[0], "did:") {
		t.Fatalf("#agent-did shows %q", did)
	}
	if href := evalIn[string](t, tab, `document.querySelector("#card-link").href`); href != url+"/.well-known/agent.json" {
		t.Fatalf("the card link goes to %s", href)
	}
	// The stylesheet loaded under the policy and applies: the badge is
	// styled apart from the text around it.
	if !evalIn[bool](t, tab, `getComputedStyle(document.querySelector("#online-badge")).backgroundColor !== getComputedStyle(document.body).backgroundColor`) {
		t.Fatal("the stylesheet does not style the online badge")
	}
}

// checkCatalogOnly: listed-only's page shows its listing, as text, no
// live banner, and says it is not on the mesh.
func (f *agentBrowserFixture) checkCatalogOnly(t *testing.T, tab context.Context) {
	t.Helper()
	run(t, tab, chromedp.Navigate(f.b.URL()+"/agent/listed-only"))
	checkSeen(t, tab, map[string][]string{
		"#online-badge.catalog[data-online=false]": {"listed only"}, "#agent-name": {"Old Listing"}, "#listing-name": nil,
		"#agent-description": {"scraped <b>once</b>"}, "#listing-description": nil, "#listing-url": {"https://old.example/"}, "#live-banner": nil,
		"#capabilities li.capability": {"ocr"}, "#liveness-summary": {"Not registered on the mesh: nothing is probed."},
	})
}

// checkScriptInCard: sum-1's fetched card, on the directory, shows its
// script-like name and description as text, and none of it ran.
func (f *agentBrowserFixture) checkScriptInCard(t *testing.T, tab context.Context) {
	t.Helper()
	browsertest.UntilLoaded(t, tab, f.m.boot.URL()+"/agent/sum-1",
		`document.querySelector("#liveness").dataset.state === "reachable" && document.querySelector("#agent-name").textContent !== "sum-1"`, "the fetched card")
	browsertest.Until(t, tab, textIs("#agent-name", xssCardName), "the card's name as text")
	browsertest.Until(t, tab, textIs("#agent-description", xssCardDesc), "the card's description as text")
	checkSeen(t, tab, map[string][]string{
		"#agent-name": {xssCardName}, "#agent-description": {xssCardDesc}, "#online-badge.answering": {"online, answering"},
		"#pricing li.price-row .price-sol": {"0.002 SOL"}, "#pricing li.price-row .price-usd": {"$0.30"},
		"#skills li.skill[data-skill-id=summarize] .tag": {"text"},
	})
	if got := evalIn[string](t, tab, `String(window.pwned) + " " + document.querySelectorAll("script, img").length + " " + document.title`); got != "undefined 0 "+xssCardName+" · agent · mesh" {
		t.Fatalf("window.pwned, scripts and images, title: %q: did the card's text run?", got)
	}
}

// checkDeadEndpoint: sum-1's endpoint dies while it heartbeats; the
// directory's next probe shows it unreachable, and b's page once a
// heartbeat passed through b.
func (f *agentBrowserFixture) checkDeadEndpoint(t *testing.T, tab context.Context) {
	t.Helper()
	f.sum.srv.Close()
	f.m.clock.Advance(2 * time.Second)
	unreachable := `document.querySelector("#liveness").dataset.state === "unreachable"`
	browsertest.UntilLoaded(t, tab, f.m.boot.URL()+"/agent/sum-1", unreachable, "the directory's probe to fail")
	f.m.heartbeat(f.b, f.sumToken)
	browsertest.UntilLoaded(t, tab, f.b.URL()+"/agent/sum-1", unreachable, "the failed probe on b")
	checkSeen(t, tab, map[string][]string{"#online-badge.failing[data-online=true]": {"*"}, "#last-reachable": {"*"}, "#last-failure": {"*"}})
	if s := seen(t, tab, "#online-badge"); len(s) != 1 || !strings.HasPrefix(s[0], "online, endpoint not answering since ") || !strings.HasSuffix(s[0], " UTC") {
		t.Fatalf("#online-badge shows %q", s)
	}
	if s := seen(t, tab, "#liveness-summary"); len(s) != 1 || !strings.HasPrefix(s[0], "Endpoint not answering since ") {
		t.Fatalf("#liveness-summary shows %q", s)
	}
	if r := seen(t, tab, "#failure-reason"); len(r) != 1 || !strings.Contains(r[0], "unreachable") {
		t.Fatalf("#failure-reason shows %q", r)
	}
}

// checkHeartbeatsStop: sum-1 beats no more and, once its online window
// passed, shows offline; echo-1, which beats on, stays online.
func (f *agentBrowserFixture) checkHeartbeatsStop(t *testing.T, tab context.Context) {
	t.Helper()
	f.m.clock.Advance(registryapi.DefaultOnlineWindow + time.Second)
	browsertest.UntilLoaded(t, tab, f.b.URL()+"/agent/sum-1", `document.querySelector("#online-badge").dataset.online === "false"`, "sum-1 offline")
	if s := seen(t, tab, "#online-badge.offline"); len(s) != 1 || !strings.HasPrefix(s[0], "offline since ") {
		t.Fatalf("#online-badge of an agent whose heartbeats stopped shows %q", s)
	}
	if s := seen(t, tab, "#liveness-summary"); len(s) != 1 || !strings.HasPrefix(s[0], "Endpoint not answering since ") {
		t.Fatalf("#liveness-summary of an offline agent shows %q", s)
	}
	browsertest.UntilLoaded(t, tab, f.b.URL()+"/agent/echo-1", `document.querySelector("#online-badge").dataset.online === "true"`, "echo-1 online")
}

// checkDeregistered: once sum-1 deregisters, its page is the 404 page.
func (f *agentBrowserFixture) checkDeregistered(t *testing.T, tab context.Context) {
	t.Helper()
	f.m.deleteAgent(f.b, "sum-1", f.sumKey)
	url := f.b.URL() + "/agent/sum-1"
	browsertest.UntilLoaded(t, tab, url, `document.querySelector("#not-found") !== null`, "the 404 page")
	checkSeen(t, tab, map[string][]string{"#not-found h1": {"No such agent"}, "#agent-name": nil})
	if resp, err := chromedp.Run(tab, chromedp.NavigateResponse(url)); err != nil || resp.Status != 404 {
		t.Fatalf("page of a deregistered agent: %v (%v), want 404", resp, err)
	}
}

// evalIn is the value of JavaScript expression expr in tab.
func evalIn[T any](t *testing.T, tab context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(tab, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	return v
}

// seen is the text a person sees in each element of CSS selector sel, in
// order: the rendered text of those shown.
func seen(t *testing.T, tab context.Context, sel string) []string {
	t.Helper()
	return evalIn[[]string](t, tab, fmt.Sprintf(`[...document.querySelectorAll(%s)].filter(e => e.checkVisibility()).map(e => e.innerText.trim())`, jsString(sel)))
}

// checkSeen fails t unless each selector of want shows its texts ("*":
// any text but none) and nothing else (nil: nothing is shown).
func checkSeen(t *testing.T, tab context.Context, want map[string][]string) {
	t.Helper()
	for sel, texts := range want {
		got := seen(t, tab, sel)
		ok := len(got) == len(texts)
		for i := 0; ok && i < len(got); i++ {
			ok = got[i] == texts[i] || texts[i] == "*" && got[i] != ""
		}
		if !ok {
			t.Errorf("%s shows %q, want %q", sel, got, texts)
		}
	}
	if t.Failed() {
		html := evalIn[string](t, tab, `document.documentElement.outerHTML`)
		t.Fatalf("the page:\n%s", html)
	}
}
