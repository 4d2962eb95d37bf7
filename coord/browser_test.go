package coord_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/agentmesh/mesh/internal/browsertest"
	"github.com/agentmesh/mesh/internal/testkit"
)

// TestMain runs up to 8 tests at once (each daemon mostly waits on its
// manual clock and loopback), and closes the browser the browser tests
// share at the end.
func TestMain(m *testing.M) {
	testkit.Waiting(8)
	os.Exit(browsertest.Main(m))
}

// attackPage is a page that tries, without the token, every way a page
// can send the daemon at %s a write: fetch no-cors (text/plain, the body
// JSON all the same), a JSON fetch (preflighted), a form with
// enctype="text/plain" whose field makes a JSON body, a form-urlencoded
// form, and the event socket. window.results says what each saw.
const attackPage = `<!doctype html><meta charset="utf-8"><title>attack</title>
<form id="plain" method="post" enctype="text/plain" target="f-plain"><input name='{"conv":"form","text":"pwn","x":"' value='"}'></form>
<form id="urlenc" method="post" target="f-urlenc"><input name="id" value="search"><input name="wall" value="archived"><input name="order" value="0"></form>
<script>
const D = %s;
window.results = {};
const note = (k, v) => { window.results[k] = v; };
const nocors = (k, path, body) => fetch(D + path, {method: "POST", mode: "no-cors", headers: {"Content-Type": "text/plain"}, body})
  .then(r => note(k, r.type), e => note(k, "error"));
nocors("nocors_dispatch", "/chat/dispatch", JSON.stringify({conv: "nocors", text: "pwn"}));
nocors("nocors_runs", "/runs", JSON.stringify({conv: "run", initiative: "auth"}));
nocors("nocors_reorder", "/initiative/reorder", JSON.stringify({id: "search", wall: "archived", order: 0}));
nocors("nocors_update", "/self-update", "");
fetch(D + "/chat/dispatch", {method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify({conv: "cors", text: "pwn"})})
  .then(r => r.json().then(b => note("cors_dispatch", r.status + " " + b.code)), e => note("cors_dispatch", "error"));
for (const [id, path] of [["plain", "/chat/dispatch"], ["urlenc", "/initiative/reorder"]]) {
  const f = document.createElement("iframe");
  f.name = "f-" + id;
  document.body.append(f);
  f.onload = () => note("form_" + id, "loaded");
  const form = document.getElementById(id);
  form.action = D + path;
  form.submit();
}
const ws = new WebSocket(D.replace("http", "ws") + "/events");
ws.onopen = () => { note("ws", "open"); ws.close(); };
ws.onclose = () => { if (!window.results.ws) note("ws", "closed"); };
</script>`

// TestPagesCannotDriveTheDaemon: in Chromium, a page of another origin
// (evil.localhost, which the browser resolves to loopback itself) and a
// page of an allowed origin without the token (127.0.0.1 on another
// port) try every way to make the daemon act: it refuses them all (its
// debug log says why), the agent never runs, no run starts, the site is
// not read and no file of the project changes.
func TestPagesCannotDriveTheDaemon(t *testing.T) {
	browsertest.Need(t) // not parallel: the tests share one browser
	tab := browsertest.Tab(t, 60*time.Second)
	g := startGuarded(t, nil)
	before := files(t, g.dir)
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, _ := json.Marshal(g.url)
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, attackPage, d)
	}))
	defer page.Close()
	port := page.URL[strings.LastIndex(page.URL, ":")+1:]
	for _, tc := range []struct {
		origin      string
		cors, ws    string
		refusedWith string
	}{
		{"http://evil.localhost:" + port, "error", "closed", "origin_not_allowed"},
		{"http://127.0.0.1:" + port, "403 token_required", "open", "token_required"},
	} {
		if err := chromedp.Do(tab, chromedp.Navigate(tc.origin+"/")); err != nil {
			t.Fatal(err)
		}
		browsertest.Until(t, tab, `Object.keys(window.results || {}).length === 8`, "every attempt of "+tc.origin)
		got, err := chromedp.Run(tab, chromedp.Evaluate[map[string]string](`window.results`))
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"nocors_dispatch": "opaque", "nocors_runs": "opaque", "nocors_reorder": "opaque", "nocors_update": "opaque",
			"cors_dispatch": tc.cors, "form_plain": "loaded", "form_urlenc": "loaded", "ws": tc.ws}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: the page saw %v, want %v", tc.origin, got, want)
		}
		g.untouched(before)
		if !g.refused(tc.origin, tc.refusedWith) {
			t.Fatalf("%s: no %s refusal in the debug log: the requests did not reach the daemon", tc.origin, tc.refusedWith)
		}
	}
}

// refused reports whether the debug log holds a refusal with code of a
// request from origin.
func (g *guarded) refused(origin, code string) bool {
	var tail struct {
		Events []struct{ Data map[string]any }
	}
	g.get("/debug/tail?tags=guard", &tail)
	for _, ev := range tail.Events {
		if ev.Data["origin"] == origin && ev.Data["code"] == code {
			return true
		}
	}
	return false
}
