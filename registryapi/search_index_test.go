package registryapi

import (
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/cmdlog"
	"github.com/agentmesh/mesh/internal/testkit"
)

// TestSearchIndexIncrementalEqualsFresh: after many changes and removals
// (past compactions, which number the rows again), the index ranks
// exactly as one built from the rows that remain.
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

// TestSearchIndexNumbersBounded: a row changed again and again, whose
// words no other row has (its old postings go with its terms), does not
// make the index hold a number for each of its versions.
func TestSearchIndexNumbersBounded(t *testing.T) {
	x := newSearchIndex()
	for i := range 10 {
		x.put(docOf(&Agent{ID: fmt.Sprintf("other%d", i), Reg: 1, Capabilities: []string{"common"}}, Weighted{}))
	}
	for v := range 10_000 {
		x.put(docOf(&Agent{ID: "solo", Reg: 1, Capabilities: []string{fmt.Sprintf("version%d", v)}}, Weighted{}))
	}
	if len(x.byNum) > 2*len(x.docs)+1025 {
		t.Fatalf("%d numbers held for %d rows", len(x.byNum), len(x.docs))
	}
	if hits, _ := x.search(searchQuery{terms: []string{"version9999"}}, 0, 10); len(hits) != 1 || hits[0].doc.id != "solo" {
		t.Fatalf("the last version: %v", summary(hits))
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

// TestSearchIndexBoundsTermsPerRow: a row adds at most maxDocTerms
// distinct terms, the first in reading order; its length counts all its
// words.
func TestSearchIndexBoundsTermsPerRow(t *testing.T) {
	var words []string
	for i := range maxDocTerms + 100 {
		words = append(words, fmt.Sprintf("w%d", i))
	}
	x := newSearchIndex()
	x.put(docOf(&Agent{ID: "big", Reg: 1, Capabilities: []string{}, Listing: &Listing{Description: strings.Join(words, " ")}}, Weighted{}))
	d := x.docs["big"]
	if n := len(slices.Collect(d.terms.all)); n != maxDocTerms || d.len != len(words)+1 {
		t.Fatalf("%d terms, length %d", n, d.len)
	}
	for _, w := range []string{"big", "w0", words[maxDocTerms-3]} {
		if hits, _ := x.search(searchQuery{terms: []string{w}}, 0, 10); len(hits) != 1 {
			t.Fatalf("%s: %d hits", w, len(hits))
		}
	}
	if hits, _ := x.search(searchQuery{terms: []string{words[maxDocTerms+50]}}, 0, 10); len(hits) != 0 {
		t.Fatalf("a word past the bound was indexed")
	}
}

// TestSearchIndexHeapPerRow: a row of 1,024 distinct words (the most one
// indexes) costs the index at most 4 KiB of heap (some 3 KB): its
// postings (a uvarint of the num's difference and one of the tf, some 2
// bytes a word, lists grown by a quarter), its term ids packed (some 1.3
// KB) and its document (11.9 KB a row with postings of 8 bytes, 14.8 KB
// with 4-byte term ids besides).
func TestSearchIndexHeapPerRow(t *testing.T) {
	vocab := make([]string, 20000)
	for i := range vocab {
		vocab[i] = fmt.Sprintf("word%d", i)
	}
	const n = 500
	rows := make([]*Agent, n)
	for r := range rows {
		words := make([]string, maxDocTerms)
		for i := range words {
			words[i] = vocab[(r*7919+i*13)%len(vocab)]
		}
		rows[r] = &Agent{ID: fmt.Sprintf("row-%d", r), Reg: 1, Capabilities: []string{}, Listing: &Listing{Description: strings.Join(words, " ")}}
	}
	x := newSearchIndex()
	base := testkit.HeapInUse()
	for _, a := range rows {
		x.put(docOf(a, Weighted{}))
	}
	rows = nil // their texts are not the index's
	if per := (testkit.HeapInUse() - base) / n; per > 4<<10 {
		t.Fatalf("a row of %d words took %d bytes of the index", maxDocTerms, per)
	}
	runtime.KeepAlive(x)
}

// TestBatchIndexedAsItsRowsAre: a batch of entries applied in one
// transaction, where a registration's own row is indexed as Apply wrote
// it and the entries after it change that row (a report, a new
// registration of the same agent, which keeps its reports) or remove
// another, leaves the index
// ranking as one built from the rows the batch left.
func TestBatchIndexedAsItsRowsAre(t *testing.T) {
	h := newHarness(t)
	at := h.clock.Now().UnixNano()
	yes := true
	reporter := identity.GenerateKey()
	pub := identity.EncodePublicKey(reporter.Public().(ed25519.PublicKey))
	seq := h.seq()
	cmds := []Command{
		{Register: &RegisterOp{AgentID: "x", Capabilities: []string{"alpha"}}},
		{Register: &RegisterOp{AgentID: "y", Capabilities: []string{"alpha"}}},
		{Register: &RegisterOp{AgentID: "z", Capabilities: []string{"alpha", "gamma"}}},
		{Sig: &SigClaim{Pubkey: pub, Nonce: "n1"}, Feedback: &FeedbackOp{Target: "x", Report: Report{Success: &yes}}},
		{Register: &RegisterOp{AgentID: "x", Capabilities: []string{"alpha", "beta"}, OwnerReg: seq + 1}},
		{Delete: &DeleteOp{AgentID: "z", Reg: seq + 3}},
	}
	var ps []cmdlog.Pending
	for i, c := range cmds {
		op, _ := json.Marshal(c)
		ps = append(ps, cmdlog.Pending{At: at + int64(i), Kind: Kind, Op: op, Index: uint64(i + 1)})
	}
	res, err := h.log.AppendBatch(ps)
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range res {
		if a.Err != nil {
			t.Fatalf("entry %d refused: %v", i, a.Err)
		}
	}
	fresh := newSearchIndex()
	if err := fresh.rebuild(t.Context(), h.dir.db, new(atomic.Int64)); err != nil {
		t.Fatal(err)
	}
	x := h.dir.index.Load()
	for _, q := range [][]string{{"alpha"}, {"beta"}, {"gamma"}, {"z"}, nil} {
		got, _ := x.search(searchQuery{terms: q}, 0, 10)
		want, _ := fresh.search(searchQuery{terms: q}, 0, 10)
		if fmt.Sprint(summary(got)) != fmt.Sprint(summary(want)) {
			t.Errorf("%v: %v, want %v", q, summary(got), summary(want))
		}
	}
	if got, _ := x.search(searchQuery{}, 0, 10); len(got) != 2 || got[0].doc.id != "x" || got[0].doc.rep == 0 {
		t.Errorf("without words: %v, want x (reported, then registered again) first, then y", summary(got))
	}
}
