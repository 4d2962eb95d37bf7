package wall

import (
	"embed"
	"html/template"
	"io/fs"
	"net/http"
	"strings"

	"github.com/agentmesh/mesh/internal/httpx"
)

// The cluster pages: GET /clusters lists the public clusters, GET
// /clusters/{id} (id or slug) shows one with its live wall. They are HTML
// built from the embedded templates (web/*.html), with the script and the
// style sheet served from the node itself (web/static, at /assets/wall/):
// the Content-Security-Policy lets a page load nothing else and run no
// inline script. A private or unknown cluster is the same 404 page.
//
// The page's wall is read-only: its script connects with spectate=1, as
// a ghost that is neither announced nor counted and whose frames are
// refused (handlers.go).

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

// PageRoutes adds the cluster pages and their static files to mux.
func (s *Service) PageRoutes(mux httpx.Router) {
	mux.Handle("GET /clusters", http.HandlerFunc(s.listPage))
	mux.Handle("GET /clusters/{id}", http.HandlerFunc(s.clusterPage))
	mux.Handle("GET /assets/wall/{file}", http.HandlerFunc(serveStatic))
}

// wantsJSON reports whether r asks for JSON rather than a page.
func wantsJSON(r *http.Request) bool {
	accept := r.Header.Get("Accept")
	return strings.Contains(accept, "application/json") && !strings.Contains(accept, "text/html")
}

// listedCluster is a row of GET /clusters. Online is nil when this node
// serves no socket of the cluster, so knows no count without asking the
// other nodes (the cluster's own page asks them).
type listedCluster struct {
	clusterView
	Online *int
}

type listPage struct {
	Clusters []listedCluster
	More     bool // over maxListed: the rest are in GET /v1/clusters
}

func (s *Service) listPage(w http.ResponseWriter, r *http.Request) {
	w.Header().Add("Vary", "Accept")
	if wantsJSON(r) {
		httpx.Handle(s.log, s.list).ServeHTTP(w, r)
		return
	}
	var p listPage
	err := s.cfg.Catalog.Public(func(cl *Cluster) bool {
		if len(p.Clusters) == maxListed {
			p.More = true
			return false
		}
		row := listedCluster{clusterView: s.view(r, cl)}
		if room := s.room(cl.ID); room != nil {
			n := len(room.members())
			row.Online = &n
		}
		p.Clusters = append(p.Clusters, row)
		return true
	})
	if err != nil {
		s.errorPage(w, r, err)
		return
	}
	s.render(w, http.StatusOK, listTemplate, p)
}

// clusterPageData is the page of one cluster.
type clusterPageData struct {
	clusterView
	Online int
	Boards *boardsSection // nil when boards are off
}

func (s *Service) clusterPage(w http.ResponseWriter, r *http.Request) {
	w.Header().Add("Vary", "Accept")
	if wantsJSON(r) {
		httpx.Handle(s.log, s.get).ServeHTTP(w, r)
		return
	}
	cl, err := s.cluster(r.Context(), r.PathValue("id"), true)
	if err != nil {
		s.errorPage(w, r, err)
		return
	}
	boards, err := s.pageBoardsOf(cl)
	if err != nil {
		s.errorPage(w, r, err)
		return
	}
	s.render(w, http.StatusOK, clusterTemplate, clusterPageData{clusterView: s.view(r, cl), Online: len(s.online(r.Context(), cl, nil)), Boards: boards})
}

// errorPage answers err as a page: its status and detail when it is an
// *httpx.Error (a private cluster's is the unknown one's, 404), else 500.
func (s *Service) errorPage(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil {
		return // the client went away: nobody reads the page
	}
	e, ok := httpx.AsError(err)
	if !ok {
		s.log.Error("page failed", "path", r.URL.Path, "err", err)
	}
	s.render(w, e.Status, errorTemplate, e)
}

// render writes template t with data as a page with status.
func (s *Service) render(w http.ResponseWriter, status int, t *template.Template, data any) {
	httpx.RenderPage(s.log, w, status, pageCSP, t, "layout", data)
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
