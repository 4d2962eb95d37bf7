package wall

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/agentmesh/mesh/internal/httpx"
	"github.com/agentmesh/mesh/store"
)

// loadBoard reads board slug of g's cluster and opens its content; a
// node that is not the directory asks it for changes before answering
// that the board does not exist.
func (s *Service) loadBoard(ctx context.Context, g *signer, slug string) (*boardRow, boardContent, error) {
	row, bc, err := s.readBoard(g, slug)
	if errors.Is(err, ErrBoardNotFound) && validSlug(slug) && s.refresh(ctx) {
		row, bc, err = s.readBoard(g, slug)
	}
	return row, bc, err
}

// readBoard reads board slug of g's cluster from this node's store and
// opens its content.
func (s *Service) readBoard(g *signer, slug string) (*boardRow, boardContent, error) {
	var row boardRow
	var bc boardContent
	if !validSlug(slug) {
		return nil, bc, ErrBoardNotFound
	}
	err := s.cfg.Catalog.db.View(func(tx *store.Txn) error {
		return tx.GetJSON(boardRowKey(g.cl.ID, g.boardKey(slug)), &row)
	})
	if errors.Is(err, store.ErrNotFound) {
		return nil, bc, ErrBoardNotFound
	}
	if err != nil {
		return nil, bc, err
	}
	return &row, bc, unpack(g.seal, sealBoard, row.Content, row.Sealed, &bc)
}

// loadPost reads live post id of board row and opens its content.
func (s *Service) loadPost(g *signer, row *boardRow, id string) (*postRow, postContent, error) {
	var pc postContent
	post, err := s.livePostRow(g.cl.ID, row, id)
	if err != nil {
		return nil, pc, err
	}
	if pc, err = openPost(g.seal, post); err != nil {
		return nil, pc, ErrPostNotFound
	}
	return post, pc, nil
}

// livePostRow reads live post id of board row of cluster c, unopened.
func (s *Service) livePostRow(c string, row *boardRow, id string) (*postRow, error) {
	if !validPostID(id) {
		return nil, ErrPostNotFound
	}
	var post *postRow
	err := s.cfg.Catalog.db.View(func(tx *store.Txn) error {
		var err error
		post, err = getPost(tx, c, id)
		return err
	})
	if err != nil {
		return nil, err
	}
	if post.BID != row.BID || !post.live(s.now().UnixNano()) {
		return nil, ErrPostNotFound
	}
	return post, nil
}

// openPost opens post's content. A private post's is sealed by a
// member's node, which the directory cannot check: it is checked here as
// the handlers check a creation (a public one's was, by Apply), so that
// a post a member's own software sealed wrong is never shown (never
// indexed, not found by id).
func openPost(seal *sealer, post *postRow) (postContent, error) {
	var pc postContent
	if err := unpack(seal, sealPost, post.Content, post.Sealed, &pc); err != nil || seal == nil {
		return pc, err
	}
	return pc, pc.validate()
}

type boardsList struct {
	ClusterID     string      `json:"cluster_id"`
	BoardsEnabled bool        `json:"boards_enabled"`
	ClusterProps  Props       `json:"cluster_props"`
	Boards        []boardView `json:"boards"`
	Count         int         `json:"count"`
}

func (s *Service) listBoards(w http.ResponseWriter, r *http.Request) error {
	g, err := s.access(r, false)
	if err != nil {
		return err
	}
	out := boardsList{ClusterID: g.cl.ID, BoardsEnabled: g.cl.Boards, ClusterProps: g.clusterProps(), Boards: []boardView{}}
	if g.cl.Boards {
		err := s.scanBoards(g, func(row *boardRow, bc boardContent) bool {
			out.Boards = append(out.Boards, viewBoard(row, bc))
			return true
		})
		if err != nil {
			return err
		}
	}
	slices.SortFunc(out.Boards, func(a, b boardView) int { return strings.Compare(a.Slug, b.Slug) })
	out.Count = len(out.Boards)
	httpx.WriteJSON(w, http.StatusOK, out)
	return nil
}

// scanBoards calls fn with each board of g's cluster it can open, in the
// order of their keys (a public board's key is its slug), until fn
// returns false.
func (s *Service) scanBoards(g *signer, fn func(*boardRow, boardContent) bool) error {
	return s.cfg.Catalog.db.View(func(tx *store.Txn) error {
		return tx.Scan(store.Key("w", "bb", g.cl.ID, ""), nil, func(_, v []byte) (bool, error) {
			var row boardRow
			var bc boardContent
			if json.Unmarshal(v, &row) != nil || unpack(g.seal, sealBoard, row.Content, row.Sealed, &bc) != nil {
				return true, nil
			}
			return fn(&row, bc), nil
		})
	})
}

// postsPage is a page of a board's live posts, newest first.
type postsPage struct {
	Posts      []postView `json:"posts"`
	Count      int        `json:"count"`
	NextCursor *string    `json:"next_cursor"`
}

// boardRead is a read of a board's posts: the board, and the query.
type boardRead struct {
	g      *signer
	row    *boardRow
	bc     boardContent
	filter PostFilter
	limit  int
	after  *idxPost
}

// openRead checks a read of board slug: credentials, age gate, query.
func (s *Service) openRead(r *http.Request) (*boardRead, error) {
	g, err := s.boardsOn(r, false)
	if err != nil {
		return nil, err
	}
	q := r.URL.Query()
	f, err := ParsePostFilter(q)
	if err != nil {
		return nil, err
	}
	row, bc, err := s.loadBoard(r.Context(), g, r.PathValue("slug"))
	if err != nil {
		return nil, err
	}
	if EffectiveProps(g.clusterProps(), bc.Props).AgeGated() && !f.Adult {
		return nil, ErrAgeGated
	}
	rd := &boardRead{g: g, row: row, bc: bc, filter: f, limit: defaultPage}
	return rd, rd.page(q.Get("limit"), q.Get("cursor"))
}

func (rd *boardRead) page(limit, cursor string) error {
	if limit != "" {
		n, err := strconv.Atoi(limit)
		if err != nil || n < 1 || n > maxPageSize {
			return ErrBadPage.With("limit must be 1 to %d, not %q", maxPageSize, limit)
		}
		rd.limit = n
	}
	if cursor == "" {
		return nil
	}
	at, id, ok := strings.Cut(cursor, ".")
	n, err := strconv.ParseInt(at, 10, 64)
	if !ok || err != nil || !validPostID(id) {
		return ErrBadPage.With("cursor %q is not a next_cursor of this API", cursor)
	}
	rd.after = &idxPost{id: id, created: n}
	return nil
}

// boardPage is a board and a page of its posts.
type boardPage struct {
	Board          boardView `json:"board"`
	ClusterProps   Props     `json:"cluster_props"`
	EffectiveProps Props     `json:"effective_props"`
	postsPage
}

func (s *Service) getBoard(w http.ResponseWriter, r *http.Request) error {
	return s.readPage(w, r, func(rd *boardRead, page postsPage) any {
		cp := rd.g.clusterProps()
		return boardPage{Board: viewBoard(rd.row, rd.bc), ClusterProps: cp, EffectiveProps: EffectiveProps(cp, rd.bc.Props), postsPage: page}
	})
}

func (s *Service) listPosts(w http.ResponseWriter, r *http.Request) error {
	return s.readPage(w, r, func(_ *boardRead, page postsPage) any { return page })
}

// readPage answers a read of a page of a board's posts with what answer
// makes of it.
func (s *Service) readPage(w http.ResponseWriter, r *http.Request, answer func(*boardRead, postsPage) any) error {
	rd, err := s.openRead(r)
	if err != nil {
		return err
	}
	page, err := s.posts(rd)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, answer(rd, page))
	return nil
}

func (s *Service) getPost(w http.ResponseWriter, r *http.Request) error {
	rd, err := s.openRead(r)
	if err != nil {
		return err
	}
	post, pc, err := s.loadPost(rd.g, rd.row, r.PathValue("pid"))
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"post": viewPost(post, rd.bc.Slug, pc, rd.g.clusterProps(), rd.bc.Props)})
	return nil
}

// posts answers a read: the page's posts from the board's index, then
// their contents from the store.
func (s *Service) posts(rd *boardRead) (postsPage, error) {
	cat := s.cfg.Catalog
	levels := [2]Props{rd.g.clusterProps(), rd.bc.Props}
	idx, err := cat.boardIndex(rd.g.cl.ID, rd.row, rd.g.seal)
	if err != nil {
		return postsPage{}, err
	}
	hits, more := idx.query(levels, rd.filter, rd.after, rd.limit, s.now().UnixNano())
	idx.mu.RUnlock()
	page := postsPage{Posts: make([]postView, 0, len(hits))}
	err = cat.db.View(func(tx *store.Txn) error {
		for _, h := range hits {
			post, err := getPost(tx, rd.g.cl.ID, h.id)
			if errors.Is(err, ErrPostNotFound) {
				continue // deleted since
			}
			if err != nil {
				return err
			}
			pc, err := openPost(rd.g.seal, post)
			if err != nil {
				continue // never shown (openPost)
			}
			page.Posts = append(page.Posts, viewPost(post, rd.bc.Slug, pc, levels[0], levels[1]))
		}
		return nil
	})
	page.Count = len(page.Posts)
	if more && len(hits) > 0 {
		last := hits[len(hits)-1]
		c := strconv.FormatInt(last.created, 10) + "." + last.id
		page.NextCursor = &c
	}
	return page, err
}

// nearScan bounds the newest posts a near query walks before it asks the
// GeoIndex: where posts crowd around the point (a city board), the newest
// page is found among the newest posts at once; where they do not, the
// GeoIndex's few candidates are sorted instead.
const nearScan = 2048

// query returns up to limit live posts matching f, newest first, older
// than after (if set), and whether more follow. levels are the cluster's
// and the board's props. The caller holds b.mu.
func (b *boardIdx) query(levels [2]Props, f PostFilter, after *idxPost, limit int, now int64) ([]*idxPost, bool) {
	var out []*idxPost
	take := func(p *idxPost) bool {
		if p.until != 0 && p.until <= now || after != nil && !p.before(after) {
			return true
		}
		if f.Match(EffectiveProps(levels[0], levels[1], p.props)) {
			out = append(out, p)
		}
		return len(out) <= limit
	}
	top := len(b.order)
	if after != nil {
		top, _ = slices.BinarySearchFunc(b.order, after, cmpPost)
	}
	// walk takes the posts older than after, newest first, until the page
	// is full or budget posts were looked at (-1: no bound); it reports
	// whether the page is complete.
	walk := func(budget int) bool {
		for i := top - 1; i >= 0; i-- {
			if budget == 0 {
				return false
			}
			budget--
			if !take(b.order[i]) {
				break
			}
		}
		return true
	}
	// Unless the board's own location is near (then every post that
	// inherits it is), only posts with a location of their own can be.
	base := EffectiveProps(levels[0], levels[1])
	if f.Near == nil || base.Where != nil && DistanceKm(f.Near.Lat, f.Near.Lon, base.Where.Lat, base.Where.Lon) <= f.Km {
		walk(-1)
		return page(out, limit)
	}
	if walk(nearScan) {
		return page(out, limit)
	}
	// Sparse near the point: the GeoIndex finds the candidates.
	out = out[:0]
	var cands []*idxPost
	b.geo.Near(f.Near.Lat, f.Near.Lon, f.Km, func(id string, _ float64) bool {
		if p := b.posts[id]; p != nil {
			cands = append(cands, p)
		}
		return true
	})
	slices.SortFunc(cands, func(x, y *idxPost) int { return cmpPost(y, x) })
	for _, p := range cands {
		if !take(p) {
			break
		}
	}
	return page(out, limit)
}

// page cuts out to limit, telling whether more follow.
func page(out []*idxPost, limit int) ([]*idxPost, bool) {
	if len(out) > limit {
		return out[:limit], true
	}
	return out, false
}
