// Package pages serves the public clusters' HTML pages: GET /clusters
// lists them, GET /clusters/{id} (id or slug) shows one with its live
// wall and boards. They are built from the embedded templates (web/*.html)
// with what the wall's exported API (wall.Service.PublicClusters,
// PublicPage) lets a stranger see; the script and the style sheet are
// served from the node itself (web/static, at /assets/wall/, with the
// land outline of the map): the Content-Security-Policy lets a page load
// nothing else and run no inline script; the list runs none at all. A
// private or unknown cluster is the same 404 page.
//
// Until its visitor joins, the page's wall is read-only: its script
// connects with spectate=1, as a ghost that is neither announced nor
// counted and whose frames the wall refuses. A visitor who joins makes the
// page a libp2p peer of the mesh (join.go; GET /join for private
// clusters), whose bundle (web/static/peer.js) is built from peer/.
package pages

import (
	"bytes"
	"compress/gzip"
	"embed"
	"html/template"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/agentmesh/mesh/internal/httpx"
	"github.com/agentmesh/mesh/internal/site"
	"github.com/agentmesh/mesh/wall"
)

//go:embed web
var webFS embed.FS

// staticFS is web/static: the files the pages load.
var staticFS, _ = fs.Sub(webFS, "web/static")

// maxListed bounds the clusters GET /clusters shows; the rest are in
// GET /v1/clusters.
const maxListed = 200

// wallMax is how many messages a cluster page keeps: the newest.
const wallMax = 100

// Pages serves the cluster pages.
type Pages struct {
	wall                           *wall.Service
	site                           *site.Site
	list, cluster, boards, private *template.Template
}

// New returns the pages of w's public clusters, rendered by s.
func New(w *wall.Service, s *site.Site) *Pages {
	return &Pages{wall: w, site: s,
		list:    s.Templates(webFS, "web/clusters.html"),
		cluster: s.Templates(webFS, "web/cluster.html", "web/boards.html", "web/wall.html"),
		boards:  s.Templates(webFS, "web/boards.html"),
		private: s.Templates(webFS, "web/wall.html", "web/private.html"),
	}
}

// Routes adds the cluster pages and their static files to mux.
func (p *Pages) Routes(mux httpx.Router) {
	mux.Handle("GET /clusters", http.HandlerFunc(p.listPage))
	mux.Handle("GET /clusters/{id}", http.HandlerFunc(p.clusterPage))
	mux.Handle("GET /clusters/{id}/boards", http.HandlerFunc(p.boardsPart))
	mux.Handle("GET /join", http.HandlerFunc(p.privatePage))
	mux.Handle("GET /assets/wall/{file}", http.HandlerFunc(serveStatic))
}

type listPage struct {
	Clusters []wall.PublicCluster
	More     bool // over maxListed: the rest are in GET /v1/clusters
}

func (p *Pages) listPage(w http.ResponseWriter, r *http.Request) {
	w.Header().Add("Vary", "Accept")
	if httpx.WantsJSON(r) {
		httpx.Handle(nil, p.wall.ServeCatalog).ServeHTTP(w, r)
		return
	}
	var page listPage
	var err error
	page.Clusters, page.More, err = p.wall.PublicClusters(r, maxListed)
	if err != nil {
		p.site.Error(w, r, err, "")
		return
	}
	p.site.Render(w, http.StatusOK, site.CSP, p.list, page)
}

// Busiest returns up to n public clusters for the home page: of the first
// maxListed of the catalog, those with the most members online that this
// node knows of first (it knows the counts of the clusters it serves),
// then in the catalog's order.
func (p *Pages) Busiest(r *http.Request, n int) ([]site.ClusterLink, error) {
	cls, _, err := p.wall.PublicClusters(r, maxListed)
	if err != nil {
		return nil, err
	}
	online := func(c wall.PublicCluster) int {
		if c.Online == nil {
			return -1
		}
		return *c.Online
	}
	slices.SortStableFunc(cls, func(a, b wall.PublicCluster) int { return online(b) - online(a) })
	out := make([]site.ClusterLink, 0, min(n, len(cls)))
	for _, c := range cls[:min(n, len(cls))] {
		out = append(out, site.ClusterLink{Slug: c.Slug, Name: c.Name, Topic: c.Topic, Online: c.Online})
	}
	return out, nil
}

// clusterPageData is the page of one cluster.
type clusterPageData struct {
	wall.PublicCluster
	Online  int
	Members []string
	WallMax int
	Boards  *boardsSection // nil when boards are off
	Peer    peerData
}

func (p *Pages) clusterPage(w http.ResponseWriter, r *http.Request) {
	w.Header().Add("Vary", "Accept")
	if httpx.WantsJSON(r) {
		httpx.Handle(nil, p.wall.ServeCluster).ServeHTTP(w, r)
		return
	}
	cl, err := p.wall.PublicPage(r, r.PathValue("id"), wall.PageOptions{Members: true, Boards: pageBoards, Posts: pagePosts})
	if err != nil {
		p.site.Error(w, r, err, "No such public cluster")
		return
	}
	if id := r.PathValue("id"); id != cl.ID && id != cl.Slug { // a renamed cluster's former slug
		http.Redirect(w, r, "/clusters/"+cl.Slug, http.StatusMovedPermanently)
		return
	}
	peer, csp := p.peer()
	p.site.Render(w, http.StatusOK, csp, p.cluster, clusterPageData{PublicCluster: cl.PublicCluster,
		Online: len(cl.Members), Members: cl.Members, WallMax: wallMax, Boards: boardsSectionOf(cl.Boards), Peer: peer})
}

// boardsPart serves a cluster's boards section alone (the map and the
// boards, no layout): what the page's script swaps in when a board frame
// says they changed, so that the node alone draws them.
func (p *Pages) boardsPart(w http.ResponseWriter, r *http.Request) {
	cl, err := p.wall.PublicPage(r, r.PathValue("id"), wall.PageOptions{Boards: pageBoards, Posts: pagePosts})
	if err != nil {
		httpx.WriteError(nil, w, r, err)
		return
	}
	sec := boardsSectionOf(cl.Boards)
	if sec == nil {
		httpx.WriteError(nil, w, r, errNoBoards)
		return
	}
	httpx.RenderPage(nil, w, http.StatusOK, site.CSP, p.boards, "boards", sec)
}

var errNoBoards = httpx.ErrNotFound.With("this cluster has no boards")

// serveStatic serves a file of web/static, and nothing else (no directory
// listings): gzipped to a client that takes gzip (the page's peer is
// 530 KB, 155 KB gzipped).
func serveStatic(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("file")
	if st, err := fs.Stat(staticFS, name); err != nil || !st.Mode().IsRegular() {
		httpx.WriteError(nil, w, r, errNoAsset)
		return
	}
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "public, max-age=300")
	h.Add("Vary", "Accept-Encoding")
	if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
		if gz, err := gzipped(name); err == nil {
			h.Set("Content-Type", mime.TypeByExtension(path.Ext(name)))
			h.Set("Content-Encoding", "gzip")
			h.Set("Content-Length", strconv.Itoa(len(gz)))
			if r.Method != http.MethodHead {
				w.Write(gz)
			}
			return
		}
	}
	http.ServeFileFS(w, r, staticFS, name)
}

// gzippedFiles holds web/static's files gzipped, each made on its first
// request.
var gzippedFiles sync.Map // name -> []byte

func gzipped(name string) ([]byte, error) {
	if b, ok := gzippedFiles.Load(name); ok {
		return b.([]byte), nil
	}
	raw, err := fs.ReadFile(staticFS, name)
	if err != nil {
		return nil, err
	}
	var z bytes.Buffer
	w, _ := gzip.NewWriterLevel(&z, gzip.BestCompression)
	w.Write(raw)
	w.Close()
	b, _ := gzippedFiles.LoadOrStore(name, z.Bytes())
	return b.([]byte), nil
}

var errNoAsset = httpx.ErrNotFound.With("no such file")
