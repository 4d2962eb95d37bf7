package cmdlog

import (
	"hash/maphash"

	"github.com/agentmesh/mesh/store"
)

// writeFilter names, by a hash of their ids, the writes the state
// remembers (writeKey), each hash with how many records have it: an
// attempt whose hash it lacks is a new write, found so without reading
// the store, as most are (on a quorum every member looked up every
// write, a miss in its memtables and tables). It may name a write the
// state no longer holds, never lack one it holds: the state alone
// decides a repeat, as on every member.
type writeFilter struct {
	seed maphash.Seed
	n    map[uint64]int
}

// loadWriteFilter reads the writes the state remembers in tx.
func loadWriteFilter(tx *store.Txn) (*writeFilter, error) {
	f := &writeFilter{seed: maphash.MakeSeed(), n: map[uint64]int{}}
	err := tx.Scan(writePrefix, nil, func(k, _ []byte) (bool, error) {
		f.n[f.hash(string(k[len(writePrefix):]))]++
		return true, nil
	})
	return f, err
}

func (f *writeFilter) hash(id string) uint64 { return maphash.String(f.seed, id) }

// writeChanges are a run's changes to the records of writes, by hash,
// which the filter takes once the run committed.
type writeChanges map[uint64]int

// mayHold reports whether the state may hold a record of id, as changes
// leave it.
func (f *writeFilter) mayHold(c writeChanges, id string) bool {
	h := f.hash(id)
	return f.n[h]+c[h] > 0
}

// apply takes the changes of a run that committed.
func (f *writeFilter) apply(c writeChanges) {
	for h, d := range c {
		if f.n[h] += d; f.n[h] <= 0 {
			delete(f.n, h)
		}
	}
}
