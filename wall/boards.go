package wall

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/agentmesh/mesh/internal/httpx"
	"github.com/agentmesh/mesh/store"
)

// Boards (spec 2.4) are a cluster's persistent posts. Every board and post
// write is a BoardAction in the canonical log (Op.Board), signed so that
// the directory, which holds no token, checks who made it:
//
//   - cluster patches and board writes, and post deletions by the admin,
//     by the cluster's admin key; they name the cluster's Rev they were
//     made against, so a replayed or concurrent one is refused;
//   - on a private cluster, post creations and deletions by their author
//     by its member key (the token holder's proof); on a public cluster
//     they need no signature, as they need no credential.
//
// A private cluster's board and post contents (and the slug of each board
// and title of each post in frames) are sealed with its wire key by the
// node that serves the request, which holds the token: the directory and
// the other nodes store and replicate them without reading them. A private
// board's key in the store is an HMAC of its slug under a key derived from
// the token, so that slugs stay unique without being readable.

// Board action names.
const (
	ActPatchCluster = "patch_cluster"
	ActBoardCreate  = "board_create"
	ActBoardPatch   = "board_patch"
	ActBoardDelete  = "board_delete"
	ActPostCreate   = "post_create"
	ActPostDelete   = "post_delete"
)

// BoardAction is one board or post write, the body of a Signed.
type BoardAction struct {
	V  int    `json:"v"`
	Op string `json:"op"`
	ID string `json:"id"` // the cluster
	At int64  `json:"at"` // Unix ms, as the proposing node read its clock
	// Rev is the cluster's Rev an admin action was made against.
	Rev int64 `json:"rev,omitempty"`
	// Board is the board's key (its slug, or a private board's HMAC).
	Board string `json:"board,omitempty"`
	Post  string `json:"post,omitempty"`
	// ByAuthor marks a post_delete by the post's author (else: the
	// admin's); Agent is the author's handle on a public cluster (a
	// private one's is sealed in the post: the member's node checked it).
	ByAuthor bool   `json:"by_author,omitempty"`
	Agent    string `json:"agent,omitempty"`
	// Boards is a patch_cluster's boards_enabled, when it sets it.
	Boards *bool `json:"boards_enabled,omitempty"`
	// Props is a patch_cluster's new props (public clusters), when it
	// sets them.
	Props json.RawMessage `json:"props,omitempty"`
	// Content is a public board's (boardContent) or post's (postContent)
	// content; Sealed the same sealed with a private cluster's wire key,
	// base64.
	Content json.RawMessage `json:"content,omitempty"`
	Sealed  string          `json:"sealed,omitempty"`
	// TTL is a post's time to live (ttls).
	TTL string `json:"ttl,omitempty"`
	// Frame is what a private cluster's board frame shows (frameInfo),
	// sealed: members' nodes open it.
	Frame string `json:"frame,omitempty"`
	// A patch_cluster's changes to the cluster itself (cluster_update.go):
	// Rename and Visibility say what changes; Meta (public) or SealedMeta
	// (private, sealed with the wire key) is the cluster's metadata after
	// it; Verifier and TokenWrap are the new member token's, when the
	// cluster turns private.
	Rename     bool   `json:"rename,omitempty"`
	Visibility string `json:"visibility,omitempty"`
	Meta       *Meta  `json:"meta,omitempty"`
	SealedMeta string `json:"sealed_meta,omitempty"`
	Verifier   string `json:"verifier,omitempty"`
	TokenWrap  string `json:"token_wrap,omitempty"`
}

// memberTag is the signature domain of member actions.
const memberTag = "MESHCLUSTERMEMBER1\n"

// adminOnly reports whether only the admin key may sign a: every action
// but post creations and deletions by their author.
func (a *BoardAction) adminOnly() bool {
	return a.Op != ActPostCreate && !(a.Op == ActPostDelete && a.ByAuthor)
}

// openBoardAction decodes s and checks its signature against cluster cl:
// the admin key for admin actions; for member actions the member key of a
// private cluster, nothing on a public one.
func openBoardAction(s Signed, cl *Cluster) (*BoardAction, error) {
	var a BoardAction
	if err := json.Unmarshal([]byte(s.Body), &a); err != nil || a.V != 1 || a.ID != cl.ID {
		return nil, ErrBadAction.With("malformed board action")
	}
	switch {
	case a.adminOnly():
		if !s.verify(cl.adminPub(), actionTag) {
			return nil, ErrBadAction
		}
	case !cl.Public():
		if pub := cl.memberPub(); pub == nil || !s.verify(pub, memberTag) {
			return nil, ErrBadAction.With("the post action is not signed by the cluster's member key")
		}
	}
	return &a, nil
}

// boardActionTarget reads the cluster an action names, before it is
// verified.
func boardActionTarget(s Signed) (*BoardAction, error) {
	var a BoardAction
	if err := json.Unmarshal([]byte(s.Body), &a); err != nil || !strings.HasPrefix(a.ID, idPrefix) {
		return nil, ErrBadAction.With("malformed board action")
	}
	return &a, nil
}

// signer signs a request's board actions: the credential it presented,
// opened against the cluster.
type signer struct {
	cl     *Cluster
	admin  string // the admin token, if the credential is one
	member string // the member token it stands for (private clusters)
	seal   *sealer
}

func (g *signer) sign(a BoardAction) (Signed, error) {
	a.V, a.ID = 1, g.cl.ID
	switch {
	case a.adminOnly():
		return sign(adminKey(g.admin), actionTag, a)
	case g.cl.Public():
		body, err := json.Marshal(a)
		return Signed{Body: string(body)}, err
	}
	return sign(memberKey(g.cl.ID, g.member), memberTag, a)
}

// pack encodes v as an action's content: plain JSON on a public cluster,
// sealed for purpose on a private one.
func (g *signer) pack(a *BoardAction, purpose string, v any) {
	b, _ := json.Marshal(v)
	if g.seal == nil {
		a.Content = b
		return
	}
	a.Sealed = sealString(g.seal, purpose, b)
}

// boardKey is the key of board slug in the store.
func (g *signer) boardKey(slug string) string { return boardKeyOf(g.cl, g.member, slug) }

func boardKeyOf(cl *Cluster, member, slug string) string {
	if cl.Public() {
		return slug
	}
	m := hmac.New(sha256.New, derive(member, cl.ID, "board key", 32))
	m.Write([]byte(slug))
	return hex.EncodeToString(m.Sum(nil)[:16])
}

// unpack opens content (or sealed) into v.
func unpack(seal *sealer, purpose string, content json.RawMessage, sealed string, v any) error {
	b := []byte(content)
	if seal != nil {
		raw, err := base64.StdEncoding.DecodeString(sealed)
		if err != nil {
			return errUnseal
		}
		if b, err = seal.open(purpose, raw); err != nil {
			return err
		}
	}
	return json.Unmarshal(b, v)
}

// Sealing purposes of boards.
const (
	sealBoard = "board"
	sealPost  = "post"
	sealFrame = "board frame"
)

// Key layout of boards in the store (all in the catalog's state):
//
//	w/bb/<cluster>/<board key>      boardRow
//	w/bp/<cluster>/<post id>        postRow
//	w/bl/<cluster>/<board id>/<post id>  a board's posts
//	w/bx/<until ns 8B>/<cluster>/<post id>  expiry: a post with a TTL, or a tombstone
//	w/bt/<cluster>/<post id>        tombstone of a deleted post (until, ns): refuses a replay
//	w/bd/<cluster>/<board id>       a deleted board whose posts are still to purge
func boardRowKey(c, key string) []byte { return store.Key("w", "bb", c, key) }
func postRowKey(c, id string) []byte   { return store.Key("w", "bp", c, id) }
func listKey(c, bid, id string) []byte { return store.Key("w", "bl", c, bid, id) }
func expiryKey(until int64, c, id string) []byte {
	return store.Key("w", "bx", store.U64(uint64(until)), c, id)
}
func postTombKey(c, id string) []byte { return store.Key("w", "bt", c, id) }
func deadKey(c, bid string) []byte    { return store.Key("w", "bd", c, bid) }

// boardPrefixes are the boards' state prefixes (Catalog.State).
var boardPrefixes = [][]byte{[]byte("w/bb/"), []byte("w/bp/"), []byte("w/bl/"), []byte("w/bx/"), []byte("w/bt/"), []byte("w/bd/")}

// boardRow is a board as the catalog holds it.
type boardRow struct {
	Key string `json:"key"`
	// BID is the board's id: its creation's seq, so that the posts of a
	// deleted board are never taken for those of a new one of its slug.
	BID     string          `json:"bid"`
	Content json.RawMessage `json:"content,omitempty"` // boardContent
	Sealed  string          `json:"sealed,omitempty"`
	Created int64           `json:"created"` // ns, the entry's time
	Updated int64           `json:"updated"`
	Posts   int             `json:"posts"`
	Bytes   int64           `json:"bytes"`
}

// boardContent is what a board says of itself (spec 2.4).
type boardContent struct {
	Slug  string `json:"slug"`
	Name  string `json:"name"`
	Kind  string `json:"kind"`
	About string `json:"about"`
	Props Props  `json:"props"`
}

// postRow is a post as the catalog holds it.
type postRow struct {
	ID      string          `json:"id"`
	Board   string          `json:"board"` // the board's key
	BID     string          `json:"bid"`
	Content json.RawMessage `json:"content,omitempty"` // postContent
	Sealed  string          `json:"sealed,omitempty"`
	TTL     string          `json:"ttl"`
	Created int64           `json:"created"` // ns, the entry's time
	Until   int64           `json:"until"`   // ns; 0: forever
	Size    int             `json:"size"`
}

// postContent is what a post says (spec 2.4).
type postContent struct {
	Author string   `json:"author"`
	Title  string   `json:"title"`
	Body   string   `json:"body"`
	File   *FileRef `json:"file,omitempty"`
	Props  Props    `json:"props"`
}

// FileRef is a post's file: a reference, never stored.
type FileRef struct {
	URL  string `json:"url"`
	MIME string `json:"mime"`
}

// frameInfo is what a board frame shows of a private board or post.
type frameInfo struct {
	Slug  string `json:"slug"`
	Title string `json:"title,omitempty"`
}

// live reports whether post p is live at now (ns).
func (p *postRow) live(now int64) bool { return p.Until == 0 || p.Until > now }

// Errors of boards.
var (
	ErrBoardsOff     = httpx.E(http.StatusConflict, "boards_disabled", "boards are not enabled on this cluster (PATCH the cluster with boards_enabled: true)")
	ErrBoardNotFound = httpx.E(http.StatusNotFound, "board_not_found", "board not found")
	ErrBoardExists   = httpx.E(http.StatusConflict, "board_exists", "a board with this slug exists in the cluster")
	ErrPostNotFound  = httpx.E(http.StatusNotFound, "post_not_found", "post not found")
	ErrPostExists    = httpx.E(http.StatusConflict, "post_exists", "a post with this id exists or existed")
	ErrStale         = httpx.E(http.StatusConflict, "conflict", "the cluster changed while the request was made; retry")
	ErrNotAuthor     = httpx.E(http.StatusForbidden, "not_author", "only the post's author (?agent=) or the cluster's admin may delete it")
	ErrAgeGated      = httpx.E(http.StatusForbidden, "age_gated", "this board is for adults (entry.age_min >= 18): add adult=1 to the query")
	ErrTooLong       = httpx.E(http.StatusUnprocessableEntity, "post_max_chars", "the post is longer than the board's limits.post_max_chars")
	ErrNoMemberKey   = httpx.E(http.StatusConflict, "boards_unsupported", "this private cluster was created by an earlier release (no member key): it cannot have boards")
	ErrQuotaPosts    = httpx.E(http.StatusTooManyRequests, "quota_posts", "the live posts quota is reached")
	ErrQuotaBoards   = httpx.E(http.StatusTooManyRequests, "quota_boards", "the cluster has the most boards it may have")
	ErrQuotaBytes    = httpx.E(http.StatusRequestEntityTooLarge, "quota_bytes", "the posts' bytes quota is reached")
)
