package registryapi

import (
	"encoding/json"
	"errors"
	"time"

	"github.com/agentmesh/mesh/store"
)

// Lookup returns the stored row of id, registered or catalog-only, or
// ErrAgentNotFound.
// The row is shared: callers must not modify it.
func (d *Directory) Lookup(id string) (*Agent, error) {
	d.cacheMu.RLock()
	a, ok := d.cache[id]
	d.cacheMu.RUnlock()
	if ok {
		return a, nil
	}
	seq := d.seq.Load()
	err := d.db.View(func(tx *store.Txn) error {
		var err error
		a, err = getAgent(tx, id)
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		return nil, ErrAgentNotFound
	}
	if err != nil {
		return nil, err
	}
	// Cache only if no commit happened since the read began: Commit bumps
	// seq under cacheMu after invalidating, so a stale row never lands.
	d.cacheMu.Lock()
	if d.seq.Load() == seq {
		if len(d.cache) >= maxCachedAgents {
			for k := range d.cache { // evict an arbitrary row
				delete(d.cache, k)
				break
			}
		}
		d.cache[id] = a
	}
	d.cacheMu.Unlock()
	return a, nil
}

// Agent returns the registered agent id, or ErrAgentNotFound when the id is
// absent, deregistered or catalog-only.
func (d *Directory) Agent(id string) (*Agent, error) {
	a, err := d.Lookup(id)
	if err == nil && !a.Registered() {
		return nil, ErrAgentNotFound
	}
	return a, err
}

// Reputation returns the registered agent id with the rollup of its reports
// in the window ending at now.
func (d *Directory) Reputation(id string, now time.Time) (*Agent, Rollup, error) {
	var a *Agent
	var r Rollup
	err := d.db.View(func(tx *store.Txn) error {
		var err error
		if a, err = getAgent(tx, id); err != nil {
			return err
		}
		if !a.Registered() {
			return ErrAgentNotFound
		}
		r, err = rollupIn(tx, a, now)
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		return nil, r, ErrAgentNotFound
	}
	return a, r, err
}

// Changes returns up to limit logged commands with seq > since, in order.
func (d *Directory) Changes(since uint64, limit int) ([]Command, error) {
	var out []Command
	err := d.db.View(func(tx *store.Txn) error {
		return tx.Scan(logPrefix, logKey(since+1), func(_, v []byte) (bool, error) {
			var c Command
			if err := json.Unmarshal(v, &c); err != nil {
				return false, err
			}
			out = append(out, c)
			return len(out) < limit, nil
		})
	})
	return out, err
}
