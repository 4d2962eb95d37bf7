package registryapi

import (
	"math"
	"slices"
	"testing"
)

// TestPostingsReadBackAsAdded: postings of differences and tfs of one byte
// and of several read back as added, and a compaction keeps the live ones,
// numbered again, in order.
func TestPostingsReadBackAsAdded(t *testing.T) {
	type p struct {
		num uint32
		tf  uint16
	}
	in := []p{{0, 1}, {5, 300}, {200, 127}, {201, 128}, {70000, math.MaxUint16}, {70001, 2}, {math.MaxUint32, 1}}
	var ps postings
	for _, q := range in {
		ps.add(q.num, q.tf)
	}
	read := func() (out []p) {
		for c := ps.cursor(); c.ok; c.next() {
			out = append(out, p{c.num, c.tf})
		}
		return out
	}
	if got := read(); !slices.Equal(got, in) || ps.n != len(in) {
		t.Fatalf("read %v (%d), want %v", got, ps.n, in)
	}
	renumbered := map[uint32]uint32{5: 0, 201: 1, 70001: 2, math.MaxUint32: 300}
	ps.keep(func(num uint32) (uint32, bool) { to, ok := renumbered[num]; return to, ok })
	want := []p{{0, 300}, {1, 128}, {2, 2}, {300, 1}}
	if got := read(); !slices.Equal(got, want) || ps.n != len(want) || ps.last != 300 {
		t.Fatalf("compacted: %v (%d, last %d), want %v", got, ps.n, ps.last, want)
	}
	ps.add(301, 9)
	if got := read(); !slices.Equal(got, append(want, p{301, 9})) {
		t.Fatalf("added after a compaction: %v", got)
	}
}
