package registryapi

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentmesh/mesh/internal/httpx"
)

// ErrIndexBuilding: the node started moments ago and is still building its
// search index from its store (some 30 s for 1,000,000 agents); everything
// else it serves already.
var ErrIndexBuilding = httpx.E(http.StatusServiceUnavailable, "index_building",
	"this node is building its search index since it started; retry after Retry-After seconds, or search on another node")

// indexing is the search index's build: until an index is in use, the
// commits note the rows they touch, which the build indexes again (from
// the store as it is then) before it puts its index in use.
type indexing struct {
	mu      sync.Mutex
	ready   bool
	pending map[string]bool
	// gen counts builds begun: a build only puts its index in use if none
	// began since (a snapshot's install builds one of its own).
	gen uint64
	// rows indexed by the build under way, and since when: what
	// ErrIndexBuilding's Retry-After is estimated from.
	rows    atomic.Int64
	started atomic.Int64 // Unix ns
}

// BuildIndex builds the search index from the store and puts it in use;
// the commits made meanwhile are in it.
func (d *Directory) BuildIndex(ctx context.Context) error {
	d.ix.mu.Lock()
	d.ix.gen++
	gen := d.ix.gen
	d.ix.mu.Unlock()
	d.ix.rows.Store(0)
	d.ix.started.Store(time.Now().UnixNano())
	x := newSearchIndex()
	if err := x.rebuild(ctx, d.db, &d.ix.rows); err != nil {
		return fmt.Errorf("registry: building the search index: %w", err)
	}
	d.ix.mu.Lock()
	defer d.ix.mu.Unlock()
	if gen != d.ix.gen {
		return nil // a newer build puts its own
	}
	d.ix.ready = true
	ids := slices.Collect(maps.Keys(d.ix.pending))
	d.ix.pending = nil
	if x.reindex(d.db, ids) != nil {
		for _, id := range ids { // a row that cannot be read is not offered
			x.remove(id)
		}
	}
	d.index.Store(x)
	return nil
}

// reindex indexes the rows of ids again, or, while no index is in use,
// leaves them to the build.
func (d *Directory) reindex(ids []string) {
	if x := d.liveIndex(ids); x != nil && x.reindex(d.db, ids) != nil {
		for _, id := range ids {
			x.remove(id)
		}
	}
}

// indexNew indexes a, the row of an agent a registration made, as Apply
// wrote it, or, while no index is in use, leaves it to the build. A new
// registration has no reports: a report that a later entry of the same
// batch makes indexes the row again when that entry is committed.
func (d *Directory) indexNew(a *Agent) {
	if x := d.liveIndex([]string{a.ID}); x != nil {
		x.put(docOf(a, Weighted{}))
	}
}

// liveIndex is the index the commits keep current, or nil while none is
// in use: the build then indexes the rows of ids again when it is done.
func (d *Directory) liveIndex(ids []string) *searchIndex {
	d.ix.mu.Lock()
	defer d.ix.mu.Unlock()
	if d.ix.ready {
		return d.index.Load()
	}
	if d.ix.pending == nil {
		d.ix.pending = map[string]bool{}
	}
	for _, id := range ids {
		d.ix.pending[id] = true
	}
	return nil
}

// searchIndex is the index in use, or ErrIndexBuilding (with the time the
// build still needs, as far as its pace tells) while there is none.
func (d *Directory) searchIndex() (*searchIndex, error) {
	if x := d.index.Load(); x != nil {
		return x, nil
	}
	left := 5 * time.Second
	done, total := d.ix.rows.Load(), d.AgentCount()
	if took := time.Since(time.Unix(0, d.ix.started.Load())); done > 0 && total > done {
		left = time.Duration(float64(took) * float64(total-done) / float64(done))
	}
	return nil, ErrIndexBuilding.With("this node is building its search index since it started (%d of some %d rows); retry after %d s, or search on another node",
		done, total, httpx.RetryAfterSeconds(left)).After(min(max(left, time.Second), time.Minute))
}
