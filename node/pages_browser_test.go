package node

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/agentmesh/mesh/internal/browsertest"
	"github.com/agentmesh/mesh/internal/testkit"
)

// TestMain runs up to 4 tests at once (their meshes mostly wait on
// timers and loopback: 25 s of CPU in two minutes, one at a time; more at
// once would hold messages past the wall's real-time windows on a loaded
// machine), and closes the browser the browser tests share at the end.
func TestMain(m *testing.M) {
	testkit.Waiting(4)
	os.Exit(browsertest.Main(m))
}

// jsString is s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// textIs is a JavaScript test that the element of CSS selector sel holds
// exactly text, as text, with no element inside.
func textIs(sel, text string) string {
	return fmt.Sprintf(`(e => e !== null && e.textContent === %s && e.children.length === 0)(document.querySelector(%s))`,
		jsString(text), jsString(sel))
}

// handleIs is a JavaScript test that the element of CSS selector sel
// holds exactly handle, as text, with no element inside but the <wbr>s
// where a narrow screen may wrap it.
func handleIs(sel, handle string) string {
	return fmt.Sprintf(`(e => e !== null && e.textContent === %s && [...e.children].every(c => c.tagName === "WBR" && !c.attributes.length))(document.querySelector(%s))`,
		jsString(handle), jsString(sel))
}

// TestClusterPagesInBrowser: what a person sees in chromium, on a mesh of
// a bootstrap and a node. The list on the bootstrap shows the public
// cluster; its page shows the metadata as text and counts the member
// connected to the other node; that member's messages appear on the live
// wall as text; the page's own connection is neither announced to the
// member nor counted; a private cluster's page is 404.
func TestClusterPagesInBrowser(t *testing.T) {
	browsertest.Need(t) // not parallel: the tests share one browser
	f := newPageFixture(t)
	alice := enterWall(t, f.b, f.id, q("agent", xssHandle))
	tab := browsertest.Tab(t, 60*time.Second)
	problems := browsertest.Problems(tab)
	boot := f.m.boot.URL()

	run(t, tab, chromedp.Navigate(boot+"/clusters"))
	link := fmt.Sprintf(`li.cluster[data-cluster=%q] a.name`, f.id)
	browsertest.Until(t, tab, textIs(link, xssName), "the list to show the cluster's name as text")
	href, err := chromedp.Run(tab, chromedp.Evaluate[string](fmt.Sprintf(`document.querySelector(%s).href`, jsString(link))))
	if err != nil || href != boot+"/clusters/"+f.slug {
		t.Fatalf("the cluster's link is %q (%v), want %s", href, err, boot+"/clusters/"+f.slug)
	}

	run(t, tab, chromedp.Navigate(href))
	for sel, text := range map[string]string{"#cluster-name": xssName, "#cluster-topic": xssTopic, "#cluster-description": xssDesc} {
		browsertest.Until(t, tab, textIs(sel, text), sel+" as text")
	}
	browsertest.Until(t, tab, `document.querySelector("#wall-status").dataset.state === "live"`, "the live wall to connect")
	browsertest.Until(t, tab, textIs("#member-count", "1"), "the count of the member on the other node")

	// The page is no member: carol, joining the bootstrap after it, is
	// the first alice hears of, and the count is alice and carol.
	enterWall(t, f.m.boot, f.id, q("agent", "carol"))
	if p := alice.next("presence"); p["agent"] != "carol" {
		t.Fatalf("alice heard %v, want carol online (the page is never announced)", p)
	}
	browsertest.Until(t, tab, textIs("#member-count", "2"), "the page to count alice and carol")
	_, v := call(t, f.b, "GET", "/v1/clusters/"+f.id, "")
	if c := v["cluster"].(map[string]any); c["online"] != 2.0 {
		t.Fatalf("with the page open: %v, want alice and carol online", c)
	}

	// The page is not counted in alice's acks: carol alone receives.
	alice.send("hello from b")
	alice.send(xssText)
	for range 2 {
		if a := alice.next("ack"); a["delivered"] != 1.0 {
			t.Fatalf("ack %v, want 1 delivered (carol)", a)
		}
	}
	browsertest.Until(t, tab, `document.querySelectorAll("#wall .message").length === 2`, "both messages on the wall")
	for i, text := range []string{"hello from b", xssText} {
		sel := fmt.Sprintf("#wall .message:nth-child(%d)", i+1)
		browsertest.Until(t, tab, handleIs(sel+" .from", xssHandle), "the sender as text")
		browsertest.Until(t, tab, textIs(sel+" .text", text), "the message as text")
	}
	title, err := chromedp.Run(tab, chromedp.Title())
	if err != nil || title != xssName+" · mesh" {
		t.Fatalf("title %q (%v): did a script of the cluster's run?", title, err)
	}

	if p := problems(); len(p) > 0 {
		t.Fatalf("the pages reported errors (a refused script, style or socket?): %q", p)
	}

	for _, id := range []string{f.privateID, f.unknownID} {
		resp, err := chromedp.Run(tab, chromedp.NavigateResponse(boot+"/clusters/"+id))
		if err != nil || resp.Status != 404 {
			t.Fatalf("page of %s: %v (%v), want 404", id, resp, err)
		}
		browsertest.Until(t, tab, textIs("h1", "No such public cluster"), "the 404 page")
	}
}

// run runs steps in tab, failing t on error.
func run(t testing.TB, tab context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(tab, steps...); err != nil {
		t.Fatal(err)
	}
}
