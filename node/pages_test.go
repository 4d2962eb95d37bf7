package node

import (
	"fmt"
	"html"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/mesh/internal/site"
	"github.com/agentmesh/mesh/internal/testkit"
	"github.com/agentmesh/mesh/wall"
)

// Cluster metadata that would run script if a page put it in as HTML.
const (
	xssName  = `<script>document.title="pwned"</script>Plaza & "co"`
	xssTopic = `#<img src=x onerror=alert(1)>`
	xssDesc  = `</p><script>alert('d')</script><b>bold</b> it's "fine"`
	// xssHandle and xssText are a message's sender and text.
	xssHandle = `<img/src=x/onerror=alert(2)>`
	xssText   = `<script>alert("m")</script><i>hi</i>`
	// xssPostTitle, xssLabel and xssAbout are a post's title and label
	// and a board's charter.
	xssPostTitle = `<script>document.title="post"</script>Bike & "bell"`
	xssLabel     = `<img src=x onerror=alert(3)>Quai & "Seine"`
	xssAbout     = `</p><script>alert('about')</script><b>charter</b>`
)

// pageFixture is a mesh of a bootstrap and a node, with a public cluster
// whose metadata is xss* and a private one.
type pageFixture struct {
	m                    *mesh
	b                    *Node
	id, slug, private    string
	privateID, unknownID string
}

func newPageFixture(t *testing.T) *pageFixture {
	t.Helper()
	m := newMesh(t)
	f := &pageFixture{m: m, b: m.join(), unknownID: "c_" + strings.Repeat("a", 24)}
	body := fmt.Sprintf(`{"visibility":"public","name":%q,"topic":%q,"description":%q}`, xssName, xssTopic, xssDesc)
	pub := createCluster(t, m.boot, body)
	f.id, f.slug = pub["cluster_id"].(string), pub["slug"].(string)
	f.privateID = createCluster(t, m.boot, `{"name":"secret room","topic":"#hidden"}`)["cluster_id"].(string)
	m.waitCaughtUp(f.b)
	return f
}

// page is an answer of the bridge: status, headers and body.
type page struct {
	status int
	header http.Header
	body   string
}

func getPage(t *testing.T, n *Node, path string, hdr ...string) page {
	t.Helper()
	resp, b := send(t, n, "GET", path, "", hdr...)
	return page{resp.StatusCode, resp.Header, string(b)}
}

// checkHTML fails t unless p, a page of node n, is an HTML page with
// status, under the pages' policy (csp: site.CSP, no script, or
// site.ScriptCSP), whose scripts all come from files, and which names no
// address but n's own.
func checkHTML(t *testing.T, n *Node, p page, status int, csp string) {
	t.Helper()
	if p.status != status || p.header.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Fatalf("status %d, Content-Type %q, want %d HTML:\n%s", p.status, p.header.Get("Content-Type"), status, p.body)
	}
	if got := p.header.Get("Content-Security-Policy"); got != csp {
		t.Fatalf("Content-Security-Policy %q, want %q", got, csp)
	}
	for _, tag := range regexp.MustCompile(`<script[^>]*>`).FindAllString(p.body, -1) {
		if !strings.Contains(tag, ` src="/assets/wall/`) {
			t.Fatalf("inline or outside script %s in:\n%s", tag, p.body)
		}
	}
	own := strings.TrimPrefix(n.URL(), "http://")
	body := strings.NewReplacer("http://"+own, "", "ws://"+own, "", "http://<wbr>", "", "ws://<wbr>", "").Replace(p.body)
	body = strings.ReplaceAll(body, own, "")
	if strings.Contains(body, "http://") || strings.Contains(body, "https://") || strings.Contains(body, "ws://") {
		t.Fatalf("the page names an outside address:\n%s", p.body)
	}
}

// checkEscaped fails t unless body holds each of texts escaped, and none
// as HTML.
func checkEscaped(t *testing.T, body string, texts ...string) {
	t.Helper()
	for _, s := range texts {
		if !strings.Contains(body, html.EscapeString(s)) {
			t.Fatalf("the page lacks %q escaped:\n%s", s, body)
		}
		if strings.Contains(body, s) {
			t.Fatalf("the page holds %q as HTML:\n%s", s, body)
		}
	}
}

// memberCount is the count of online members a cluster page shows.
func memberCount(body string) string {
	m := regexp.MustCompile(`<span id="member-count">([^<]*)</span>`).FindStringSubmatch(body)
	if m == nil {
		return ""
	}
	return m[1]
}

// TestClusterPagesHTTP: the pages over plain HTTP, on a node that did not
// create the cluster: the list and the page show the public cluster, its
// metadata escaped, under a policy that runs only the node's own script;
// the page counts the members on other nodes; JSON answers whoever asks
// for it; a private cluster is the same 404 as an unknown one.
func TestClusterPagesHTTP(t *testing.T) {
	t.Parallel()
	f := newPageFixture(t)
	list := getPage(t, f.b, "/clusters")
	checkHTML(t, f.b, list, 200, site.CSP)
	checkEscaped(t, list.body, xssName, xssTopic, xssDesc)
	if !strings.Contains(list.body, `href="/clusters/`+f.slug+`"`) || !strings.Contains(list.body, `href="/clusters/lobby"`) {
		t.Fatalf("the list lacks a link to %s or to the lobby:\n%s", f.slug, list.body)
	}
	if strings.Contains(list.body, f.privateID) || strings.Contains(list.body, "secret room") {
		t.Fatalf("the list shows the private cluster:\n%s", list.body)
	}
	for _, key := range []string{f.slug, f.id} {
		p := getPage(t, f.b, "/clusters/"+key)
		checkHTML(t, f.b, p, 200, site.ScriptCSP)
		checkEscaped(t, p.body, xssName, xssTopic, xssDesc)
		if !strings.Contains(p.body, `data-cluster="`+f.id+`"`) || memberCount(p.body) != "0" {
			t.Fatalf("page of %s: no cluster id, or a count other than 0:\n%s", key, p.body)
		}
	}

	// A member on the bootstrap counts on b's page, which b learns from
	// the bootstrap; the list on b shows no count for a cluster b does
	// not serve.
	enterWall(t, f.m.boot, f.id, q("agent", "alice"))
	testkit.Eventually(t, 10*time.Second, func() bool {
		return memberCount(getPage(t, f.b, "/clusters/"+f.slug).body) == "1"
	}, "b's page never counted the member on the bootstrap")
	if !strings.Contains(getPage(t, f.b, "/clusters").body, "online count on its page") {
		t.Fatal("b's list shows a count for a cluster it does not serve")
	}
	if !strings.Contains(getPage(t, f.m.boot, "/clusters").body, `<span class="online">1</span> online`) {
		t.Fatal("the bootstrap's list does not count the member it serves")
	}

	st, v := call(t, f.b, "GET", "/clusters/"+f.slug, "", "Accept", "application/json")
	if c, _ := v["cluster"].(map[string]any); st != 200 || c["id"] != f.id || c["name"] != xssName || c["online"] != 1.0 {
		t.Fatalf("JSON page: %d %v", st, v)
	}
	st, v = call(t, f.b, "GET", "/clusters", "", "Accept", "application/json")
	if st != 200 || v["count"] != 2.0 {
		t.Fatalf("JSON list: %d %v (want the lobby and the public cluster)", st, v)
	}

	private := getPage(t, f.b, "/clusters/"+f.privateID)
	checkHTML(t, f.b, private, 404, site.CSP)
	if unknown := getPage(t, f.b, "/clusters/"+f.unknownID); unknown.status != 404 || unknown.body != private.body {
		t.Fatalf("a private cluster's page differs from an unknown one's:\n%s\n---\n%s", private.body, unknown.body)
	}
	if strings.Contains(private.body, "secret") || strings.Contains(private.body, f.privateID) {
		t.Fatalf("the 404 page tells of the private cluster:\n%s", private.body)
	}
	st, v = call(t, f.b, "GET", "/clusters/"+f.privateID, "", "Accept", "application/json")
	if st != 404 || v["code"] != "cluster_not_found" {
		t.Fatalf("JSON page of a private cluster: %d %v", st, v)
	}
}

// TestClusterPageAssets: the pages' files are served from the node, and
// nothing else is.
func TestClusterPageAssets(t *testing.T) {
	t.Parallel()
	n := startNode(t, testConfig(t, t.TempDir()))
	for file, ctype := range map[string]string{
		"wall/cluster.js": "text/javascript; charset=utf-8", "wall/boards.js": "text/javascript; charset=utf-8",
		"wall/land.svg": "image/svg+xml", "site.css": "text/css; charset=utf-8", "favicon.svg": "image/svg+xml",
	} {
		p := getPage(t, n, "/assets/"+file)
		if p.status != 200 || p.header.Get("Content-Type") != ctype || p.header.Get("X-Content-Type-Options") != "nosniff" {
			t.Fatalf("%s: %d %v", file, p.status, p.header)
		}
	}
	for _, path := range []string{"/assets/wall/nope.js", "/assets/wall/..%2fpages.go", "/assets/wall/"} {
		if st, v := call(t, n, "GET", path, ""); st != 404 {
			t.Fatalf("%s: %d %v", path, st, v)
		}
	}
}

// TestWallEventsSpectator: spectate=events, the socket a cluster's page
// keeps once its visitor joined as a browser peer, on a node of a mesh of
// three: it is told of the cluster's board events and of a rename made
// through the other nodes, and of no message and no presence (the page's
// peer hears those on the wire).
func TestWallEventsSpectator(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	b, c := m.join(), m.join()
	cl := newBoardCluster(t, b, `{"visibility":"public","name":"Quay"}`)
	m.waitCaughtUp(m.boot)
	ev := enterWall(t, m.boot, cl.id, q("spectate", "events"))
	alice := enterWall(t, b, cl.id, q("agent", "alice"))
	bob := enterWall(t, m.boot, cl.id, q("agent", "bob"))
	alice.say("hello bob", bob, 1) // the events socket is no member: not counted
	mustCall(t, c, 201, "POST", cl.path("/boards"), `{"slug":"market","kind":"buysell"}`, "x-cluster-token", cl.admin)
	if f := nextEvent(ev); f["kind"] != "board" || f["event"] != "board_created" || f["slug"] != "market" {
		t.Fatalf("the events socket got %v, want market's board_created", f)
	}
	patchCluster(t, c, cl.id, cl.admin, `{"name":"Old Quay"}`)
	if f := nextEvent(ev); f["kind"] != wall.KindClusterUpdated || f["name"] != "Old Quay" || f["slug"] != "old-quay" {
		t.Fatalf("the events socket got %v, want the rename", f)
	}
	ev.send("let me in")
	if e := nextEvent(ev); e["kind"] != "error" || e["code"] != "read_only" {
		t.Fatalf("the events socket's frame got %v, want a read_only error", e)
	}
}

// nextEvent is c's next frame, of any kind, within 10 s.
func nextEvent(c *wsClient) map[string]any {
	c.t.Helper()
	select {
	case f, ok := <-c.frames:
		if !ok {
			c.t.Fatalf("socket closed (%v)", c.status)
		}
		return f
	case <-time.After(10 * time.Second):
		c.t.Fatal("no frame within 10s")
	}
	return nil
}

// TestWallSpectator: spectate=1, the page's connection, on a public
// cluster: the other node's members are not told of it and do not count
// it; it receives broadcasts and no direct message; what it sends is
// refused and reaches nobody. Bad spectate queries are refused before the
// upgrade.
func TestWallSpectator(t *testing.T) {
	t.Parallel()
	f := newPageFixture(t)
	alice := enterWall(t, f.b, f.id, q("agent", "alice"))
	spec := dialWall(t, f.m.boot, f.id, q("spectate", "1"))
	w := spec.next("welcome")
	if w["you"] != "spectator" || w["vis"] != "ghost" || fmt.Sprint(w["online"]) != "[alice]" {
		t.Fatalf("spectator's welcome: %v", w)
	}
	// bob joins after the spectator, on the same node: the first presence
	// alice hears of is bob's.
	bob := enterWall(t, f.m.boot, f.id, q("agent", "bob"))
	if p := alice.next("presence"); p["agent"] != "bob" {
		t.Fatalf("alice heard %v, want bob online (a spectator is never announced)", p)
	}
	_, v := call(t, f.b, "GET", "/v1/clusters/"+f.id, "")
	if c := v["cluster"].(map[string]any); c["online"] != 2.0 || fmt.Sprint(c["members"]) != "[alice bob]" {
		t.Fatalf("external view: %v (a spectator is not counted)", c)
	}
	alice.say("hello all", spec, 1) // delivered to bob; the spectator is not counted
	bob.next("message")

	spec.send("let me in")
	if e := spec.next("error"); e["code"] != "read_only" {
		t.Fatalf("the spectator's frame got %v, want a read_only error", e)
	}
	alice.send(map[string]any{"to": "spectator", "payload": "psst"})
	if a := alice.next("ack"); a["delivered"] != 0.0 {
		t.Fatalf("a direct message to the spectator's handle: %v, want none delivered", a)
	}
	bob.say("after", alice, 1)
	if m := spec.next("message"); m["payload"] != "after" {
		t.Fatalf("the spectator got %v, want the broadcast after (no direct message)", m)
	}

	for _, bad := range []struct{ query, why string }{
		{"spectate=yes", "spectate must be 1 or events"},
		{"spectate=1&vis=public", "vis must be ghost or absent"},
		{"spectate=1&token=ck_x", "leave token out"},
	} {
		st, v := call(t, f.b, "GET", "/v1/clusters/"+f.id+"/ws?"+bad.query, "")
		if st != 400 || v["code"] != "invalid_request" || !strings.Contains(fmt.Sprint(v["detail"]), bad.why) {
			t.Fatalf("%s: %d %v", bad.query, st, v)
		}
	}
	st, v := call(t, f.b, "GET", "/v1/clusters/"+f.privateID+"/ws?spectate=1", "")
	if st != 400 || !strings.Contains(fmt.Sprint(v["detail"]), "for public clusters") {
		t.Fatalf("spectate on a private cluster: %d %v", st, v)
	}
}
