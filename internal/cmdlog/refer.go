package cmdlog

import (
	"encoding/json"
	"errors"

	"github.com/agentmesh/mesh/store"
)

// Referrer is a Machine whose state refers to entries of the change log
// instead of holding a copy of what they carry (the registry's rows,
// their agent's signed request and card: registryapi/rowlog.go). The log
// keeps such a state whole where the change log is not: a snapshot
// carries each value with what it refers to (Inline), and Compact keeps
// the entries the state refers to (Refers), below the first entry the
// change feed serves, until the machine lets go of them (Release).
type Referrer interface {
	Machine
	// Inline returns val, the value at key of the machine's state as tx
	// reads it, holding what it refers to in the change log itself; val
	// when it refers to nothing.
	Inline(tx *store.Txn, key, val []byte) ([]byte, error)
	// Refers reports whether the state in tx refers to entry e.
	Refers(tx *store.Txn, e *Entry) (bool, error)
}

// EntryAt is the entry seq of the change log, as tx reads it
// (store.ErrNotFound once compacted, or before it was committed).
func EntryAt(tx *store.Txn, seq uint64) (*Entry, error) {
	var e Entry
	if err := tx.GetJSON(logKey(seq), &e); err != nil {
		return nil, err
	}
	return &e, nil
}

// Release is for a Referrer's Apply whose state, in tx, no longer refers
// to entry seq: an entry that Compact kept for it alone goes.
func Release(tx *store.Txn, seq uint64) error {
	first, err := GetU64(tx, firstKey)
	if err != nil || seq >= first {
		return err // the change log holds it still, or never was compacted
	}
	return tx.Delete(logKey(seq))
}

// inline is val with what it refers to in the change log (Referrer), as
// a snapshot carries it.
func (l *Log) inline(tx *store.Txn, key, val []byte) ([]byte, error) {
	for _, m := range l.referrers {
		v, err := m.Inline(tx, key, val)
		if err != nil {
			return nil, err
		}
		val = v
	}
	return val, nil
}

// referred reports whether a machine's state in tx refers to the entry at
// seq (Referrer), which Compact then keeps.
func (l *Log) referred(tx *store.Txn, seq uint64) (bool, error) {
	if len(l.referrers) == 0 {
		return false, nil
	}
	raw, err := tx.Get(logKey(seq))
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var e Entry
	if err := json.Unmarshal(raw, &e); err != nil {
		return false, err
	}
	m, ok := l.machines[e.Kind].(Referrer)
	if !ok {
		return false, nil
	}
	return m.Refers(tx, &e)
}
