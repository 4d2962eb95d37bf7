package node

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/agentmesh/mesh/internal/browsertest"
)

// present is a JavaScript test that CSS selector sel matches an element.
func present(sel string) string {
	return fmt.Sprintf(`document.querySelector(%s) !== null`, jsString(sel))
}

func absent(sel string) string { return "!(" + present(sel) + ")" }

// markersAre is a JavaScript test that the map's markers stand for posts
// ids, each once.
func markersAre(ids ...string) string {
	want, _ := json.Marshal(slices.Sorted(slices.Values(ids)))
	return fmt.Sprintf(`JSON.stringify([...document.querySelectorAll("#board-map a.marker")].flatMap(a => a.dataset.posts.split(" ")).sort()) === %s`,
		jsString(string(want)))
}

func postItem(id string) string { return fmt.Sprintf(`li.post[data-post=%q]`, id) }

func marker(id string) string { return fmt.Sprintf(`#board-map a.marker[data-posts~=%q]`, id) }

// TestClusterBoardsInBrowser: a public cluster's boards in chromium, on
// a mesh of three nodes, the page open on the bootstrap. It shows the
// boards and their posts as text, the age-gated board without its posts,
// and a map with a marker per post that has a location. Posts made and
// deleted through the other nodes' APIs, and boards made and deleted
// there, appear and go on the open page (board frames, then the public
// API), markers with them; the map the script draws is the one the node
// draws; nothing the page does is refused or fails.
func TestClusterBoardsInBrowser(t *testing.T) {
	browsertest.Need(t) // not parallel: the tests share one browser
	f := newBoardPageFixture(t)
	tab := browsertest.Tab(t, 90*time.Second)
	problems := browsertest.Problems(tab)
	boot := f.m.boot

	run(t, tab, chromedp.Navigate(boot.URL()+"/clusters/"+f.slug))
	browsertest.Until(t, tab, `document.querySelector("#wall-status").dataset.state === "live"`, "the live wall to connect")
	browsertest.Until(t, tab, `document.querySelectorAll("#boards li.board").length === 3`, "the three boards")
	browsertest.Until(t, tab, textIs(postItem(f.posts["bike"])+" .post-title", xssPostTitle), "a post's title as text")
	browsertest.Until(t, tab, textIs(postItem(f.posts["bike"])+" .where", xssLabel), "a post's label as text")
	browsertest.Until(t, tab, textIs(`li.board[data-board="market"] .about`, xssAbout), "a board's charter as text")
	browsertest.Until(t, tab, present(`li.board[data-board="adults"] .age-restricted`), "the age-gated board said to be so")
	browsertest.Until(t, tab, absent(`li.board[data-board="adults"] li.post`), "no post of the age-gated board")
	browsertest.Until(t, tab, markersAre(f.ids("bike", "lamp", "tokyo")...), "a marker for each post with a location")
	browsertest.Until(t, tab, fmt.Sprintf(`[%s, %s].includes(document.querySelector(%s).textContent)`, jsString(xssLabel+", Paris: 2 posts"),
		jsString("Paris, "+xssLabel+": 2 posts"), jsString(marker(f.posts["bike"])+" title")), "bike and lamp, close, one marker of two")
	browsertest.Until(t, tab, textIs(marker(f.posts["bike"])+" text", "2"), "the marker's count")
	checkMarkerPlaces(t, tab, f)

	// A located post made through c: its frame reaches the page on the
	// bootstrap, which fetches the board's posts again.
	sydney := createPost(t, f.c, f.cl, "global", "bob", map[string]any{"title": "Sydney surf", "ttl": "24h", "body": strings.Repeat("ß", 300),
		"props": map[string]any{"where": map[string]any{"lat": -33.87, "lon": 151.21, "label": "Sydney"}}})["id"].(string)
	browsertest.Until(t, tab, textIs(postItem(sydney)+" .post-title", "Sydney surf"), "the new post")
	browsertest.Until(t, tab, textIs(postItem(sydney)+" .excerpt", strings.Repeat("ß", 280)+"…"), "its body's first 280 characters")
	browsertest.Until(t, tab, textIs(postItem(sydney)+" .where", "Sydney"), "its label")
	browsertest.Until(t, tab, markersAre(append(f.ids("bike", "lamp", "tokyo"), sydney)...), "the new post's marker")
	browsertest.Until(t, tab, textIs(marker(sydney)+" title", "Sydney: Sydney surf"), "the new marker's title")
	plain := createPost(t, f.c, f.cl, "market", "bob", map[string]any{"title": "Nowhere in particular", "ttl": "24h", "props": map[string]any{"where": "none"}})["id"].(string)
	browsertest.Until(t, tab, present(postItem(plain)), "the post without a location")
	browsertest.Until(t, tab, absent(marker(plain)), "no marker for it")
	mustCall(t, f.c, 201, "POST", f.cl.path("/boards/adults/posts?agent=bob&adult=1"), `{"title":"Another adult post","ttl":"24h"}`)

	// lamp deleted through b: gone from the board and the map.
	mustCall(t, f.b, 200, "DELETE", f.cl.path("/boards/market/posts/"+f.posts["lamp"]+"?agent=alice"), "")
	browsertest.Until(t, tab, absent(postItem(f.posts["lamp"])), "the deleted post gone")
	browsertest.Until(t, tab, markersAre(append(f.ids("bike", "tokyo"), sydney)...), "the deleted post's marker gone")

	// A board made through c, with a post in Honolulu, then market
	// deleted through b: the posts left (Tokyo, Sydney, Honolulu) span
	// the antimeridian.
	mustCall(t, f.c, 201, "POST", f.cl.path("/boards"), `{"slug":"events","kind":"events","about":"What is on."}`, "x-cluster-token", f.cl.admin)
	browsertest.Until(t, tab, `[...document.querySelectorAll("#boards li.board")].map(b => b.dataset.board).join() === "adults,events,global,market"`,
		"the new board in its place")
	honolulu := createPost(t, f.c, f.cl, "events", "bob", map[string]any{"title": "Luau", "ttl": "7d",
		"props": map[string]any{"where": map[string]any{"lat": 21.31, "lon": -157.86, "label": "Honolulu"}}})["id"].(string)
	browsertest.Until(t, tab, present(postItem(honolulu)), "the new board's post")
	mustCall(t, f.b, 200, "DELETE", f.cl.path("/boards/market"), "", "x-cluster-token", f.cl.admin)
	browsertest.Until(t, tab, absent(`li.board[data-board="market"]`), "the deleted board gone")
	browsertest.Until(t, tab, markersAre(f.posts["tokyo"], sydney, honolulu), "the markers of the boards left")
	sameMap(t, tab, boot, f.slug)

	// events deleted and made again: a new board, without the old posts.
	mustCall(t, f.b, 200, "DELETE", f.cl.path("/boards/events"), "", "x-cluster-token", f.cl.admin)
	mustCall(t, f.c, 201, "POST", f.cl.path("/boards"), `{"slug":"events","kind":"generic"}`, "x-cluster-token", f.cl.admin)
	browsertest.Until(t, tab, textIs(`li.board[data-board="events"] .kind`, "generic"), "the new events board")
	browsertest.Until(t, tab, textIs(`li.board[data-board="events"] .no-posts`, "No live post."), "the new board empty")
	browsertest.Until(t, tab, markersAre(f.posts["tokyo"], sydney), "the old board's marker gone")
	sameMap(t, tab, boot, f.slug)

	if p := problems(); len(p) > 0 {
		t.Fatalf("the page reported errors (a refused script, style or fetch?): %q", p)
	}
	if title, err := chromedp.Run(tab, chromedp.Title()); err != nil || title != "Plaza · mesh" {
		t.Fatalf("title %q (%v): did a post's script run?", title, err)
	}
	browsertest.Until(t, tab, absent(`li.board[data-board="adults"] li.post`), "still no post of the age-gated board")
}

// sameMap fails t unless the map in tab is the one n draws on the page
// of cluster slug now: the same box, the same markers at the same places.
func sameMap(t *testing.T, tab context.Context, n *Node, slug string) {
	t.Helper()
	body := getPage(t, n, "/clusters/"+slug).body
	want := pageMarkers(t, body)
	box, err := chromedp.Run(tab, chromedp.Evaluate[string](`document.querySelector("#board-map svg.map").getAttribute("viewBox")`))
	wantBox := regexp.MustCompile(`<svg class="map" viewBox="([^"]+)"`).FindStringSubmatch(body)
	if err != nil || wantBox == nil || !closeNumbers(box, wantBox[1]) {
		t.Fatalf("the page's map is of the box %q (%v), the node's %q", box, err, wantBox)
	}
	js, err := chromedp.Run(tab, chromedp.Evaluate[string](`JSON.stringify(Object.fromEntries([...document.querySelectorAll("#board-map a.marker")].flatMap(a =>
		a.dataset.posts.split(" ").map(id => [id, [+a.querySelector("circle").getAttribute("cx"), +a.querySelector("circle").getAttribute("cy")]]))))`))
	if err != nil {
		t.Fatal(err)
	}
	var got map[string][2]float64
	if err := json.Unmarshal([]byte(js), &got); err != nil || !slices.Equal(slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want))) {
		t.Fatalf("the page's markers %s (%v), the node's %v", js, err, want)
	}
	for id, at := range got {
		if w := want[id]; math.Abs(at[0]-w.x) > 0.02 || math.Abs(at[1]-w.y) > 0.02 {
			t.Fatalf("marker %s: the page has it at %v, the node at %v", id, at, w)
		}
	}
}

// checkMarkerPlaces: the map's markers take the keyboard's focus, and a
// focused marker shows its posts under the map (and no other's); a tap
// (a click) shows them too; the land is drawn from the node's outline.
func checkMarkerPlaces(t *testing.T, tab context.Context, f *boardPageFixture) {
	t.Helper()
	paris, tokyo := marker(f.posts["bike"]), marker(f.posts["tokyo"])
	shown := `[...document.querySelectorAll("#board-map .place")].filter(p => p.checkVisibility()).map(p => [...p.querySelectorAll("a[data-post]")].map(a => a.dataset.post).sort().join(" "))`
	for _, step := range []struct {
		sel, want string
		act       chromedp.Action[chromedp.Void]
	}{
		{paris, strings.Join(f.ids("bike", "lamp"), " "), chromedp.Focus(chromedp.CSS(paris))},
		{tokyo, f.posts["tokyo"], chromedp.Focus(chromedp.CSS(tokyo))},
		{paris, strings.Join(f.ids("bike", "lamp"), " "), chromedp.Click(chromedp.CSS(paris))},
	} {
		run(t, tab, step.act)
		browsertest.Until(t, tab, fmt.Sprintf(`JSON.stringify(%s) === %s`, shown, jsString(fmt.Sprintf("[%q]", step.want))), "the posts of "+step.sel+" alone under the map")
	}
	if !evalIn[bool](t, tab, fmt.Sprintf(`document.querySelector(%s).classList.contains("chosen") && document.querySelectorAll("#board-map .marker.chosen").length === 1`, jsString(paris))) {
		t.Fatal("the tapped marker is not shown as the one chosen")
	}
	if !evalIn[bool](t, tab, `document.querySelector("#board-map g.land use").getAttribute("href") === "/assets/wall/land.svg#land"`) {
		t.Fatal("the map draws no land")
	}
}

// closeNumbers reports whether a and b are lists of as many numbers,
// each within 0.02 of the other's (both are rounded to 2 decimals).
func closeNumbers(a, b string) bool {
	as, bs := strings.Fields(a), strings.Fields(b)
	if len(as) != len(bs) {
		return false
	}
	for i := range as {
		x, errX := strconv.ParseFloat(as[i], 64)
		y, errY := strconv.ParseFloat(bs[i], 64)
		if errX != nil || errY != nil || math.Abs(x-y) > 0.02 {
			return false
		}
	}
	return true
}
