// Package site is what every HTML page of a node shares: the layout (the
// same header, with home, agents, clusters and search, and a footer naming
// the node), the one style sheet and icon, the Content-Security-Policies,
// the template helpers, and the front door (GET /: the home page for
// browsers, an index of the API for JSON clients). The pages themselves
// live with what they show: registryapi (agents), wall/pages (clusters).
//
// A page is a template set parsed with the layout (Site.Templates): it
// defines "title" and "main", and may define "head" and "scripts". The
// layout reads the node through the template function "site", bound to
// the Site that parsed it, so that several nodes in one process each name
// themselves.
//
// It imports no package of the project but internal/httpx, so that
// registryapi and wall/pages, which must not import each other, both
// build on it.
package site

import (
	"embed"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/agentmesh/mesh/internal/httpx"
)

//go:embed web
var webFS embed.FS

// The Content-Security-Policies of the pages. CSP: no script at all, the
// node's own style sheet and images, forms to the node only (the search
// forms; they need no script). ScriptCSP adds the node's own scripts and
// sockets to the node (a cluster's live wall). Nothing inline, no frames.
const (
	CSP = "default-src 'none'; style-src 'self'; img-src 'self'; base-uri 'none'; " +
		"form-action 'self'; frame-ancestors 'none'"
	ScriptCSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; " +
		"base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)

// PeerCSP is ScriptCSP for a page that joins a cluster as a libp2p peer:
// it may also connect to origins, the WebTransport endpoints
// (https://host:port) of the nodes it dials by name. WebRTC-direct, by
// which it dials the others, is no connection a policy governs.
func PeerCSP(origins []string) string {
	if len(origins) == 0 {
		return ScriptCSP
	}
	return strings.Replace(ScriptCSP, "connect-src 'self'", "connect-src 'self' "+strings.Join(origins, " "), 1)
}

// Info names the node in every page's footer.
type Info struct {
	// Node is the node's name as shown, e.g. a shortened peer id.
	Node string
	// Role is "bootstrap" or "node".
	Role    string
	Version string
}

// Site renders one node's pages.
type Site struct {
	info    Info
	log     *slog.Logger
	errPage *template.Template
}

// New returns the site of the node info names; log may be nil.
func New(info Info, log *slog.Logger) *Site {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Site{info: info, log: log}
	s.errPage = s.Templates(webFS, "web/error.html")
	return s
}

// errorData is what web/error.html reads.
type errorData struct {
	ID, Title, Detail string
	Status            int
}

// Error answers err as an error page: its status and detail when it is
// an *httpx.Error, else a 500 (logged). notFound, when not empty, is the
// title of a 404 (whose main element is #not-found).
func (s *Site) Error(w http.ResponseWriter, r *http.Request, err error, notFound string) {
	if r.Context().Err() != nil {
		return // the client went away: nobody reads the page
	}
	e, ok := httpx.AsError(err)
	if !ok {
		s.log.Error("page failed", "path", r.URL.Path, "err", err)
	}
	d := errorData{ID: "error", Title: http.StatusText(e.Status), Detail: e.Detail, Status: e.Status}
	if e.Status == http.StatusNotFound && notFound != "" {
		d.ID, d.Title = "not-found", notFound
	}
	s.Render(w, e.Status, CSP, s.errPage, d)
}

// Info is the node the site names.
func (s *Site) Info() Info { return s.info }

// Templates parses the layout and files of fsys into one template set,
// with the site's helpers bound to s. It panics on a template that does
// not parse: templates are embedded, so that is a bug.
func (s *Site) Templates(fsys fs.FS, files ...string) *template.Template {
	t := template.Must(template.New("site").Funcs(s.funcs()).ParseFS(webFS, "web/layout.html"))
	return template.Must(t.ParseFS(fsys, files...))
}

// Render sends template set t (made by Templates) executed with data as a
// page with status under policy csp.
func (s *Site) Render(w http.ResponseWriter, status int, csp string, t *template.Template, data any) {
	httpx.RenderPage(s.log, w, status, csp, t, "layout", data)
}

// TimeFormat is how every page shows a time: one clock, UTC, named.
const TimeFormat = "2006-01-02 15:04 UTC"

func (s *Site) funcs() template.FuncMap {
	return template.FuncMap{
		"site":      func() Info { return s.info },
		"breakable": Breakable,
		"utc":       func(t time.Time) string { return t.UTC().Format(TimeFormat) },
		"rfc3339":   func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	}
}

// Breakable is s as HTML that a narrow screen may wrap after each of its
// separators (a URL's / . ? & = - _ : # @ and +), and nowhere else unless
// a part alone is wider than the line: escaped, with a <wbr> after each
// separator.
func Breakable(s string) template.HTML {
	var b strings.Builder
	start := 0
	for i := 0; i < len(s); i++ {
		if strings.IndexByte("/.?&=-_:#@+", s[i]) >= 0 {
			b.WriteString(template.HTMLEscapeString(s[start : i+1]))
			b.WriteString("<wbr>")
			start = i + 1
		}
	}
	b.WriteString(template.HTMLEscapeString(s[start:]))
	return template.HTML(b.String())
}

// Routes adds the site's style sheet and icon to mux, and the front door
// when home is not nil.
func (s *Site) Routes(mux httpx.Router, home *Home) {
	mux.Handle("GET /assets/site.css", asset("web/site.css", "text/css; charset=utf-8"))
	mux.Handle("GET /assets/favicon.svg", asset("web/favicon.svg", "image/svg+xml"))
	if home != nil {
		mux.Handle("GET /{$}", http.HandlerFunc(home.serve))
	}
}

// assetMaxAge is how long a browser keeps the style sheet and icon
// without asking again.
const assetMaxAge = "public, max-age=3600"

func asset(name, contentType string) http.Handler {
	b, err := webFS.ReadFile(name)
	if err != nil {
		panic(err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		h := w.Header()
		h.Set("Content-Type", contentType)
		h.Set("Cache-Control", assetMaxAge)
		h.Set("X-Content-Type-Options", "nosniff")
		w.Write(b)
	})
}
