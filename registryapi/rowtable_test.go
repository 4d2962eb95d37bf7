package registryapi

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// TestRowTableAsAMap: a rowTable holds what a map would through puts,
// replacements and removals, with hashes that collide often (long runs of
// probes that wrap around the table, rows moved back as others leave).
func TestRowTableAsAMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, hashes := range []uint64{1, 5, 1 << 40} {
		var tab rowTable
		want := map[string]*cachedAgent{}
		hashOf := func(id string) uint64 { return 1 + uint64(len(id)*7919+int(id[len(id)-1]))%hashes }
		for step := range 20_000 {
			id := fmt.Sprintf("agent-%d", rng.IntN(300))
			switch rng.IntN(3) {
			case 0, 1:
				e := &cachedAgent{view: viewParts{id: id}}
				old := tab.put(hashOf(id), e)
				if old != want[id] {
					t.Fatalf("step %d: put %s replaced %p, want %p", step, id, old, want[id])
				}
				want[id] = e
			case 2:
				if got := tab.remove(hashOf(id), id); got != want[id] {
					t.Fatalf("step %d: remove %s gave %p, want %p", step, id, got, want[id])
				}
				delete(want, id)
			}
			if tab.n != len(want) {
				t.Fatalf("step %d: %d rows, want %d", step, tab.n, len(want))
			}
			if step%97 == 0 {
				for i := range 300 {
					id := fmt.Sprintf("agent-%d", i)
					if got := tab.get(hashOf(id), id); got != want[id] {
						t.Fatalf("step %d: get %s gave %p, want %p", step, id, got, want[id])
					}
				}
			}
		}
		for tab.n > 0 { // and evicts down to nothing
			i, ok := tab.any()
			if !ok || tab.removeAt(i) == nil {
				t.Fatal("a table with rows gave none to evict")
			}
		}
		if _, ok := tab.any(); ok {
			t.Fatal("an empty table gave a row to evict")
		}
	}
}

// A shard is one cache line: shards do not share one.
func TestRowShardIsACacheLine(t *testing.T) {
	if s := unsafe.Sizeof(rowShard{}); s != 64 {
		t.Fatalf("a row shard is %d bytes", s)
	}
}
