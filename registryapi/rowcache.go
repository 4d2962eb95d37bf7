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
// in their own transactions.
type rowCache struct {
	// mu also orders fills against commits (see fill): gen counts commits.
	mu    sync.RWMutex
	rows  map[string]*Agent
	bytes int64 // rowCost of the rows held
	gen   atomic.Uint64
}

const (
	// maxCachedAgents and maxCachedBytes bound the read cache.
	maxCachedAgents = 100_000
	maxCachedBytes  = 32 << 20
	// rowOverhead is what a decoded row costs beyond its full card: its
	// strings, slices and times, and its place in the map.
	rowOverhead = 512
)

func newRowCache() *rowCache { return &rowCache{rows: map[string]*Agent{}} }

func rowCost(a *Agent) int64 { return int64(len(a.FullCard)) + rowOverhead }

func (c *rowCache) get(id string) (*Agent, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	a, ok := c.rows[id]
	return a, ok
}

// fill keeps a, read when the cache's generation was gen, unless a commit
// happened since: drop bumps the generation after dropping, so a stale
// row never lands.
func (c *rowCache) fill(gen uint64, a *Agent) {
	cost := rowCost(a)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen.Load() != gen {
		return
	}
	for k, held := range c.rows { // evict arbitrary rows until a fits
		if len(c.rows) < maxCachedAgents && c.bytes+cost <= maxCachedBytes {
			break
		}
		delete(c.rows, k)
		c.bytes -= rowCost(held)
	}
	if old, ok := c.rows[a.ID]; ok {
		c.bytes -= rowCost(old)
	}
	c.rows[a.ID] = a
	c.bytes += cost
}

// reset forgets every row.
func (c *rowCache) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.rows)
	c.bytes = 0
	c.gen.Add(1)
}

// drop forgets the rows of ids.
func (c *rowCache) drop(ids []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ids {
		if a, ok := c.rows[id]; ok {
			delete(c.rows, id)
			c.bytes -= rowCost(a)
		}
	}
	c.gen.Add(1)
}
