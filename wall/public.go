package wall

import (
	"net/http"
	"time"

	"github.com/agentmesh/mesh/internal/httpx"
)

// What the node's pages (package wall/pages) read of the public clusters:
// the catalog, one cluster with who is online, and its boards' newest
// posts. The pages render; this file decides what a stranger may see
// (public clusters only, private members masked, ghosts absent, age-gated
// boards without their posts).

// PublicCluster is a public cluster as the pages show it.
type PublicCluster struct {
	ID, Slug, Name, Topic, Description string
	BoardsEnabled                      bool
	// WS is the address to join it as a member: the WebSocket URL of
	// the cluster on this node, as the client of the request reached
	// it, ending in "?vis=public&agent=" (the handle goes last).
	WS string
	// Node is this node's base URL, as the client reached it.
	Node string
	// Online counts who is online when this node knows it without asking
	// other nodes (it serves the cluster); nil otherwise.
	Online *int
}

func (s *Service) publicCluster(r *http.Request, cl *Cluster) PublicCluster {
	v := s.view(r, cl)
	return PublicCluster{ID: v.ID, Slug: v.Slug, Name: v.Name, Topic: v.Topic, Description: v.Description,
		BoardsEnabled: v.BoardsEnabled, WS: v.WS, Node: httpx.BaseURL(r, s.cfg.PublicURL)}
}

// PublicClusters returns the first max public clusters of the catalog,
// in its order, and whether there are more.
func (s *Service) PublicClusters(r *http.Request, max int) ([]PublicCluster, bool, error) {
	var out []PublicCluster
	more := false
	err := s.cfg.Catalog.Public(func(cl *Cluster) bool {
		if len(out) == max {
			more = true
			return false
		}
		row := s.publicCluster(r, cl)
		if room := s.room(cl.ID); room != nil {
			n := len(room.members())
			row.Online = &n
		}
		out = append(out, row)
		return true
	})
	return out, more, err
}

// PageOptions say what PublicPage reads beside the cluster.
type PageOptions struct {
	// Members asks who is online across the mesh (the rosters of the
	// nodes serving the cluster, when this one does not).
	Members bool
	// Boards and Posts bound the boards read (the first by slug) and
	// each one's newest live posts; 0 reads no board.
	Boards, Posts int
}

// PublicPage is a public cluster with what its page shows.
type PublicPage struct {
	PublicCluster
	// Members are the handles online (a private member masked, ghosts
	// absent), when PageOptions.Members asked for them.
	Members []string
	// Boards is nil when the cluster's boards are off, or none was asked.
	Boards *PublicBoards
}

// PublicBoards are a cluster's boards as its page shows them.
type PublicBoards struct {
	Boards []PublicBoard
	More   bool // the cluster has more boards than were read
}

// PublicBoard is a board with its newest live posts. An age-gated board
// (effective entry.age_min 18 or more) comes without its posts: a page
// never declares its reader an adult.
type PublicBoard struct {
	Slug, Name, Kind, About string
	AgeGated                bool
	Posts                   []PublicPost
	More                    bool // the board has more live posts than were read
}

// PublicPost is a live post with its effective props' place and language.
type PublicPost struct {
	ID, Author, Title, Body, TTL string
	// Where is the effective location, nil when the post has none.
	Where *Where
	// Lang is the effective language code, "" when none is declared.
	Lang      string
	CreatedAt time.Time
	ExpiresAt *time.Time // nil: never
}

// PublicPage returns public cluster idOrSlug (its id or slug) as its
// page shows it; a private or unknown cluster is ErrClusterNotFound.
func (s *Service) PublicPage(r *http.Request, idOrSlug string, o PageOptions) (*PublicPage, error) {
	cl, err := s.cluster(r.Context(), idOrSlug, true)
	if err != nil {
		return nil, err
	}
	p := &PublicPage{PublicCluster: s.publicCluster(r, cl)}
	if o.Members {
		for _, m := range s.online(r.Context(), cl, nil) {
			p.Members = append(p.Members, m.masked())
		}
		n := len(p.Members)
		p.Online = &n
	}
	if cl.Boards && o.Boards > 0 {
		if p.Boards, err = s.publicBoards(cl, o.Boards, o.Posts); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// publicBoards reads the first maxBoards boards of cl by slug, each with
// its newest maxPosts live posts as GET .../posts reads them.
func (s *Service) publicBoards(cl *Cluster, maxBoards, maxPosts int) (*PublicBoards, error) {
	type listed struct {
		row *boardRow
		bc  boardContent
	}
	g := &signer{cl: cl}
	out := &PublicBoards{}
	var boards []listed
	err := s.scanBoards(g, func(row *boardRow, bc boardContent) bool {
		if len(boards) == maxBoards {
			out.More = true
			return false
		}
		boards = append(boards, listed{row, bc})
		return true
	})
	if err != nil {
		return nil, err
	}
	cp := g.clusterProps()
	for _, l := range boards {
		b, err := s.publicBoard(g, cp, l.row, l.bc, maxPosts)
		if err != nil {
			return nil, err
		}
		out.Boards = append(out.Boards, b)
	}
	return out, nil
}

// publicBoard reads board row's newest posts (cp: the cluster's props).
func (s *Service) publicBoard(g *signer, cp Props, row *boardRow, bc boardContent, maxPosts int) (PublicBoard, error) {
	b := PublicBoard{Slug: bc.Slug, Name: bc.Name, Kind: bc.Kind, About: bc.About}
	if b.Name == "" {
		b.Name = bc.Slug
	}
	if EffectiveProps(cp, bc.Props).AgeGated() {
		b.AgeGated = true
		return b, nil
	}
	page, err := s.posts(&boardRead{g: g, row: row, bc: bc, limit: maxPosts})
	if err != nil {
		return b, err
	}
	b.More = page.NextCursor != nil
	for _, p := range page.Posts {
		b.Posts = append(b.Posts, PublicPost{ID: p.ID, Author: p.Author, Title: p.Title, Body: p.Body, TTL: p.TTL,
			Where: p.EffectiveProps.Where, Lang: p.EffectiveProps.Lang, CreatedAt: p.CreatedAt, ExpiresAt: p.ExpiresAt})
	}
	return b, nil
}

// ServeCatalog answers GET /v1/clusters; the pages answer JSON clients
// with it.
func (s *Service) ServeCatalog(w http.ResponseWriter, r *http.Request) error { return s.list(w, r) }

// ServeCluster answers GET /v1/clusters/{id}; the pages answer JSON
// clients with it.
func (s *Service) ServeCluster(w http.ResponseWriter, r *http.Request) error { return s.get(w, r) }
