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
// carries each value with what it refers to (Inline), and an entry is
// dropped from the change log (Compact) only once the state holds what it
// referred to in it (Unlog), in the same transaction.
type Referrer interface {
	Machine
	// Inline returns val, the value at key of the machine's state as tx
	// reads it, holding what it refers to in the change log itself; val
	// when it refers to nothing.
	Inline(tx *store.Txn, key, val []byte) ([]byte, error)
	// Unlog makes the state in tx hold what it refers to in entry e, which
	// the change log drops in tx; it returns the bytes it wrote.
	Unlog(tx *store.Txn, e *Entry) (int, error)
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

// unlog has the machines that refer to the entry at seq hold what they
// refer to in it (Referrer), before the change log drops it in tx; it
// returns the bytes they wrote.
func (l *Log) unlog(tx *store.Txn, seq uint64) (int, error) {
	if len(l.referrers) == 0 {
		return 0, nil
	}
	raw, err := tx.Get(logKey(seq))
	if errors.Is(err, store.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var e Entry
	if err := json.Unmarshal(raw, &e); err != nil {
		return 0, err
	}
	m, ok := l.machines[e.Kind].(Referrer)
	if !ok {
		return 0, nil
	}
	return m.Unlog(tx, &e)
}
