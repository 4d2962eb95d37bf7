package wall

import (
	"slices"
	"sync"

	"github.com/agentmesh/mesh/internal/cmdlog"
	"github.com/agentmesh/mesh/store"
)

// Each board read on a node gets an index in memory: its live posts'
// times and own props, in time order, and a GeoIndex of those with a
// location of their own. It is built from the store on the board's first
// read and kept current from the committed log entries (Catalog.Committed);
// a snapshot install drops every index. A private board's is built only
// when a member's request (with the token) reads it: it keeps the wire key
// that opens the posts committed after.

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
	order []*idxPost // by (created, id)
	geo   *GeoIndex  // the posts with a location of their own
}

func newBoardIdx(bid string, seal *sealer) *boardIdx {
	return &boardIdx{bid: bid, seal: seal, posts: map[string]*idxPost{}, geo: NewGeoIndex()}
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

// boardIndexes are a node's board indexes.
type boardIndexes struct {
	mu     sync.Mutex
	boards map[boardRef]*boardIdx
}

func (x *boardIndexes) reset() {
	x.mu.Lock()
	x.boards = map[boardRef]*boardIdx{}
	x.mu.Unlock()
}

func (x *boardIndexes) drop(ref boardRef) {
	x.mu.Lock()
	delete(x.boards, ref)
	x.mu.Unlock()
}

func (x *boardIndexes) dropCluster(id string) {
	x.mu.Lock()
	for ref := range x.boards {
		if ref.cluster == id {
			delete(x.boards, ref)
		}
	}
	x.mu.Unlock()
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

// boardIndex returns the index of board row of cluster cl (a private
// cluster's opened with seal), built from the store on first use, locked
// for reading. A commit meanwhile waits for the build, then applies its
// change to it (changes are idempotent).
func (c *Catalog) boardIndex(cl string, row *boardRow, seal *sealer) (*boardIdx, error) {
	ref := boardRef{cl, row.Key}
	x := &c.index
	x.mu.Lock()
	b := x.boards[ref]
	if b == nil || b.bid != row.BID {
		b = newBoardIdx(row.BID, seal)
		b.mu.Lock()
		x.boards[ref] = b
		x.mu.Unlock()
		err := c.db.View(func(tx *store.Txn) error { return fillIndex(tx, b, cl) })
		b.mu.Unlock()
		if err != nil {
			x.drop(ref)
			return nil, err
		}
	} else {
		x.mu.Unlock()
	}
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
	var pc postContent
	if err := unpack(seal, sealPost, post.Content, post.Sealed, &pc); err != nil {
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
	}
	c.tell(boardEventOf(a))
}

func (c *Catalog) indexPost(ref boardRef, id string) {
	b := c.index.loaded(ref)
	if b == nil {
		return
	}
	defer b.mu.Unlock()
	var post *postRow
	err := c.db.View(func(tx *store.Txn) error {
		var err error
		post, err = getPost(tx, ref.cluster, id)
		return err
	})
	if err != nil {
		return
	}
	if p, err := indexed(post, b.seal); err == nil && post.BID == b.bid {
		b.put(p)
	}
}

func (c *Catalog) unindex(ref boardRef, id string) {
	if b := c.index.loaded(ref); b != nil {
		b.remove(id)
		b.mu.Unlock()
	}
}
