package wall

import (
	"encoding/base64"
	"encoding/json"
	"strings"

	"github.com/agentmesh/mesh/store"
)

// Board events (spec 2.2), told to the sockets of the cluster on every
// node: each node sends them from the committed log entry, so a write on
// one node reaches the sockets of all.
const (
	EventBoardCreated = "board_created"
	EventBoardDeleted = "board_deleted"
	EventPostCreated  = "post_created"
	EventPostDeleted  = "post_deleted"
)

var boardEvents = map[string]string{
	ActBoardCreate: EventBoardCreated, ActBoardDelete: EventBoardDeleted,
	ActPostCreate: EventPostCreated, ActPostDelete: EventPostDeleted,
}

// BoardEvent is a committed board or post creation or deletion. A private
// cluster's slug and title are Sealed (frameInfo): the rooms, which hold
// the token, open them.
type BoardEvent struct {
	Cluster, Event, Slug, Post, Title string
	// Key is the board's key (a private board's HMAC: Sealed's slug must
	// be the one it stands for).
	Key    string
	Sealed string
}

type boardFrame struct {
	Kind  string `json:"kind"`
	Event string `json:"event"`
	Board string `json:"board"` // the board's slug, as a message frame's board
	Slug  string `json:"slug"`
	Post  string `json:"post,omitempty"`
	Title string `json:"title,omitempty"`
}

func boardEventOf(a *BoardAction) BoardEvent {
	ev := BoardEvent{Cluster: a.ID, Event: boardEvents[a.Op], Key: a.Board, Sealed: a.Frame}
	if a.Op == ActPostCreate || a.Op == ActPostDelete {
		ev.Post = a.Post
	}
	if a.Frame == "" {
		ev.Slug = a.Board
		var pc postContent
		if a.Op == ActPostCreate && json.Unmarshal(a.Content, &pc) == nil {
			ev.Title = pc.Title
		}
	}
	return ev
}

// OnBoard registers fn to learn of every board event the log commits.
// fn must not block.
func (c *Catalog) OnBoard(fn func(BoardEvent)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.board = append(c.board, fn)
}

func (c *Catalog) tell(ev BoardEvent) {
	if ev.Event == "" {
		return
	}
	c.mu.Lock()
	fns := c.board
	c.mu.Unlock()
	for _, fn := range fns {
		fn(ev)
	}
}

// boardEvent sends ev's frame to the cluster's sockets on this node.
func (s *Service) boardEvent(ev BoardEvent) {
	r := s.room(ev.Cluster)
	if r == nil {
		return
	}
	f := boardFrame{Kind: KindBoard, Event: ev.Event, Board: ev.Slug, Slug: ev.Slug, Post: ev.Post, Title: ev.Title}
	if ev.Sealed != "" {
		// A member's node sealed it: the directory could not check it.
		var fi frameInfo
		if unpack(r.seal, sealFrame, nil, ev.Sealed, &fi) != nil || !validSlug(fi.Slug) ||
			boardKeyOf(r.cl, r.member, fi.Slug) != ev.Key || checkField("title", fi.Title, maxTitle, false, false) != nil {
			return
		}
		f.Board, f.Slug, f.Title = fi.Slug, fi.Slug, fi.Title
	}
	if f.Title != "" && s.ageGated(r, f.Slug) {
		f.Title = "" // a socket says no adult=1: the title is a read
	}
	data := text(encodeFrame(f))
	r.mu.Lock()
	defer r.mu.Unlock()
	for sk := range r.sockets {
		sk.send(data)
	}
}

// ageGated reports whether board slug of r's cluster is age-gated, or
// cannot be read from this node's store (then it may be).
func (s *Service) ageGated(r *room, slug string) bool {
	cl, err := s.cfg.Catalog.Get(r.cl.ID)
	if err != nil {
		return true
	}
	g := &signer{cl: cl, member: r.member, seal: r.seal}
	_, bc, err := s.readBoard(g, slug)
	return err != nil || EffectiveProps(g.clusterProps(), bc.Props).AgeGated()
}

func sealString(seal *sealer, purpose string, b []byte) string {
	return base64.StdEncoding.EncodeToString(seal.seal(purpose, b))
}

// Hashtags (spec 2.3): in a message's text, #<slug> naming a board of the
// cluster adds board to its frame, and p_<id> naming a live post of the
// cluster adds ref; the first of each that matches. Nothing is resolved
// on a cluster without boards. The sending socket's node resolves them.

// resolveTags returns the board and ref of a message payload from r.
func (s *Service) resolveTags(r *room, payload json.RawMessage) (board, ref string) {
	text := payloadText(payload)
	if !strings.Contains(text, "#") && !strings.Contains(text, "p_") {
		return "", ""
	}
	cl, err := s.cfg.Catalog.Get(r.cl.ID)
	if err != nil || !cl.Boards {
		return "", ""
	}
	slugs, posts := hashtags(text)
	now := s.now().UnixNano()
	s.cfg.Catalog.db.View(func(tx *store.Txn) error {
		for _, slug := range slugs {
			if has, _ := tx.Has(boardRowKey(cl.ID, boardKeyOf(cl, r.member, slug))); has {
				board = slug
				break
			}
		}
		for _, id := range posts {
			if livePost(tx, cl.ID, id, now) {
				ref = id
				break
			}
		}
		return nil
	})
	return board, ref
}

// livePost reports whether post id of cluster c is live at now, on a
// board that still stands.
func livePost(tx *store.Txn, c, id string, now int64) bool {
	post, err := getPost(tx, c, id)
	if err != nil || !post.live(now) {
		return false
	}
	var row boardRow
	return tx.GetJSON(boardRowKey(c, post.Board), &row) == nil && row.BID == post.BID
}

// payloadText is a message's text: a string payload, or an object
// payload's "text".
func payloadText(payload json.RawMessage) string {
	var s string
	if json.Unmarshal(payload, &s) == nil {
		return s
	}
	var obj struct {
		Text string `json:"text"`
	}
	if len(payload) > 0 && payload[0] == '{' && json.Unmarshal(payload, &obj) == nil {
		return obj.Text
	}
	return ""
}

// hashtags returns the candidate slugs (#<slug>) and post ids (p_<id>)
// of text, at most maxHashtags of each.
func hashtags(text string) (slugs, posts []string) {
	isSlug := func(r rune) bool { return r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' }
	isWord := func(c byte) bool { return isSlug(rune(c)) || c >= 'A' && c <= 'Z' || c == '_' }
	for i := 0; i < len(text); i++ {
		switch {
		case text[i] == '#' && len(slugs) < maxHashtags:
			end := i + 1
			for end < len(text) && isSlug(rune(text[end])) {
				end++
			}
			if slug := strings.TrimRight(text[i+1:end], "-"); validSlug(slug) {
				slugs = append(slugs, slug)
			}
		case strings.HasPrefix(text[i:], "p_") && len(posts) < maxHashtags && (i == 0 || !isWord(text[i-1])):
			if end := i + 26; end <= len(text) && validPostID(text[i:end]) && (end == len(text) || !isWord(text[end])) {
				posts = append(posts, text[i:end])
			}
		}
	}
	return slugs, posts
}
