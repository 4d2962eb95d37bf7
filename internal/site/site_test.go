package site

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentmesh/mesh/internal/httpx"
)

// TestBreakable: a URL may wrap after each separator, and its text is
// escaped.
func TestBreakable(t *testing.T) {
	got := string(Breakable(`https://a.example/x?q=<b>&r=1`))
	want := `https:<wbr>/<wbr>/<wbr>a.<wbr>example/<wbr>x?<wbr>q=<wbr>&lt;b&gt;&amp;<wbr>r=<wbr>1`
	if got != want {
		t.Fatalf("Breakable: %s, want %s", got, want)
	}
}

// TestErrorPage: an error is a page in the layout naming the node, with
// its status; a 404 takes the title the caller gives it.
func TestErrorPage(t *testing.T) {
	s := New(Info{Node: "12D3…node", Role: "bootstrap", Version: "v9"}, nil)
	for _, c := range []struct {
		err    error
		status int
		want   []string
	}{
		{httpx.ErrNotFound.With("no agent nobody"), 404, []string{`<section id="not-found" data-status="404">`, "<h1>No such thing</h1>", "no agent nobody"}},
		{httpx.ErrInvalid.With("bad"), 400, []string{`<section id="error" data-status="400">`, "<h1>Bad Request</h1>"}},
	} {
		w := httptest.NewRecorder()
		s.Error(w, httptest.NewRequest("GET", "/x", nil), c.err, "No such thing")
		body := w.Body.String()
		if w.Code != c.status || w.Header().Get("Content-Security-Policy") != CSP {
			t.Fatalf("%v: %d, CSP %q", c.err, w.Code, w.Header().Get("Content-Security-Policy"))
		}
		for _, want := range append(c.want, `<span class="node-name">12D3…node</span> (bootstrap), version v9`, `<a href="/agents">Agents</a>`) {
			if !strings.Contains(body, want) {
				t.Fatalf("%v: the page lacks %q:\n%s", c.err, want, body)
			}
		}
	}
	w := httptest.NewRecorder()
	s.Error(w, httptest.NewRequest("GET", "/x", nil), http.ErrAbortHandler, "")
	if w.Code != 500 || strings.Contains(w.Body.String(), "abort") {
		t.Fatalf("an internal error: %d %s", w.Code, w.Body)
	}
}
