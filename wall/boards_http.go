package wall

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agentmesh/mesh/internal/cmdlog"
	"github.com/agentmesh/mesh/internal/httpx"
)

// boardRoutes are the boards' routes (spec 4).
func (s *Service) boardRoutes(h func(string, httpx.HandlerFunc)) {
	h("PATCH /v1/clusters/{id}", s.patchCluster)
	h("POST /v1/clusters/{id}/boards", s.createBoard)
	h("GET /v1/clusters/{id}/boards", s.listBoards)
	h("GET /v1/clusters/{id}/boards/{slug}", s.getBoard)
	h("PATCH /v1/clusters/{id}/boards/{slug}", s.patchBoard)
	h("DELETE /v1/clusters/{id}/boards/{slug}", s.deleteBoard)
	h("POST /v1/clusters/{id}/boards/{slug}/posts", s.createPost)
	h("GET /v1/clusters/{id}/boards/{slug}/posts", s.listPosts)
	h("GET /v1/clusters/{id}/boards/{slug}/posts/{pid}", s.getPost)
	h("DELETE /v1/clusters/{id}/boards/{slug}/posts/{pid}", s.deletePost)
}

// boardWriteRoutes are the boards' write surfaces (internal/admission).
var boardWriteRoutes = map[string]string{
	"PATCH /v1/clusters/{id}":                            "cluster_patch",
	"POST /v1/clusters/{id}/boards":                      "board_create",
	"PATCH /v1/clusters/{id}/boards/{slug}":              "board_patch",
	"DELETE /v1/clusters/{id}/boards/{slug}":             "board_delete",
	"POST /v1/clusters/{id}/boards/{slug}/posts":         "post_create",
	"DELETE /v1/clusters/{id}/boards/{slug}/posts/{pid}": "post_delete",
}

// boardSurface names a board action's write surface, as the routes do.
func boardSurface(s Signed) string {
	a, err := boardActionTarget(s)
	if err != nil {
		return "board_write"
	}
	switch a.Op {
	case ActPatchCluster:
		return "cluster_patch"
	case ActBoardCreate, ActBoardPatch, ActBoardDelete, ActPostCreate, ActPostDelete:
		return a.Op
	}
	return "board_write"
}

// access checks a request's credential on its cluster: on a private
// cluster the member token or admin token (else 404: a private id cannot
// be probed); with admin, the admin token.
func (s *Service) access(r *http.Request, admin bool) (*signer, error) {
	cl, err := s.cluster(r.Context(), r.PathValue("id"), false)
	if err != nil {
		return nil, err
	}
	tok := clusterToken(r)
	g := &signer{cl: cl}
	if isAdminOf(tok, cl.ID) {
		g.admin = tok
	}
	if !cl.Public() {
		member, ok := cl.memberToken(tok)
		if !ok {
			return nil, ErrClusterNotFound
		}
		if cl.memberPub() == nil {
			return nil, ErrNoMemberKey
		}
		g.member, g.seal = member, newSealer(cl.ID, member)
	}
	switch {
	case !admin || g.admin != "":
		return g, nil
	case tok == "":
		return nil, ErrTokenRequired.With("this needs the cluster's admin token (ak_) in x-cluster-token, Authorization: Bearer or ?token=")
	case strings.HasPrefix(tok, tokenPrefix):
		return nil, ErrNotAdmin
	}
	return nil, ErrBadToken.With("not the admin token of cluster %s", cl.ID)
}

// clusterProps are the cluster's props as g reads them.
func (g *signer) clusterProps() Props {
	var p Props
	if g.cl.Public() && len(g.cl.Props) > 0 {
		json.Unmarshal(g.cl.Props, &p)
	} else if g.cl.SealedProps != "" {
		unpack(g.seal, sealProps, nil, g.cl.SealedProps, &p)
	}
	return p
}

const sealProps = "props"

// propose signs a and proposes it; an admin action made against a Rev
// the cluster has left (another admin action came first) is made again
// against the new one, twice at most.
func (s *Service) propose(ctx context.Context, g *signer, build func() (BoardAction, error)) (Result, error) {
	for attempt := 0; ; attempt++ {
		a, err := build()
		if err != nil {
			return Result{}, err
		}
		now := s.now()
		a.At, a.Rev = now.UnixMilli(), g.cl.Rev
		signed, err := g.sign(a)
		if err != nil {
			return Result{}, err
		}
		if len(signed.Body) > MaxBoardOpSize {
			return Result{}, httpx.ErrTooLarge.With("the write is %d bytes once encoded, over %d", len(signed.Body), MaxBoardOpSize)
		}
		q := s.cfg.Quota
		op := Op{Board: &signed, Quota: &q, SlugHold: s.slugHold(a.Op)}
		res, err := cmdlog.ResultAs[Result](s.cfg.Log.Propose(ctx, Kind, now.UnixNano(), op))
		if !errors.Is(err, ErrStale) || attempt == 2 {
			return res, err
		}
		s.refresh(ctx)
		cl, err := s.cfg.Catalog.Get(g.cl.ID)
		if err != nil {
			return Result{}, err
		}
		g.cl = cl
	}
}

// readFields reads a JSON object body whose keys must be among allowed.
func readFields(w http.ResponseWriter, r *http.Request, allowed ...string) (map[string]json.RawMessage, error) {
	body, err := httpx.ReadBody(w, r, maxBoardBody)
	if err != nil {
		return nil, err
	}
	var fields map[string]json.RawMessage
	if err := httpx.DecodeJSON(body, &fields); err != nil {
		return nil, err
	}
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		if !slices.Contains(allowed, k) {
			return nil, httpx.ErrInvalid.With("unknown field %q: this request takes %s", k, strings.Join(allowed, ", "))
		}
	}
	return fields, nil
}

// stringField sets *v from fields[k] when present: a JSON string.
func stringField(fields map[string]json.RawMessage, k string, v *string) error {
	raw, ok := fields[k]
	if !ok {
		return nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return httpx.ErrInvalid.With("%s must be a string", k)
	}
	return nil
}

// boardsOn is access for board requests: boards must be enabled. A node
// that is not the directory asks it for changes before answering that
// they are not (they may have been enabled a moment ago elsewhere).
func (s *Service) boardsOn(r *http.Request, admin bool) (*signer, error) {
	g, err := s.access(r, admin)
	if err != nil || g.cl.Boards {
		return g, err
	}
	if s.refresh(r.Context()) {
		if g.cl, err = s.cfg.Catalog.Get(g.cl.ID); err != nil {
			return nil, err
		}
	}
	if !g.cl.Boards {
		return nil, ErrBoardsOff
	}
	return g, nil
}

// refresh brings the catalog up to date with the directory, if this node
// is not it; it reports whether it did.
func (s *Service) refresh(ctx context.Context) bool {
	if s.cfg.Refresh == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, refreshTimeout)
	defer cancel()
	return s.cfg.Refresh(ctx) == nil
}

type boardRequest struct {
	Slug  string          `json:"slug"`
	Name  string          `json:"name"`
	Kind  string          `json:"kind"`
	About string          `json:"about"`
	Props json.RawMessage `json:"props"`
}

func (s *Service) createBoard(w http.ResponseWriter, r *http.Request) error {
	g, err := s.boardsOn(r, true)
	if err != nil {
		return err
	}
	fields, err := readFields(w, r, "slug", "name", "kind", "about", "props")
	if err != nil {
		return err
	}
	bc := boardContent{Kind: "generic"}
	for k, v := range map[string]*string{"slug": &bc.Slug, "name": &bc.Name, "kind": &bc.Kind, "about": &bc.About} {
		if err := stringField(fields, k, v); err != nil {
			return err
		}
	}
	patch, err := DecodeProps(fields["props"], BoardProps)
	if err != nil {
		return err
	}
	bc.Props = Props{}.Apply(patch)
	if bc.Name == "" {
		bc.Name = bc.Slug
	}
	if err := bc.validate(); err != nil {
		return err
	}
	res, err := s.propose(r.Context(), g, func() (BoardAction, error) {
		a := BoardAction{Op: ActBoardCreate, Board: g.boardKey(bc.Slug)}
		g.pack(&a, sealBoard, bc)
		g.frame(&a, frameInfo{Slug: bc.Slug})
		return a, nil
	})
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusCreated, map[string]any{"board": viewBoard(res.Board, bc)})
	return nil
}

func (s *Service) patchBoard(w http.ResponseWriter, r *http.Request) error {
	g, err := s.boardsOn(r, true)
	if err != nil {
		return err
	}
	fields, err := readFields(w, r, "name", "kind", "about", "props")
	if err != nil {
		return err
	}
	patch, err := DecodeProps(fields["props"], BoardProps)
	if err != nil {
		return err
	}
	var bc boardContent
	res, err := s.propose(r.Context(), g, func() (BoardAction, error) {
		row, cur, err := s.loadBoard(r.Context(), g, r.PathValue("slug"))
		if err != nil {
			return BoardAction{}, err
		}
		bc = cur
		for k, v := range map[string]*string{"name": &bc.Name, "kind": &bc.Kind, "about": &bc.About} {
			if err := stringField(fields, k, v); err != nil {
				return BoardAction{}, err
			}
		}
		bc.Props = bc.Props.Apply(patch)
		if err := bc.validate(); err != nil {
			return BoardAction{}, err
		}
		a := BoardAction{Op: ActBoardPatch, Board: row.Key}
		g.pack(&a, sealBoard, bc)
		return a, nil
	})
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"board": viewBoard(res.Board, bc)})
	return nil
}

func (s *Service) deleteBoard(w http.ResponseWriter, r *http.Request) error {
	g, err := s.boardsOn(r, true)
	if err != nil {
		return err
	}
	slug := r.PathValue("slug")
	_, err = s.propose(r.Context(), g, func() (BoardAction, error) {
		row, _, err := s.loadBoard(r.Context(), g, slug)
		if err != nil {
			return BoardAction{}, err
		}
		a := BoardAction{Op: ActBoardDelete, Board: row.Key}
		g.frame(&a, frameInfo{Slug: slug})
		return a, nil
	})
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"ok": true, "cluster_id": g.cl.ID, "board": slug})
	return nil
}

// frame sets a private cluster's action's sealed frame (a public one's
// frames are read from the action itself).
func (g *signer) frame(a *BoardAction, f frameInfo) {
	if g.seal != nil {
		b, _ := json.Marshal(f)
		a.Frame = sealString(g.seal, sealFrame, b)
	}
}

type postRequest struct {
	Title string          `json:"title"`
	Body  string          `json:"body"`
	TTL   string          `json:"ttl"`
	File  *FileRef        `json:"file"`
	Props json.RawMessage `json:"props"`
}

func (s *Service) createPost(w http.ResponseWriter, r *http.Request) error {
	g, err := s.boardsOn(r, false)
	if err != nil {
		return err
	}
	body, err := httpx.ReadBody(w, r, maxBoardBody)
	if err != nil {
		return err
	}
	// A body too long for any board is answered once the board is known:
	// past the board's own limit it is 422, not 413.
	pc, ttl, err := decodePost(r.URL.Query().Get("agent"), body)
	tooLong := errors.Is(err, ErrLongPost)
	if err != nil && !tooLong {
		return err
	}
	row, bc, err := s.loadBoard(r.Context(), g, r.PathValue("slug"))
	if err != nil {
		return err
	}
	eff := EffectiveProps(g.clusterProps(), bc.Props)
	if eff.AgeGated() && r.URL.Query().Get("adult") != "1" {
		return ErrAgeGated
	}
	if err := checkPostLength(eff.Limits, utf8.RuneCountInString(pc.Body)); err != nil {
		return err
	}
	if tooLong {
		return ErrLongPost
	}
	res, err := s.propose(r.Context(), g, func() (BoardAction, error) {
		a := BoardAction{Op: ActPostCreate, Board: row.Key, Post: newPostID(), TTL: ttl}
		g.pack(&a, sealPost, pc)
		g.frame(&a, frameInfo{Slug: bc.Slug, Title: pc.Title})
		return a, nil
	})
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusCreated, map[string]any{"post": viewPost(res.Post, bc.Slug, pc, g.clusterProps(), bc.Props)})
	return nil
}

// checkPostLength checks a body of n characters against a board's
// effective limits (nil: none): past the board's post_max_chars it is 422
// (spec 7); past the bound without one, 413.
func checkPostLength(l *Limits, n int) error {
	switch {
	case l != nil && n > l.PostMaxChars:
		return ErrTooLong.With("the body has %d characters, over this board's limits.post_max_chars (%d)", n, l.PostMaxChars)
	case l == nil && n > defaultPostChars:
		return ErrLongPost.With("the body has %d characters: a board without limits.post_max_chars takes at most %d", n, defaultPostChars)
	}
	return nil
}

// decodePost decodes and checks a post creation by agent: its content
// and ttl.
func decodePost(agent string, body []byte) (postContent, string, error) {
	var req postRequest
	if err := httpx.DecodeJSON(body, &req); err != nil {
		return postContent{}, "", err
	}
	if _, ok := ttls[req.TTL]; !ok {
		return postContent{}, "", ErrBadTTL.With("ttl must be 24h, 7d, 30d, 1y or forever, not %q", req.TTL)
	}
	patch, err := DecodeProps(req.Props, PostProps)
	if err != nil {
		return postContent{}, "", err
	}
	pc := postContent{Author: agent, Title: req.Title, Body: req.Body, File: req.File, Props: Props{}.Apply(patch)}
	return pc, req.TTL, pc.validate()
}

func (s *Service) deletePost(w http.ResponseWriter, r *http.Request) error {
	g, err := s.boardsOn(r, false)
	if err != nil {
		return err
	}
	agent := r.URL.Query().Get("agent")
	if g.admin == "" && agent == "" {
		return ErrNotAuthor.With("deleting a post needs ?agent=<author handle>, or the cluster's admin token")
	}
	pid := r.PathValue("pid")
	_, err = s.propose(r.Context(), g, func() (BoardAction, error) {
		row, bc, err := s.loadBoard(r.Context(), g, r.PathValue("slug"))
		if err != nil {
			return BoardAction{}, err
		}
		// The admin may delete a post that does not open (openPost).
		post, err := s.livePostRow(g.cl.ID, row, pid)
		if err != nil {
			return BoardAction{}, err
		}
		a := BoardAction{Op: ActPostDelete, Board: row.Key, Post: post.ID}
		if g.admin == "" {
			if pc, err := openPost(g.seal, post); err != nil || pc.Author != agent {
				return BoardAction{}, ErrNotAuthor
			}
			a.ByAuthor = true
			if g.seal == nil {
				a.Agent = agent
			}
		}
		g.frame(&a, frameInfo{Slug: bc.Slug})
		return a, nil
	})
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"ok": true, "cluster_id": g.cl.ID, "board": r.PathValue("slug"), "post": pid})
	return nil
}

// boardView is a board as the API shows it.
type boardView struct {
	Slug      string    `json:"slug"`
	Name      string    `json:"name"`
	Kind      string    `json:"kind"`
	About     string    `json:"about"`
	Props     Props     `json:"props"`
	Posts     int       `json:"posts"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

func viewBoard(row *boardRow, bc boardContent) boardView {
	return boardView{Slug: bc.Slug, Name: bc.Name, Kind: bc.Kind, About: bc.About, Props: bc.Props, Posts: row.Posts,
		CreatedAt: time.Unix(0, row.Created).UTC(), UpdatedAt: time.Unix(0, row.Updated).UTC()}
}

// postView is a post as the API shows it.
type postView struct {
	ID             string     `json:"id"`
	Board          string     `json:"board"`
	Author         string     `json:"author"`
	Title          string     `json:"title"`
	Body           string     `json:"body"`
	TTL            string     `json:"ttl"`
	File           *FileRef   `json:"file"`
	Props          Props      `json:"props"`
	EffectiveProps Props      `json:"effective_props"`
	CreatedAt      time.Time  `json:"created_at"`
	ExpiresAt      *time.Time `json:"expires_at"`
}

func viewPost(p *postRow, slug string, pc postContent, cluster, board Props) postView {
	v := postView{ID: p.ID, Board: slug, Author: pc.Author, Title: pc.Title, Body: pc.Body, TTL: p.TTL, File: pc.File,
		Props: pc.Props, EffectiveProps: EffectiveProps(cluster, board, pc.Props), CreatedAt: time.Unix(0, p.Created).UTC()}
	if p.Until > 0 {
		t := time.Unix(0, p.Until).UTC()
		v.ExpiresAt = &t
	}
	return v
}
