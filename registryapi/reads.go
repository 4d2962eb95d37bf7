package registryapi

import (
	"encoding/json"
	"errors"
	"time"

	"github.com/agentmesh/mesh/store"
)

// Lookup returns the stored row of id, registered or catalog-only, with
// its full card, or ErrAgentNotFound. The row is shared: callers must not
// modify it. It comes without its DHT record (Record; see rowCache). A row
// with a full card is read from the store (the cache keeps rows without
// theirs): the readers of the card are the public address and the
// mirrored card, which decode it anyway.
func (d *Directory) Lookup(id string) (*Agent, error) {
	e, err := d.lookup(id)
	switch {
	case err != nil:
		return nil, err
	case !e.card:
		return e.a, nil
	}
	row, _, err := d.readRow(id)
	return row, err
}

// lookup is the row of id as the cache keeps it (without its full card),
// with what reads derived from it.
func (d *Directory) lookup(id string) (*cachedAgent, error) {
	if e, ok := d.cache.get(id); ok {
		return e, nil
	}
	gen := d.cache.gen.Load()
	row, rest, err := d.readRow(id)
	if err != nil {
		return nil, err
	}
	e := cachedOf(row, rest)
	d.cache.fill(gen, e)
	return e, nil
}

// readRow reads the row of id from the store, without its DHT record;
// rest is the bytes of the stored row but its record and full card.
func (d *Directory) readRow(id string) (*Agent, int, error) {
	var row cachedRow
	rest := 0
	err := d.db.View(func(tx *store.Txn) error {
		raw, err := tx.Get(agentKey(id))
		if err != nil {
			return err
		}
		if err := json.Unmarshal(raw, &row); err != nil {
			return err
		}
		rest = len(raw) - int(row.Record) - len(row.FullCard)
		return fromLog(tx, &row.Agent, false, true)
	})
	if errors.Is(err, store.ErrNotFound) {
		return nil, 0, ErrAgentNotFound
	}
	if err != nil {
		return nil, 0, err
	}
	return &row.Agent, rest, nil
}

// cachedRow decodes a row without its DHT record.
type cachedRow struct {
	Agent
	Record skipped `json:"record,omitempty"`
}

// skipped is a JSON value left undecoded: its length.
type skipped int

func (s *skipped) UnmarshalJSON(b []byte) error {
	*s = skipped(len(b))
	return nil
}

// Agent returns the registered agent id, or ErrAgentNotFound when the id is
// absent, deregistered or catalog-only. The row is shared, and comes
// without its DHT record and its full card (FullCard is nil; Lookup has
// it).
func (d *Directory) Agent(id string) (*Agent, error) {
	e, err := d.lookup(id)
	if err != nil {
		return nil, err
	}
	if !e.a.Registered() {
		return nil, ErrAgentNotFound
	}
	return e.a, nil
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

// rollup returns the rollup of the reports of registered agent e.a in the
// window ending at now() (read only for an agent with reports). An agent
// the search index knows without a report (most of them) costs no read of
// the store, and a row read through the cache remembers it (written once:
// rows are read on every core).
func (d *Directory) rollup(e *cachedAgent, now func() time.Time) (Rollup, error) {
	a := e.a
	if e.reportless.Load() {
		return noReports, nil
	}
	if d.index.Load().reportless(a.ID, a.Reg) {
		e.reportless.Store(true)
		return noReports, nil
	}
	var r Rollup
	err := d.db.View(func(tx *store.Txn) error {
		var err error
		r, err = rollupIn(tx, a, now())
		return err
	})
	return r, err
}

// noReports is the rollup of an agent without reports (its pointers are
// nil: copies share nothing).
var noReports = func() Rollup {
	var none rollupBuilder
	return none.rollup()
}()

// Agents calls fn for every registered agent, in id order, until fn
// returns false. Rows are decoded fresh: fn may keep them. They come
// without what they refer to in the log (Record and FullCard are nil when
// RecordLogged and CardLogged).
func (d *Directory) Agents(fn func(*Agent) bool) error {
	return d.db.View(func(tx *store.Txn) error {
		return tx.Scan([]byte("a/"), nil, func(_, v []byte) (bool, error) {
			var a Agent
			if err := json.Unmarshal(v, &a); err != nil {
				return false, err
			}
			return !a.Registered() || fn(&a), nil
		})
	})
}
