package registryapi

import (
	"sync"
	"sync/atomic"
)

// rowCache holds decoded rows for reads, bounded in rows and in bytes: a
// row carries its agent's full card (up to 64 KiB), so a bound in rows
// alone would let a directory of large cards hold several times its
// store in memory. Rows are shared and immutable, and kept without their
// DHT record (Agent.Record, which repeats the card inside the agent's
// signed request): only the log's machines and the publisher read that,
// in their own transactions. The rows are spread over shards, each with
// its lock, so that reads on every core do not meet on one lock; changes
// take mu first.
type rowCache struct {
	shards [rowShards]rowShard
	// mu orders changes, and fills against commits (see fill): gen
	// counts commits.
	mu    sync.Mutex
	n     int   // rows held
	bytes int64 // rowCost of the rows held
	next  int   // the shard eviction starts at
	gen   atomic.Uint64
}

const rowShards = 64

type rowShard struct {
	mu   sync.RWMutex
	rows map[string]*cachedAgent
}

// cachedAgent is a row, and what reads derived from it once (its answer's
// parts, see agentjson.go): rows are immutable, a change makes a new one.
type cachedAgent struct {
	a     *Agent
	parts atomic.Pointer[viewParts]
	// reportless: the row's registration has no report (a feedback drops
	// the row from the cache).
	reportless atomic.Bool
	// names are the row's name and description (Agent.texts, which
	// decodes its full card).
	names atomic.Pointer[[2]string]
}

// texts is e's Agent.texts, read from its card once.
func (e *cachedAgent) texts() (name, desc string) {
	if t := e.names.Load(); t != nil {
		return t[0], t[1]
	}
	name, desc = e.a.texts()
	e.names.Store(&[2]string{name, desc})
	return name, desc
}

const (
	// maxCachedAgents and maxCachedBytes bound the read cache.
	maxCachedAgents = 100_000
	maxCachedBytes  = 32 << 20
	// rowOverhead is what a decoded row costs beyond its full card: its
	// strings, slices and times, and its place in the map.
	rowOverhead = 512
)

func newRowCache() *rowCache {
	c := &rowCache{}
	for i := range c.shards {
		c.shards[i].rows = map[string]*cachedAgent{}
	}
	return c
}

func rowCost(a *Agent) int64 { return int64(len(a.FullCard)) + rowOverhead }

func (c *rowCache) shard(id string) *rowShard {
	h := uint32(2166136261) // FNV-1a
	for i := 0; i < len(id); i++ {
		h = (h ^ uint32(id[i])) * 16777619
	}
	return &c.shards[h%rowShards]
}

func (c *rowCache) get(id string) (*cachedAgent, bool) {
	sh := c.shard(id)
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	e, ok := sh.rows[id]
	return e, ok
}

// fill keeps e, read when the cache's generation was gen, unless a commit
// happened since: drop bumps the generation after dropping, so a stale
// row never lands.
func (c *rowCache) fill(gen uint64, e *cachedAgent) {
	cost := rowCost(e.a)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen.Load() != gen {
		return
	}
	c.removeLocked(e.a.ID)
	for c.n > 0 && (c.n >= maxCachedAgents || c.bytes+cost > maxCachedBytes) {
		c.evictLocked()
	}
	sh := c.shard(e.a.ID)
	sh.mu.Lock()
	sh.rows[e.a.ID] = e
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
		for id, e := range sh.rows {
			delete(sh.rows, id)
			sh.mu.Unlock()
			c.n--
			c.bytes -= rowCost(e.a)
			return
		}
		sh.mu.Unlock()
	}
}

func (c *rowCache) removeLocked(id string) {
	sh := c.shard(id)
	sh.mu.Lock()
	e, ok := sh.rows[id]
	delete(sh.rows, id)
	sh.mu.Unlock()
	if ok {
		c.n--
		c.bytes -= rowCost(e.a)
	}
}

// reset forgets every row.
func (c *rowCache) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		clear(sh.rows)
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
