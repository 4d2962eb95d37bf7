package registryapi

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// rowCache holds decoded rows for reads, bounded in rows and in bytes.
// Rows are shared and immutable, and kept without their DHT record
// (Agent.Record, which repeats the card inside the agent's signed
// request) and without their full card (Agent.FullCard, up to 64 KiB):
// the reads served from the cache (an agent's record, search results,
// tokens, heartbeats) need neither, and the few that need the card
// (the public address, the mirrored card) read the row from the store
// (Directory.Lookup), so a directory of large cards holds each once, as
// stored, not a decoded copy besides. The rows are spread over shards,
// each with its lock, so that reads on every core do not meet on one
// lock; changes take mu first.
type rowCache struct {
	seed   maphash.Seed // of the shards' hash
	shards [rowShards]rowShard
	// mu orders changes, and fills against commits (see fill): gen
	// counts commits.
	mu       sync.Mutex
	n        int   // rows held
	bytes    int64 // rowCost of the rows held
	maxBytes int64
	next     int // the shard eviction starts at
	gen      atomic.Uint64
}

const rowShards = 64

type rowShard struct {
	mu   sync.RWMutex
	rows rowTable
	_    [8]byte // 64 bytes in all: shards do not share a cache line
}

// cachedAgent is a row, and what reads derived from it once (its answer's
// parts, see agentjson.go): rows are immutable, a change makes a new one.
type cachedAgent struct {
	// view is what a read of the row answers from, encoded as the row
	// enters the cache and kept in it, first: a read touches it and
	// reportless, lines that follow one another, and not the row (a
	// pointer more to follow is a cold line more). The shard's map is
	// keyed by view.id, which lies in view.text: the key a lookup compares
	// is on the line the answer then begins with.
	view viewParts
	// reportless: the row's registration has no report (a feedback drops
	// the row from the cache).
	reportless atomic.Bool
	a          *Agent // without its full card
	// name and desc are the row's Agent.texts, read from its full card
	// before it was left out; card tells that it has one.
	name, desc string
	card       bool
	cost       int64 // what the cache counts it for (rowCost)
}

// rowOf is a with what reads derive from it.
func rowOf(a *Agent) *cachedAgent { return &cachedAgent{a: a, view: encodeParts(a)} }

// cachedOf is row a as the cache keeps it: a loses its full card. rest is
// the bytes of the stored row that a keeps (all but its record and card).
func cachedOf(a *Agent, rest int) *cachedAgent {
	card := a.FullCard != nil
	name, desc := a.texts()
	a.FullCard = nil
	e := rowOf(a)
	e.card, e.name, e.desc = card, name, desc
	e.cost = rowCost(rest, e)
	return e
}

// texts is e's Agent.texts, as its full card gave them.
func (e *cachedAgent) texts() (name, desc string) { return e.name, e.desc }

const (
	// maxCachedAgents bounds the read cache in rows; DefaultReadCacheBytes
	// is its bound in bytes unless configured (SetReadCacheBytes).
	maxCachedAgents       = 100_000
	DefaultReadCacheBytes = 32 << 20
	// rowOverhead is what a decoded row costs beyond its bytes: its
	// strings, slices and times, and its place in the map.
	rowOverhead = 512
)

func newRowCache(maxBytes int64) *rowCache {
	return &rowCache{maxBytes: maxBytes, seed: maphash.MakeSeed()}
}

// rowCost is what a row costs the cache: its stored bytes but its record
// and card (rest) twice, decoded and in its answer's parts, and its texts.
func rowCost(rest int, e *cachedAgent) int64 {
	return int64(2*rest+len(e.name)+len(e.desc)) + rowOverhead
}

// shard is the shard of id and id's hash in its rowTable (never 0).
func (c *rowCache) shard(id string) (*rowShard, uint64) {
	h := maphash.String(c.seed, id)
	return &c.shards[h%rowShards], max(h/rowShards, 1)
}

func (c *rowCache) get(id string) (*cachedAgent, bool) {
	sh, h := c.shard(id)
	sh.mu.RLock()
	e := sh.rows.get(h, id)
	sh.mu.RUnlock()
	return e, e != nil
}

// fill keeps e, read when the cache's generation was gen, unless a commit
// happened since: drop bumps the generation after dropping, so a stale
// row never lands.
func (c *rowCache) fill(gen uint64, e *cachedAgent) {
	cost := e.cost
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen.Load() != gen {
		return
	}
	c.removeLocked(e.a.ID)
	for c.n > 0 && c.over(cost) {
		c.evictLocked()
	}
	sh, h := c.shard(e.a.ID)
	sh.mu.Lock()
	sh.rows.put(h, e)
	sh.mu.Unlock()
	c.n++
	c.bytes += cost
}

// evictLocked drops an arbitrary row, from the next shard that holds one.
func (c *rowCache) evictLocked() {
	for range rowShards {
		sh := &c.shards[c.next]
		c.next = (c.next + 1) % rowShards
		sh.mu.Lock()
		if i, ok := sh.rows.any(); ok {
			e := sh.rows.removeAt(i)
			sh.mu.Unlock()
			c.n--
			c.bytes -= e.cost
			return
		}
		sh.mu.Unlock()
	}
}

func (c *rowCache) removeLocked(id string) {
	sh, h := c.shard(id)
	sh.mu.Lock()
	e := sh.rows.remove(h, id)
	sh.mu.Unlock()
	if e != nil {
		c.n--
		c.bytes -= e.cost
	}
}

// SetReadCacheBytes bounds the read cache at maxBytes of rows (rowCost;
// 0: the bound in rows alone), from the next row it takes.
func (d *Directory) SetReadCacheBytes(maxBytes int64) {
	d.cache.mu.Lock()
	defer d.cache.mu.Unlock()
	d.cache.maxBytes = maxBytes
}

// over reports whether the cache would be past a bound with a row of cost
// more.
func (c *rowCache) over(cost int64) bool {
	return c.n >= maxCachedAgents || c.maxBytes > 0 && c.bytes+cost > c.maxBytes
}

// reset forgets every row.
func (c *rowCache) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		sh.rows = rowTable{}
		sh.mu.Unlock()
	}
	c.n, c.bytes = 0, 0
	c.gen.Add(1)
}

// drop forgets the rows of ids.
func (c *rowCache) drop(ids []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ids {
		c.removeLocked(id)
	}
	c.gen.Add(1)
}
