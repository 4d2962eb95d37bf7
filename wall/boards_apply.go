package wall

import (
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/agentmesh/mesh/internal/cmdlog"
	"github.com/agentmesh/mesh/internal/httpx"
	"github.com/agentmesh/mesh/store"
)

// Quota is what the directory lets a cluster's boards hold, stamped in
// every board write it sequences (Service.Proposed), so that every node
// applies the write alike whatever its own settings. Zero means no limit.
type Quota struct {
	Boards       int   `json:"boards,omitempty"`        // boards per cluster
	ClusterPosts int   `json:"cluster_posts,omitempty"` // live posts per cluster
	ClusterBytes int64 `json:"cluster_bytes,omitempty"` // bytes of live posts per cluster
	BoardPosts   int   `json:"board_posts,omitempty"`   // live posts per board
	BoardBytes   int64 `json:"board_bytes,omitempty"`   // bytes of live posts per board
}

// DefaultQuota is node.DefaultConfig's Quota: a hundred boards per
// cluster, a hundred thousand live posts (256 MiB) per board, and a
// quarter million (1 GiB) per cluster.
var DefaultQuota = Quota{Boards: 100, BoardPosts: 100_000, BoardBytes: 256 << 20, ClusterPosts: 250_000, ClusterBytes: 1 << 30}

// Usage is what a cluster's boards hold.
type Usage struct {
	Boards int   `json:"boards,omitempty"`
	Posts  int   `json:"posts,omitempty"`
	Bytes  int64 `json:"bytes,omitempty"`
}

// replayWindow bounds how far a post creation's own time may be from the
// entry's: a creation replayed later is refused, and a deleted post's
// tombstone outlives the window, so that it is refused before.
const replayWindow = 10 * time.Minute

// applyBoard applies a board action: checked against the cluster's record
// (signature, Rev), then its operation. Apply reads only the entry (its
// time, its seq) and the state.
func applyBoard(tx *store.Txn, e *cmdlog.Entry, s Signed, q *Quota, hold int64) (Result, error) {
	target, err := boardActionTarget(s)
	if err != nil {
		return Result{}, err
	}
	cl, err := getCluster(tx, target.ID)
	if err != nil {
		return Result{}, err
	}
	a, err := openBoardAction(s, cl)
	if err != nil {
		return Result{}, err
	}
	if a.adminOnly() {
		if a.Rev != cl.Rev {
			return Result{}, ErrStale
		}
		cl.Rev++
	}
	if a.Op != ActPatchCluster && !cl.Boards {
		return Result{}, ErrBoardsOff
	}
	if q == nil {
		q = &Quota{}
	}
	b := boardTx{tx: tx, e: e, cl: cl, a: a, q: q, hold: hold}
	res, err := b.apply()
	if err != nil {
		return Result{}, err
	}
	res.Cluster = cl
	return res, tx.SetJSON(clusterKey(cl.ID), cl)
}

// boardTx is one board action being applied.
type boardTx struct {
	tx   *store.Txn
	e    *cmdlog.Entry
	cl   *Cluster
	a    *BoardAction
	q    *Quota
	hold int64 // Op.SlugHold
}

func (b *boardTx) apply() (Result, error) {
	switch b.a.Op {
	case ActPatchCluster:
		return b.patchCluster()
	case ActBoardCreate:
		return b.createBoard()
	case ActBoardPatch:
		return b.patchBoard()
	case ActBoardDelete:
		return b.deleteBoard()
	case ActPostCreate:
		return b.createPost()
	case ActPostDelete:
		return b.deletePost()
	}
	return Result{}, httpx.ErrInvalid.With("unknown board action %q", b.a.Op)
}

func (b *boardTx) patchCluster() (Result, error) {
	moved, err := b.updateCluster()
	if err != nil {
		return Result{}, err
	}
	if b.a.Boards != nil {
		b.cl.Boards = *b.a.Boards
	}
	switch {
	case b.cl.Public() && b.a.Props != nil:
		if _, err := storedProps(b.a.Props); err != nil {
			return Result{}, err
		}
		b.cl.Props = b.a.Props
	case !b.cl.Public() && b.a.Sealed != "":
		b.cl.SealedProps = b.a.Sealed
	}
	return Result{Moved: moved}, nil
}

// storedProps decodes props as stored: every value checked, nulls refused.
func storedProps(raw json.RawMessage) (Props, error) {
	patch, err := DecodeProps(raw, ClusterProps)
	if err != nil || patch.ClearAll || len(patch.Clear) > 0 {
		return Props{}, ErrBadAction.With("malformed props in a board action")
	}
	return patch.Set, nil
}

// checkContent checks a public action's content as the handlers do (a
// private one's is sealed: only its size is bounded, by Proposed).
func (b *boardTx) checkContent(v interface{ validate() error }) error {
	if !b.cl.Public() {
		if b.a.Sealed == "" || b.a.Content != nil {
			return ErrBadAction.With("a private cluster's board action carries sealed content")
		}
		return nil
	}
	if err := json.Unmarshal(b.a.Content, v); err != nil {
		return ErrBadAction.With("malformed content in a board action")
	}
	return v.validate()
}

func (b *boardTx) getBoard() (*boardRow, error) {
	var row boardRow
	err := b.tx.GetJSON(boardRowKey(b.cl.ID, b.a.Board), &row)
	if errors.Is(err, store.ErrNotFound) {
		return nil, ErrBoardNotFound
	}
	return &row, err
}

func (b *boardTx) createBoard() (Result, error) {
	var bc boardContent
	if err := b.checkContent(&bc); err != nil {
		return Result{}, err
	}
	if b.cl.Public() && bc.Slug != b.a.Board {
		return Result{}, ErrBadAction.With("a board's key is its slug")
	}
	if _, err := b.getBoard(); err == nil {
		return Result{}, ErrBoardExists
	} else if !errors.Is(err, ErrBoardNotFound) {
		return Result{}, err
	}
	if b.q.Boards > 0 && b.cl.Usage.Boards >= b.q.Boards {
		return Result{}, ErrQuotaBoards.With("a cluster has at most %d boards", b.q.Boards)
	}
	b.cl.Usage.Boards++
	row := &boardRow{Key: b.a.Board, BID: strconv.FormatUint(b.e.Seq, 36), Content: b.a.Content, Sealed: b.a.Sealed,
		Created: b.e.At, Updated: b.e.At}
	return Result{Board: row}, b.tx.SetJSON(boardRowKey(b.cl.ID, row.Key), row)
}

func (b *boardTx) patchBoard() (Result, error) {
	row, err := b.getBoard()
	if err != nil {
		return Result{}, err
	}
	var bc boardContent
	if err := b.checkContent(&bc); err != nil {
		return Result{}, err
	}
	if b.cl.Public() && bc.Slug != row.Key {
		return Result{}, ErrBadAction.With("a board's slug does not change")
	}
	row.Content, row.Sealed, row.Updated = b.a.Content, b.a.Sealed, b.e.At
	return Result{Board: row}, b.tx.SetJSON(boardRowKey(b.cl.ID, row.Key), row)
}

// deleteBoard drops the board's row at once; its posts are purged by the
// directory's sweeps (a board may hold more posts than one transaction
// takes), and never read meanwhile: a post whose board is gone is gone.
func (b *boardTx) deleteBoard() (Result, error) {
	row, err := b.getBoard()
	if err != nil {
		return Result{}, err
	}
	return Result{Board: row}, dropBoard(b.tx, b.cl, row)
}

// The board's posts count in the cluster's usage until the purge drops
// them: deleting a full board and making another never holds more on
// disk than the cluster's quotas.
func dropBoard(tx *store.Txn, cl *Cluster, row *boardRow) error {
	cl.Usage.Boards--
	if err := tx.Delete(boardRowKey(cl.ID, row.Key)); err != nil {
		return err
	}
	if row.Posts == 0 {
		return nil
	}
	return tx.Set(deadKey(cl.ID, row.BID), nil)
}

// dropBoards drops every board of a cluster being removed.
func dropBoards(tx *store.Txn, id string) error {
	var rows []boardRow
	err := tx.Scan(store.Key("w", "bb", id, ""), nil, func(_, v []byte) (bool, error) {
		var row boardRow
		if err := json.Unmarshal(v, &row); err != nil {
			return false, err
		}
		rows = append(rows, row)
		return true, nil
	})
	if err != nil {
		return err
	}
	cl := &Cluster{Record: Record{ID: id}}
	for i := range rows {
		if err := dropBoard(tx, cl, &rows[i]); err != nil {
			return err
		}
	}
	return nil
}

func (b *boardTx) createPost() (Result, error) {
	a := b.a
	board, err := b.getBoard()
	if err != nil {
		return Result{}, err
	}
	ttl, ok := ttls[a.TTL]
	switch {
	case !ok:
		return Result{}, ErrBadAction.With("unknown ttl %q", a.TTL)
	case !validPostID(a.Post):
		return Result{}, ErrBadAction.With("malformed post id")
	case absDuration(time.Duration(b.e.At-a.At*int64(time.Millisecond))) > replayWindow:
		return Result{}, ErrClockSkew
	}
	var pc postContent
	if err := b.checkContent(&pc); err != nil {
		return Result{}, err
	}
	for _, k := range [][]byte{postRowKey(b.cl.ID, a.Post), postTombKey(b.cl.ID, a.Post)} {
		if has, err := b.tx.Has(k); err != nil || has {
			return Result{}, errors.Join(err, ErrPostExists)
		}
	}
	size := len(a.Content) + len(a.Sealed)
	if err := b.checkQuota(board, size); err != nil {
		return Result{}, err
	}
	post := &postRow{ID: a.Post, Board: board.Key, BID: board.BID, Content: a.Content, Sealed: a.Sealed, TTL: a.TTL,
		Created: b.e.At, Size: size}
	if ttl > 0 {
		post.Until = b.e.At + int64(ttl)
	}
	board.Posts++
	board.Bytes += int64(size)
	b.cl.Usage.Posts++
	b.cl.Usage.Bytes += int64(size)
	return Result{Post: post, Board: board}, b.writePost(board, post)
}

func (b *boardTx) checkQuota(board *boardRow, size int) error {
	q := b.q
	switch {
	case q.BoardPosts > 0 && board.Posts >= q.BoardPosts:
		return ErrQuotaPosts.With("a board holds at most %d live posts", q.BoardPosts)
	case q.ClusterPosts > 0 && b.cl.Usage.Posts >= q.ClusterPosts:
		return ErrQuotaPosts.With("a cluster holds at most %d live posts", q.ClusterPosts)
	case q.BoardBytes > 0 && board.Bytes+int64(size) > q.BoardBytes:
		return ErrQuotaBytes.With("a board holds at most %d bytes of live posts", q.BoardBytes)
	case q.ClusterBytes > 0 && b.cl.Usage.Bytes+int64(size) > q.ClusterBytes:
		return ErrQuotaBytes.With("a cluster holds at most %d bytes of live posts", q.ClusterBytes)
	}
	return nil
}

func (b *boardTx) writePost(board *boardRow, post *postRow) error {
	c := b.cl.ID
	if err := b.tx.SetJSON(postRowKey(c, post.ID), post); err != nil {
		return err
	}
	if err := b.tx.Set(listKey(c, post.BID, post.ID), nil); err != nil {
		return err
	}
	if post.Until > 0 {
		if err := b.tx.Set(expiryKey(post.Until, c, post.ID), []byte(post.Board)); err != nil {
			return err
		}
	}
	return b.tx.SetJSON(boardRowKey(c, board.Key), board)
}

func (b *boardTx) deletePost() (Result, error) {
	board, err := b.getBoard()
	if err != nil {
		return Result{}, err
	}
	post, err := getPost(b.tx, b.cl.ID, b.a.Post)
	if err != nil || post.BID != board.BID {
		return Result{}, errors.Join(err, ErrPostNotFound)
	}
	if b.a.ByAuthor && b.cl.Public() {
		var pc postContent
		if err := json.Unmarshal(post.Content, &pc); err != nil || pc.Author != b.a.Agent {
			return Result{}, ErrNotAuthor
		}
	}
	if err := removePost(b.tx, b.cl.ID, b.cl, board, post); err != nil {
		return Result{}, err
	}
	// A copy of the creation is refused by the window from its own time,
	// which may be up to the window past the entry's (Created): the
	// tombstone outlives both.
	until := max(b.e.At, post.Created+int64(replayWindow)) + int64(replayWindow) + int64(time.Second)
	if err := b.tx.Set(postTombKey(b.cl.ID, post.ID), []byte(strconv.FormatInt(until, 10))); err != nil {
		return Result{}, err
	}
	return Result{Post: post, Board: board}, b.tx.Set(expiryKey(until, b.cl.ID, post.ID), nil)
}

// removePost deletes post of cluster c and its keys; cl and board, when
// set, stop counting it (board is written back, cl is the caller's to
// write).
func removePost(tx *store.Txn, c string, cl *Cluster, board *boardRow, post *postRow) error {
	keys := [][]byte{postRowKey(c, post.ID), listKey(c, post.BID, post.ID)}
	if post.Until > 0 {
		keys = append(keys, expiryKey(post.Until, c, post.ID))
	}
	for _, k := range keys {
		if err := tx.Delete(k); err != nil {
			return err
		}
	}
	if cl != nil {
		cl.Usage.Posts--
		cl.Usage.Bytes -= int64(post.Size)
	}
	if board == nil {
		return nil
	}
	board.Posts--
	board.Bytes -= int64(post.Size)
	return tx.SetJSON(boardRowKey(c, board.Key), board)
}

func getPost(tx *store.Txn, c, id string) (*postRow, error) {
	var p postRow
	err := tx.GetJSON(postRowKey(c, id), &p)
	if errors.Is(err, store.ErrNotFound) {
		return nil, ErrPostNotFound
	}
	return &p, err
}

func absDuration(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}
