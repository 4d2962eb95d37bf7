package wall

import (
	"container/list"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/agentmesh/mesh/internal/cmdlog"
	"github.com/agentmesh/mesh/store"
)

// Each board read on a node gets an index in memory: its live posts'
// times and own props, in time order, and a GeoIndex of those with a
// location of their own. It is built from the store on the board's first
// read and kept current from the committed log entries (Catalog.Committed);
// a snapshot install drops every index. A private board's is built only
// when a member's request (with the token) reads it: it keeps the wire key
// that opens the posts committed after. The indexes are bounded: past
// maxBoardIndexes of them, or past the node's limit of posts held in all
// (Catalog.SetIndexLimit), the least recently read go (with their keys),
// to be built again if read again.

// idxPost is a post as an index holds it.
type idxPost struct {
	id             string
	created, until int64
	props          Props // the post's own (where, lang)
}

func (p *idxPost) before(q *idxPost) bool {
	return p.created < q.created || p.created == q.created && p.id < q.id
}

// boardIdx is one board's posts.
type boardIdx struct {
	bid   string  // the board's id: a board made anew under its slug is another
	seal  *sealer // opens a private board's posts (nil: a public one's)
	mu    sync.RWMutex
	posts map[string]*idxPost
	order []*idxPost   // by (created, id)
	geo   *GeoIndex    // the posts with a location of their own
	size  atomic.Int64 // len(posts), read without mu

	ref  boardRef
	elem *list.Element // in boardIndexes.lru; guarded by boardIndexes.mu
}

func newBoardIdx(ref boardRef, bid string, seal *sealer) *boardIdx {
	return &boardIdx{ref: ref, bid: bid, seal: seal, posts: map[string]*idxPost{}, geo: NewGeoIndex()}
}

// put adds or replaces p; the caller holds mu.
func (b *boardIdx) put(p *idxPost) {
	b.remove(p.id)
	b.posts[p.id] = p
	i, _ := slices.BinarySearchFunc(b.order, p, cmpPost)
	b.order = slices.Insert(b.order, i, p)
	if w := p.props.Where; w != nil && !w.None {
		b.geo.Put(p.id, w.Lat, w.Lon)
	}
	b.size.Store(int64(len(b.posts)))
}

// remove drops post id; the caller holds mu.
func (b *boardIdx) remove(id string) {
	p := b.posts[id]
	if p == nil {
		return
	}
	delete(b.posts, id)
	if i, ok := slices.BinarySearchFunc(b.order, p, cmpPost); ok {
		b.order = slices.Delete(b.order, i, i+1)
	}
	b.geo.Delete(id)
	b.size.Store(int64(len(b.posts)))
}

func cmpPost(a, b *idxPost) int {
	switch {
	case a.before(b):
		return -1
	case b.before(a):
		return 1
	}
	return 0
}

// boardRef names a board: its cluster and key.
type boardRef struct{ cluster, key string }

// maxBoardIndexes bounds the board indexes a node holds, whatever their
// posts (an empty board's index still takes some memory).
const maxBoardIndexes = 4096

// DefaultIndexPosts is node.DefaultConfig's bound of the posts a node's
// board indexes hold in all: about 300 MB (docs/operations.md).
const DefaultIndexPosts = 1_000_000

// boardIndexes are a node's board indexes, the most recently read first.
type boardIndexes struct {
	mu     sync.Mutex
	boards map[boardRef]*boardIdx
	lru    list.List // of *boardIdx
	limit  int64     // posts held in all; 0: no bound
}

func (x *boardIndexes) reset() {
	x.mu.Lock()
	x.boards = map[boardRef]*boardIdx{}
	x.lru.Init()
	x.mu.Unlock()
}

func (x *boardIndexes) drop(ref boardRef) {
	x.mu.Lock()
	x.remove(x.boards[ref])
	x.mu.Unlock()
}

func (x *boardIndexes) dropCluster(id string) {
	x.mu.Lock()
	for ref, b := range x.boards {
		if ref.cluster == id {
			x.remove(b)
		}
	}
	x.mu.Unlock()
}

// add makes b the index of its board, the most recently read; the caller
// holds mu.
func (x *boardIndexes) add(b *boardIdx) {
	x.remove(x.boards[b.ref])
	x.boards[b.ref] = b
	b.elem = x.lru.PushFront(b)
}

// remove drops b (nil: nothing); the caller holds mu.
func (x *boardIndexes) remove(b *boardIdx) {
	if b == nil || x.boards[b.ref] != b {
		return
	}
	delete(x.boards, b.ref)
	x.lru.Remove(b.elem)
}

// trim drops the least recently read indexes but keep while there are
// more than maxBoardIndexes or they hold more than limit posts.
func (x *boardIndexes) trim(keep *boardIdx) {
	x.mu.Lock()
	defer x.mu.Unlock()
	var held int64
	for e := x.lru.Front(); e != nil; e = e.Next() {
		held += e.Value.(*boardIdx).size.Load()
	}
	for e := x.lru.Back(); e != nil && (x.lru.Len() > maxBoardIndexes || x.limit > 0 && held > x.limit); {
		b, prev := e.Value.(*boardIdx), e.Prev()
		if b != keep {
			held -= b.size.Load()
			x.remove(b)
		}
		e = prev
	}
}

// loaded returns the index of ref if one was built, locked for writing.
func (x *boardIndexes) loaded(ref boardRef) *boardIdx {
	x.mu.Lock()
	b := x.boards[ref]
	x.mu.Unlock()
	if b != nil {
		b.mu.Lock()
	}
	return b
}

// SetIndexLimit bounds the posts this node's board indexes hold in all
// (0: no bound); set before the node serves.
func (c *Catalog) SetIndexLimit(posts int) { c.index.limit = int64(posts) }

// boardIndex returns the index of board row of cluster cl (a private
// cluster's opened with seal), built from the store on first use, locked
// for reading. A commit meanwhile waits for the build, then applies its
// change to it (changes are idempotent).
func (c *Catalog) boardIndex(cl string, row *boardRow, seal *sealer) (*boardIdx, error) {
	ref := boardRef{cl, row.Key}
	x := &c.index
	x.mu.Lock()
	b := x.boards[ref]
	if b != nil && b.bid == row.BID {
		x.lru.MoveToFront(b.elem)
		x.mu.Unlock()
		b.mu.RLock()
		return b, nil
	}
	b = newBoardIdx(ref, row.BID, seal)
	b.mu.Lock()
	x.add(b)
	x.mu.Unlock()
	err := c.db.View(func(tx *store.Txn) error { return fillIndex(tx, b, cl) })
	b.mu.Unlock()
	if err != nil {
		x.drop(ref)
		return nil, err
	}
	x.trim(b)
	b.mu.RLock()
	return b, nil
}

// fillIndex adds the posts of b's board of cluster c to b.
func fillIndex(tx *store.Txn, b *boardIdx, c string) error {
	prefix := store.Key("w", "bl", c, b.bid, "")
	return tx.Scan(prefix, nil, func(k, _ []byte) (bool, error) {
		post, err := getPost(tx, c, string(k[len(prefix):]))
		if err != nil {
			return false, err
		}
		if p, err := indexed(post, b.seal); err == nil {
			b.put(p)
		}
		return true, nil
	})
}

// indexed is post as an index holds it.
func indexed(post *postRow, seal *sealer) (*idxPost, error) {
	pc, err := openPost(seal, post)
	if err != nil {
		return nil, err
	}
	return &idxPost{id: post.ID, created: post.Created, until: post.Until, props: pc.Props}, nil
}

// boardCommitted keeps the indexes current and tells the listeners of a
// committed board entry.
func (c *Catalog) boardCommitted(e *cmdlog.Entry, op *Op) {
	for _, ref := range op.ExpirePosts {
		if ref.Board != "" {
			c.unindex(boardRef{ref.C, ref.Board}, ref.Post)
		}
	}
	if op.Board == nil {
		return
	}
	a, err := boardActionTarget(*op.Board)
	if err != nil {
		return
	}
	ref := boardRef{a.ID, a.Board}
	switch a.Op {
	case ActBoardCreate, ActBoardDelete:
		c.index.drop(ref)
	case ActPostCreate:
		c.indexPost(ref, a.Post)
	case ActPostDelete:
		c.unindex(ref, a.Post)
	case ActPatchCluster:
		c.tellUpdate(a)
	}
	c.tell(boardEventOf(a))
}

func (c *Catalog) indexPost(ref boardRef, id string) {
	b := c.index.loaded(ref)
	if b == nil {
		return
	}
	var post *postRow
	err := c.db.View(func(tx *store.Txn) error {
		var err error
		post, err = getPost(tx, ref.cluster, id)
		return err
	})
	if err == nil && post.BID == b.bid {
		if p, err := indexed(post, b.seal); err == nil {
			b.put(p)
		}
	}
	b.mu.Unlock()
	if c.index.limit > 0 {
		c.index.trim(b)
	}
}

func (c *Catalog) unindex(ref boardRef, id string) {
	if b := c.index.loaded(ref); b != nil {
		b.remove(id)
		b.mu.Unlock()
	}
}
