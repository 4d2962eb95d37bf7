package quorum

import (
	"sync"

	"github.com/hashicorp/raft"
)

// recentLogs keeps the entries this member stored last, for Raft to read
// back from memory: a leader reads each entry again for every follower it
// sends it to, a follower each entry it applies, most of them just after
// they were stored. Bounded by count and bytes (an entry may be 2 MiB),
// oldest out first; a deletion from the log empties it (hashicorp's
// raft.LogCache, which holds a count of entries whatever their size, does
// the same).
type recentLogs struct {
	mu    sync.RWMutex
	logs  map[uint64]*raft.Log
	order []uint64 // the indexes held, oldest first
	bytes int
}

const (
	recentCount = 256
	recentBytes = 4 << 20
)

// get is entry i, if held.
func (c *recentLogs) get(i uint64) (*raft.Log, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	l, ok := c.logs[i]
	return l, ok
}

// add holds logs, just stored, dropping the oldest past the bounds.
func (c *recentLogs) add(logs []*raft.Log) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.logs == nil {
		c.logs = map[uint64]*raft.Log{}
	}
	for _, l := range logs {
		if old, ok := c.logs[l.Index]; ok { // stored again: replaced
			c.bytes -= logSize(old)
		} else {
			c.order = append(c.order, l.Index)
		}
		c.logs[l.Index] = l
		c.bytes += logSize(l)
	}
	for len(c.order) > 0 && (len(c.order) > recentCount || c.bytes > recentBytes) {
		c.bytes -= logSize(c.logs[c.order[0]])
		delete(c.logs, c.order[0])
		c.order = c.order[1:]
	}
}

// clear forgets every entry held.
func (c *recentLogs) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.logs, c.order, c.bytes = nil, nil, 0
}

func logSize(l *raft.Log) int { return len(l.Data) + len(l.Extensions) }
