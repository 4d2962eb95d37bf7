package node

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/agentmesh/mesh/internal/browsertest"
)

// TestHomeAndSearchInBrowser: the front door in chromium, script off (the
// pages need none): it lists the agent online now with its status in
// words and links to its page, and the public clusters; its search box
// leads to the agents page, whose results link to the agents' pages; a
// search by a filter alone (online now) lists the agent too.
func TestHomeAndSearchInBrowser(t *testing.T) {
	browsertest.Need(t) // not parallel: the tests share one browser
	f := newAgentBrowserFixture(t)
	tab := browsertest.Tab(t, 60*time.Second)
	problems := browsertest.Problems(tab)
	noScript(t, tab)
	home := f.b.URL() + "/"
	browsertest.UntilLoaded(t, tab, home, `document.querySelector('#online-agents li[data-agent="echo-1"]') !== null`, "echo-1 listed online")
	checkSeen(t, tab, map[string][]string{
		`#online-agents li[data-agent="echo-1"] a.name`: {"Echo"},
		"#busy-clusters li.cluster a.name":              {"Lobby"},
		"header nav a":                                  {"mesh", "Agents", "Clusters", "Search"},
	})
	if href := evalIn[string](t, tab, `document.querySelector('#online-agents li[data-agent="echo-1"] a.name').href`); href != f.b.URL()+"/agent/echo-1" {
		t.Fatalf("the home page links echo-1 to %s", href)
	}
	if s := seen(t, tab, `#online-agents li[data-agent="echo-1"] .badge`); len(s) != 1 || !strings.HasPrefix(s[0], "online") {
		t.Fatalf("echo-1's status on the home page: %q", s)
	}
	if footer := seen(t, tab, "footer .node-name"); len(footer) != 1 || !strings.HasPrefix(f.b.PeerID().String(), strings.Split(footer[0], "…")[0]) {
		t.Fatalf("the footer names the node %q, not %s", footer, f.b.PeerID())
	}

	// The search box, as a person uses it: type, press Enter.
	run(t, tab, chromedp.SendKeys(chromedp.CSS(`#search input[name="q"]`), "summarize\r"), chromedp.WaitVisible(chromedp.CSS("#results")))
	browsertest.Until(t, tab, `location.pathname === "/agents" && new URLSearchParams(location.search).get("q") === "summarize"`, "the agents page")
	browsertest.Until(t, tab, `document.querySelector('#results li[data-agent="sum-1"] a.name') !== null`, "sum-1 found by its card's skill")
	run(t, tab, chromedp.Click(chromedp.CSS(`#results li[data-agent="sum-1"] a.name`)), chromedp.WaitVisible(chromedp.CSS("#agent-id")))
	browsertest.Until(t, tab, `location.pathname === "/agent/sum-1"`, "sum-1's page")

	run(t, tab, chromedp.Navigate(f.b.URL()+"/agents?online=online"))
	if got := seen(t, tab, "#results li.agent-item a.name"); !slices.Contains(got, "Echo") {
		t.Fatalf("online agents %q lack echo-1", got)
	}
	// Before the refused search's page, which the browser reports as a
	// failed load (400).
	if p := problems(); len(p) > 0 {
		t.Fatalf("the pages reported errors: %q", p)
	}
	run(t, tab, chromedp.Navigate(f.b.URL()+"/agents?max_usd=lots"))
	checkSeen(t, tab, map[string][]string{"#search-error": {"the most USD per request must be a number, like 0.01"}})
}

// TestPagesOnPhone: every kind of page at 390 × 844, as on a phone, with
// long URLs, prices, names, listings, wall messages and posts: none is
// wider than the screen, no word is broken across lines (URLs, keys and
// commands may break at their separators), every text has a contrast
// of 4.5:1 at least on its background, and a post that says its language
// carries it.
func TestPagesOnPhone(t *testing.T) {
	browsertest.Need(t) // not parallel: the tests share one browser
	f := newAgentBrowserFixture(t)
	bf := newBoardPageFixture(t)
	tab := browsertest.Tab(t, 120*time.Second)
	run(t, tab, chromedp.EmulateViewport(390, 844))
	for _, p := range []struct{ url, ready string }{
		{f.b.URL() + "/", `document.querySelector("#online-agents") !== null`},
		{f.b.URL() + "/agents?q=echo+summarize", `document.querySelector("#results") !== null`},
		{f.b.URL() + "/agent/echo-1", `document.querySelector("#agent-name") !== null`},
		{f.m.boot.URL() + "/agent/sum-1", `document.querySelector("#agent-name") !== null`},
		{f.b.URL() + "/agent/listed-only", `document.querySelector("#listing") !== null`},
		{f.b.URL() + "/agent/nobody", `document.querySelector("#not-found") !== null`},
		{bf.m.boot.URL() + "/clusters", `document.querySelector("#clusters") !== null`},
		{bf.m.boot.URL() + "/clusters/" + bf.slug, `document.querySelector("#wall-status").dataset.state === "live"`},
		{bf.m.boot.URL() + "/clusters/c_" + strings.Repeat("a", 24), `document.querySelector("#not-found") !== null`},
	} {
		run(t, tab, chromedp.Navigate(p.url))
		browsertest.Until(t, tab, p.ready, p.url)
		if strings.Contains(p.url, "/clusters/"+bf.slug) {
			// A long message with a board and a post named in it.
			alice := enterWall(t, bf.m.boot, bf.cl.id, q("agent", "alice"))
			alice.send("Selling my grandmother's bicycle, see #market and " + bf.posts["bike"] + " for the photographs and the conditions of delivery")
			browsertest.Until(t, tab, `document.querySelectorAll("#wall a.ref").length === 2`, "the message's references as links")
			if got := evalIn[string](t, tab, `[...document.querySelectorAll("#wall a.ref")].map(a => a.getAttribute("href")).join(" ")`); got != "#board-market #post-"+bf.posts["bike"] {
				t.Fatalf("the references link to %q", got)
			}
			if lang := evalIn[string](t, tab, fmt.Sprintf(`document.querySelector(%s).lang`, jsString(postItem(bf.posts["bike"])))); lang != "fr" {
				t.Fatalf("the French post's lang is %q", lang)
			}
			if s := seen(t, tab, "#wall time"); len(s) != 1 || !strings.HasSuffix(s[0], " UTC") {
				t.Fatalf("the wall's clock: %q", s)
			}
		}
		if bad := evalIn[[]string](t, tab, phoneCheck); len(bad) > 0 {
			t.Errorf("%s at 390 px: %q", p.url, bad)
		}
	}
}

// phoneCheck lists what is wrong with the page for a phone: the page
// wider than the screen; a word of a text shown broken across lines
// though it would fit on one (outside URLs, keys and commands,
// .breakable, pre and code, and the map; a word is a run of letters and
// digits); a text whose contrast with its background is under 4.5:1.
const phoneCheck = `(() => {
	const bad = [];
	const doc = document.documentElement;
	if (doc.scrollWidth > window.innerWidth) bad.push("scrollWidth " + doc.scrollWidth + " > " + window.innerWidth);
	const rgb = s => (s.match(/[\d.]+/g) || []).map(Number);
	const lum = c => {
		const [r, g, b] = c.slice(0, 3).map(v => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; });
		return 0.2126 * r + 0.7152 * g + 0.0722 * b;
	};
	const background = el => {
		for (let e = el; e; e = e.parentElement) {
			const c = rgb(getComputedStyle(e).backgroundColor);
			if (c.length === 3 || (c.length === 4 && c[3] > 0)) return c;
		}
		return [255, 255, 255];
	};
	const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
	const checked = new Set();
	for (let n; (n = walker.nextNode()); ) {
		const el = n.parentElement;
		if (!el || !n.data.trim() || !el.checkVisibility() || el.closest("svg, script, style")) continue;
		if (!checked.has(el)) {
			checked.add(el);
			const fg = rgb(getComputedStyle(el).color), bg = background(el);
			const a = fg.length === 4 ? fg[3] : 1;
			const mixed = fg.slice(0, 3).map((v, i) => v * a + bg[i] * (1 - a));
			const [l1, l2] = [lum(mixed), lum(bg)].sort((x, y) => y - x);
			const ratio = (l1 + 0.05) / (l2 + 0.05);
			if (ratio < 4.5) bad.push("contrast " + ratio.toFixed(2) + " of " + JSON.stringify(n.data.trim().slice(0, 30)));
		}
		if (el.closest(".breakable, pre, code")) continue;
		for (const m of n.data.matchAll(/[\p{L}\p{N}]+/gu)) {
			const r = document.createRange();
			r.setStart(n, m.index);
			r.setEnd(n, m.index + m[0].length);
			const rects = [...r.getClientRects()].filter(x => x.width > 0);
			if (new Set(rects.map(x => Math.round(x.top))).size < 2) continue;
			let box = el;
			while (box.parentElement && getComputedStyle(box).display.startsWith("inline")) box = box.parentElement;
			const width = rects.reduce((w, x) => w + x.width, 0);
			if (width <= box.clientWidth) bad.push("word broken: " + m[0]);
		}
	}
	return bad;
})()`

// TestKeyboardFocusOrder: on the home page, the keyboard goes from the
// skip link through the header, the search box and its button, to the
// agents listed, the clusters and the footer, in the order read; each
// stop shows it has the focus.
func TestKeyboardFocusOrder(t *testing.T) {
	browsertest.Need(t) // not parallel: the tests share one browser
	f := newAgentBrowserFixture(t)
	tab := browsertest.Tab(t, 60*time.Second)
	browsertest.UntilLoaded(t, tab, f.b.URL()+"/", `document.querySelector('#online-agents li[data-agent="echo-1"]') !== null`, "echo-1 listed online")
	order := focusOrder(t, tab, 12)
	want := []string{"Skip to content", "mesh", "Agents", "Clusters", "Search", "INPUT:q", "Search", "Echo"}
	if strings.Join(order[:len(want)], "|") != strings.Join(want, "|") {
		t.Fatalf("focus order %q, want it to begin %q", order, want)
	}
	if !slices.Contains(order, "All agents") || !slices.Contains(order, "Lobby") {
		t.Fatalf("focus order %q misses the lists' links", order)
	}
}

// focusOrder presses Tab n times in tab and lists where the focus went:
// a named field as TAG:name, else the element's label (aria-label: the
// wall, a map's marker) or text. It fails t on a stop that does not show it has the focus
// (an outline of 2 px at least; a marker, a ring of 2 px at least).
func focusOrder(t *testing.T, tab context.Context, n int) []string {
	t.Helper()
	var order []string
	for range n {
		run(t, tab, chromedp.KeyEvent("\t"))
		order = append(order, evalIn[string](t, tab, `(() => {
			const e = document.activeElement, s = getComputedStyle(e);
			const ring = e.matches(".marker") && parseFloat(getComputedStyle(e.querySelector("circle")).strokeWidth) >= 2;
			const shown = (ring || s.outlineStyle !== "none" && parseFloat(s.outlineWidth) >= 2) && e.checkVisibility();
			const name = e.getAttribute("name") ? e.tagName + ":" + e.getAttribute("name") : e.getAttribute("aria-label") || (e.textContent || e.value).trim();
			return (shown ? "" : "UNSEEN ") + name;
		})()`))
	}
	for _, stop := range order {
		if strings.HasPrefix(stop, "UNSEEN ") {
			t.Fatalf("focus order %q: a stop does not show its focus", order)
		}
	}
	return order
}

// TestClusterPageReconnectsAfterRestart: a cluster page open on a node
// that shuts down gracefully (its sockets get "closed: node shutting
// down") says it waits to reconnect, and once a node runs again at the
// same address on the same data, it is live again and shows the wall.
func TestClusterPageReconnectsAfterRestart(t *testing.T) {
	browsertest.Need(t) // not parallel: the tests share one browser
	m := newMesh(t)
	b := m.join()
	cfg := b.cfg
	cfg.HTTPAddr, cfg.PublicURL = b.Addr(), ""
	cfg.Listen = []string{strings.Split(b.P2PAddrs()[0], "/p2p/")[0]}
	v := createCluster(t, m.boot, `{"visibility":"public","name":"Harbour"}`)
	id, slug := v["cluster_id"].(string), v["slug"].(string)
	m.waitCaughtUp(b)
	tab := browsertest.Tab(t, 90*time.Second)
	run(t, tab, chromedp.Navigate(b.URL()+"/clusters/"+slug))
	browsertest.Until(t, tab, `document.querySelector("#wall-status").dataset.state === "live"`, "the live wall")

	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	browsertest.Until(t, tab, `(s => s.dataset.state === "down" && /^disconnected \(node shutting down\): reconnecting in \d+ s$/.test(s.textContent))(document.querySelector("#wall-status"))`,
		"the page saying it waits to reconnect")
	b2 := m.start(cfg)
	m.waitCaughtUp(b2)
	browsertest.Until(t, tab, `document.querySelector("#wall-status").dataset.state === "live"`, "the page live again")
	alice := enterWall(t, b2, id, q("agent", "alice"))
	browsertest.Until(t, tab, textIs("#members li", "alice"), "alice listed online")
	alice.send("back in port")
	browsertest.Until(t, tab, textIs("#wall .message .text", "back in port"), "a message after the restart")
}

// noScript turns script off in tab for the rest of the test: the pages
// but the cluster page must need none.
func noScript(t *testing.T, tab context.Context) {
	t.Helper()
	if _, err := chromedp.Call(tab, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true}); err != nil {
		t.Fatal(err)
	}
}
