package node

import (
	"encoding/json"
	"html"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/mesh/internal/site"
	"github.com/agentmesh/mesh/internal/testkit"
)

// boardPageFixture is a mesh of a bootstrap and two nodes with a public
// cluster whose boards b made: market (located in Paris) with a post at a
// place of its own (bike, labelled xssLabel), one at the board's place
// (lamp) and one with where none (remote); global (where none) with a
// post without a place (ama) and one in Tokyo; adults (age-gated) with
// one post. On the way, it checks that the page has no boards section
// while boards are off, and says there is no board once they are on.
type boardPageFixture struct {
	m     *mesh
	b, c  *Node
	cl    boardCluster
	slug  string
	posts map[string]string // name: id
	board map[string]string // id: its board's slug
}

func newBoardPageFixture(t *testing.T) *boardPageFixture {
	t.Helper()
	m := newMesh(t)
	f := &boardPageFixture{m: m, b: m.join(), c: m.join(), posts: map[string]string{}, board: map[string]string{}}
	v := createCluster(t, f.b, `{"visibility":"public","name":"Plaza","topic":"#plaza"}`)
	f.cl = boardCluster{id: v["cluster_id"].(string), token: v["token"].(string), admin: v["admin_token"].(string)}
	f.slug = v["slug"].(string)
	m.waitCaughtUp(f.c)
	if p := getPage(t, f.c, "/clusters/"+f.slug); p.status != 200 || strings.Contains(p.body, "boards-section") {
		t.Fatalf("boards off: the page has a boards section (%d):\n%s", p.status, p.body)
	}
	mustCall(t, f.b, 200, "PATCH", f.cl.path(""), `{"boards_enabled": true}`, "x-cluster-token", f.cl.admin)
	testkit.Eventually(t, 5*time.Second, func() bool {
		p := getPage(t, f.c, "/clusters/"+f.slug).body
		return strings.Contains(p, `<p id="boards-empty" class="empty">No board yet.</p>`) && strings.Contains(p, `<p class="map-empty">`)
	}, "boards on, none made: the page never said so")

	f.addBoard("market", "buysell", xssAbout, map[string]any{"where": map[string]any{"lat": 48.8566, "lon": 2.3522, "label": "Paris"}})
	f.addBoard("global", "generic", "", map[string]any{"where": "none"})
	f.addBoard("adults", "generic", "Grown-ups only.", map[string]any{"entry": map[string]any{"age_min": 18}})
	f.post("bike", "market", "", map[string]any{"title": xssPostTitle, "body": strings.Repeat("é", 300), "ttl": "7d",
		"props": map[string]any{"where": map[string]any{"lat": 48.86, "lon": 2.34, "label": xssLabel}, "lang": "fr"}})
	f.post("lamp", "market", "", map[string]any{"title": "Lamp", "body": "Brass.", "ttl": "forever"})
	f.post("remote", "market", "", map[string]any{"title": "Remote job", "ttl": "30d", "props": map[string]any{"where": "none"}})
	f.post("ama", "global", "", map[string]any{"title": "Ask me anything", "ttl": "24h"})
	f.post("tokyo", "global", "", map[string]any{"title": "Tokyo meetup", "ttl": "7d",
		"props": map[string]any{"where": map[string]any{"lat": 35.6762, "lon": 139.6503, "label": "Tokyo"}, "lang": "ja"}})
	f.post("adult", "adults", "&adult=1", map[string]any{"title": "Adult only title", "ttl": "7d",
		"props": map[string]any{"where": map[string]any{"lat": 51.5, "lon": -0.12, "label": "London"}}})
	for _, id := range f.posts {
		for _, n := range []*Node{f.c, m.boot} {
			waitStatus(t, n, 200, f.cl.path("/boards/"+f.board[id]+"/posts/"+id+"?adult=1"))
		}
	}
	return f
}

// addBoard creates a board through b.
func (f *boardPageFixture) addBoard(slug, kind, about string, props map[string]any) {
	b, _ := json.Marshal(map[string]any{"slug": slug, "name": strings.ToUpper(slug[:1]) + slug[1:], "kind": kind, "about": about, "props": props})
	mustCall(f.m.t, f.b, 201, "POST", f.cl.path("/boards"), string(b), "x-cluster-token", f.cl.admin)
}

// post creates post name on board through b, query added to its query.
func (f *boardPageFixture) post(name, board, query string, post map[string]any) {
	b, _ := json.Marshal(post)
	v := mustCall(f.m.t, f.b, 201, "POST", f.cl.path("/boards/"+board+"/posts?agent=alice"+query), string(b))
	id := v["post"].(map[string]any)["id"].(string)
	f.posts[name], f.board[id] = id, board
}

// ids are the ids of the named posts, sorted.
func (f *boardPageFixture) ids(names ...string) []string {
	var ids []string
	for _, n := range names {
		ids = append(ids, f.posts[n])
	}
	slices.Sort(ids)
	return ids
}

// pageMarker is a marker of a page's map: its position, the posts it
// stands for and its label.
type pageMarker struct {
	x, y  float64
	posts []string
	label string
}

var markerRE = regexp.MustCompile(`<a class="marker( group)?" href="#place-(\d+)" data-place="(\d+)" data-posts="([^"]+)" data-count="(\d+)" aria-label="([^"]*)"><title>([^<]*)</title><circle cx="([^"]+)" cy="([^"]+)" r="(\d+)"></circle>`)

// pageMarkers are the markers of a page's map by post (a marker of
// posts close together stands for each of them).
func pageMarkers(t *testing.T, body string) map[string]pageMarker {
	t.Helper()
	at := map[string]pageMarker{}
	for _, m := range markerRE.FindAllStringSubmatch(body, -1) {
		x, errX := strconv.ParseFloat(m[8], 64)
		y, errY := strconv.ParseFloat(m[9], 64)
		posts := strings.Fields(m[4])
		if errX != nil || errY != nil || x < -20 || x > 660 || y < -20 || y > 340 || m[2] != m[3] || m[5] != strconv.Itoa(len(posts)) || m[6] != m[7] {
			t.Fatalf("marker %q: not a marker of the 640×320 map", m[0])
		}
		if !strings.Contains(body, `<li class="place" id="place-`+m[2]+`"`) {
			t.Fatalf("marker %s links to no place", m[2])
		}
		for _, id := range posts {
			at[id] = pageMarker{x, y, posts, html.UnescapeString(m[6])}
		}
	}
	if n := strings.Count(body, `<circle`); n != len(markerRE.FindAllString(body, -1)) {
		t.Fatalf("%d circles, %d markers read:\n%s", n, len(at), body)
	}
	return at
}

// visibleText is the text of an HTML page: its tags (and their
// attributes) removed.
func visibleText(body string) string {
	return html.UnescapeString(regexp.MustCompile(`<[^>]*>`).ReplaceAllString(body, " "))
}

// TestClusterBoardsPageHTTP: a public cluster's page over plain HTTP on
// a node that did not make the boards: each board with its live posts
// (title, excerpt, label, lang, ttl and expiry), every text escaped; the
// age-gated board listed without its posts; a map with one marker per
// post that has a location, titled with its label and title, none for a
// post without one; no coordinate in what a person reads; no section
// once boards are off.
func TestClusterBoardsPageHTTP(t *testing.T) {
	t.Parallel()
	f := newBoardPageFixture(t)
	p := getPage(t, f.c, "/clusters/"+f.slug)
	checkHTML(t, f.c, p, 200, site.ScriptCSP)
	checkEscaped(t, p.body, xssPostTitle, xssLabel, xssAbout)
	for _, want := range []string{
		`id="boards-section"`, `data-board="market"`, `data-board="global"`, `data-board="adults" data-gated="1"`,
		`<span class="kind">buysell</span>`, "Age-restricted", "Grown-ups only.",
		strings.Repeat("é", 280) + "…", `<span class="lang">fr</span>`, `<span class="lang">ja</span>`, `<span class="where">Paris</span>`,
		`data-post="` + f.posts["bike"] + `" lang="fr">`, `data-post="` + f.posts["tokyo"] + `" lang="ja">`,
		`<span class="ttl">ttl forever</span><span class="expires">never expires</span>`, `<span class="ttl">ttl 7d</span><span class="expires">expires <time datetime="`,
	} {
		if !strings.Contains(p.body, want) {
			t.Fatalf("the page lacks %q:\n%s", want, p.body)
		}
	}
	if strings.Contains(p.body, strings.Repeat("é", 281)) {
		t.Fatal("the page shows more than 280 characters of a body")
	}
	for _, name := range []string{"bike", "lamp", "remote", "ama", "tokyo"} {
		if !strings.Contains(p.body, `<li class="post" id="post-`+f.posts[name]+`" data-post="`+f.posts[name]+`"`) {
			t.Fatalf("the page lacks post %s:\n%s", name, p.body)
		}
	}
	if strings.Contains(p.body, f.posts["adult"]) || strings.Contains(p.body, "Adult only title") || strings.Contains(p.body, "London") {
		t.Fatalf("the page shows the age-gated board's post:\n%s", p.body)
	}

	// bike and lamp, 0.015° apart in Paris, are one marker of two;
	// Tokyo is east of them.
	at := pageMarkers(t, p.body)
	if got, want := slices.Sorted(maps.Keys(at)), f.ids("bike", "lamp", "tokyo"); !slices.Equal(got, want) {
		t.Fatalf("markers of %v, want bike, lamp and tokyo %v", got, want)
	}
	bike, lamp, tokyo := at[f.posts["bike"]], at[f.posts["lamp"]], at[f.posts["tokyo"]]
	if len(bike.posts) != 2 || !slices.Contains(bike.posts, f.posts["lamp"]) || !slices.Contains([]string{xssLabel + ", Paris: 2 posts", "Paris, " + xssLabel + ": 2 posts"}, bike.label) || lamp.x != bike.x {
		t.Fatalf("the Paris marker: bike %+v, lamp %+v", bike, lamp)
	}
	if tokyo.label != "Tokyo: Tokyo meetup" || len(tokyo.posts) != 1 || !(tokyo.x > bike.x+300 && tokyo.y > bike.y) {
		t.Fatalf("markers misplaced: Paris %+v, Tokyo %+v", bike, tokyo)
	}
	text := visibleText(p.body)
	for _, coord := range []string{"48.86", "2.34", "35.67", "139.65", "48.85"} {
		if strings.Contains(text, coord) {
			t.Fatalf("the page shows the coordinate %s to its reader:\n%s", coord, text)
		}
	}

	mustCall(t, f.b, 200, "PATCH", f.cl.path(""), `{"boards_enabled": false}`, "x-cluster-token", f.cl.admin)
	testkit.Eventually(t, 5*time.Second, func() bool {
		return !strings.Contains(getPage(t, f.c, "/clusters/"+f.slug).body, "boards-section")
	}, "the page still shows the boards once they are off")

}
