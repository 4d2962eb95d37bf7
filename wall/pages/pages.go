// Package pages serves the public clusters' HTML pages: GET /clusters
// lists them, GET /clusters/{id} (id or slug) shows one with its live
// wall and boards. They are built from the embedded templates (web/*.html)
// with what the wall's exported API (wall.Service.PublicClusters,
// PublicPage) lets a stranger see; the script and the style sheet are
// served from the node itself (web/static, at /assets/wall/): the
// Content-Security-Policy lets a page load nothing else and run no inline
// script. A private or unknown cluster is the same 404 page.
//
// The page's wall is read-only: its script connects with spectate=1, as
// a ghost that is neither announced nor counted and whose frames the wall
// refuses.
package pages

import (
	"embed"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"

	"github.com/agentmesh/mesh/internal/httpx"
	"github.com/agentmesh/mesh/wall"
)

//go:embed web
var webFS embed.FS

// staticFS is web/static: the files the pages load.
var staticFS, _ = fs.Sub(webFS, "web/static")

// The page templates, each with the shared layout.
var (
	listTemplate    = pageTemplate("web/clusters.html")
	clusterTemplate = pageTemplate("web/cluster.html", "web/boards.html")
	errorTemplate   = pageTemplate("web/error.html")
)

func pageTemplate(files ...string) *template.Template {
	return template.Must(template.ParseFS(webFS, append([]string{"web/layout.html"}, files...)...))
}

// maxListed bounds the clusters GET /clusters shows; the rest are in
// GET /v1/clusters.
const maxListed = 200

// pageCSP is the pages' Content-Security-Policy: scripts, styles and
// sockets from this node only, nothing inline, no frames, no forms.
const pageCSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Pages serves the cluster pages.
type Pages struct {
	wall *wall.Service
	log  *slog.Logger
}

// New returns the pages of w's public clusters; log may be nil.
func New(w *wall.Service, log *slog.Logger) *Pages {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Pages{wall: w, log: log}
}

// Routes adds the cluster pages and their static files to mux.
func (p *Pages) Routes(mux httpx.Router) {
	mux.Handle("GET /clusters", http.HandlerFunc(p.listPage))
	mux.Handle("GET /clusters/{id}", http.HandlerFunc(p.clusterPage))
	mux.Handle("GET /assets/wall/{file}", http.HandlerFunc(serveStatic))
}

// wantsJSON reports whether r asks for JSON rather than a page.
func wantsJSON(r *http.Request) bool {
	accept := r.Header.Get("Accept")
	return strings.Contains(accept, "application/json") && !strings.Contains(accept, "text/html")
}

type listPage struct {
	Clusters []wall.PublicCluster
	More     bool // over maxListed: the rest are in GET /v1/clusters
}

func (p *Pages) listPage(w http.ResponseWriter, r *http.Request) {
	w.Header().Add("Vary", "Accept")
	if wantsJSON(r) {
		httpx.Handle(p.log, p.wall.ServeCatalog).ServeHTTP(w, r)
		return
	}
	var page listPage
	var err error
	page.Clusters, page.More, err = p.wall.PublicClusters(r, maxListed)
	if err != nil {
		p.errorPage(w, r, err)
		return
	}
	p.render(w, http.StatusOK, listTemplate, page)
}

// clusterPageData is the page of one cluster.
type clusterPageData struct {
	wall.PublicCluster
	Online int
	Boards *boardsSection // nil when boards are off
}

func (p *Pages) clusterPage(w http.ResponseWriter, r *http.Request) {
	w.Header().Add("Vary", "Accept")
	if wantsJSON(r) {
		httpx.Handle(p.log, p.wall.ServeCluster).ServeHTTP(w, r)
		return
	}
	cl, err := p.wall.PublicPage(r, r.PathValue("id"), wall.PageOptions{Members: true, Boards: pageBoards, Posts: pagePosts})
	if err != nil {
		p.errorPage(w, r, err)
		return
	}
	p.render(w, http.StatusOK, clusterTemplate, clusterPageData{PublicCluster: cl.PublicCluster, Online: len(cl.Members), Boards: boardsSectionOf(cl.Boards)})
}

// errorPage answers err as a page: its status and detail when it is an
// *httpx.Error (a private cluster's is the unknown one's, 404), else 500.
func (p *Pages) errorPage(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil {
		return // the client went away: nobody reads the page
	}
	e, ok := httpx.AsError(err)
	if !ok {
		p.log.Error("page failed", "path", r.URL.Path, "err", err)
	}
	p.render(w, e.Status, errorTemplate, e)
}

// render writes template t with data as a page with status.
func (p *Pages) render(w http.ResponseWriter, status int, t *template.Template, data any) {
	httpx.RenderPage(p.log, w, status, pageCSP, t, "layout", data)
}

// serveStatic serves a file of web/static, and nothing else (no directory
// listings).
func serveStatic(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("file")
	if st, err := fs.Stat(staticFS, name); err != nil || !st.Mode().IsRegular() {
		httpx.WriteError(nil, w, r, errNoAsset)
		return
	}
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "public, max-age=300")
	http.ServeFileFS(w, r, staticFS, name)
}

var errNoAsset = httpx.ErrNotFound.With("no such file")
