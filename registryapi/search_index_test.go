package registryapi

import (
	"fmt"
	"testing"
)

// TestSearchIndexIncrementalEqualsFresh: after many changes and removals
// (past a compaction), the index ranks exactly as one built from the rows
// that remain.
func TestSearchIndexIncrementalEqualsFresh(t *testing.T) {
	row := func(i, version int) *Agent {
		return &Agent{ID: fmt.Sprintf("a%d", i), Reg: 1, Capabilities: []string{
			fmt.Sprintf("cap%d", i%7), fmt.Sprintf("v%d", version%3), "common"}}
	}
	x := newSearchIndex()
	for v := range 3 {
		for i := range 2000 {
			x.put(docOf(row(i, v+i), scored(float64(i%10)/10)))
		}
	}
	for i := 0; i < 2000; i += 3 {
		x.remove(fmt.Sprintf("a%d", i))
	}
	fresh := newSearchIndex()
	for i := range 2000 {
		if i%3 != 0 {
			fresh.put(docOf(row(i, 2+i), scored(float64(i%10)/10)))
		}
	}
	if x.dead >= x.live {
		t.Fatalf("no compaction: %d dead postings, %d live", x.dead, x.live)
	}
	// A query without words ranks the order the index keeps sorted.
	for _, q := range [][]string{{"common"}, {"cap3", "v1"}, {"a4", "cap0", "common"}, {"a0"}, nil} {
		got, gotMore := x.search(searchQuery{terms: q}, 10, 50)
		want, wantMore := fresh.search(searchQuery{terms: q}, 10, 50)
		if fmt.Sprint(summary(got), gotMore) != fmt.Sprint(summary(want), wantMore) {
			t.Fatalf("%v:\n%v\nwant\n%v", q, summary(got), summary(want))
		}
	}
}

// scored is a weighted view of score s alone.
func scored(s float64) Weighted { return Weighted{Score: &s} }

func summary(hs []hit) []string {
	var out []string
	for _, h := range hs {
		out = append(out, fmt.Sprintf("%s=%v", h.doc.id, h.score()))
	}
	return out
}
