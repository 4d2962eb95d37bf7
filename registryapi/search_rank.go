package registryapi

import (
	"container/heap"
	"math"
	"slices"
	"strings"
)

// ReputationBoost scales the reputation boost: a result's score is its
// BM25 relevance plus ReputationBoost times its oracle reputation (the
// weighted score, 0..1; 0 without reports). Documented in docs/api.md.
const ReputationBoost = 2.0

// searchQuery is a parsed search: the query's distinct terms in order and
// the filters a document must pass.
type searchQuery struct {
	terms    []string
	caps     []string // lower-cased, all required
	verified *bool
	// keep, when set, is asked last (online, price): the filters that read
	// more than the document.
	keep func(*searchDoc) bool
}

// hit is a ranked document.
type hit struct {
	doc       *searchDoc
	relevance float64
	boost     float64
}

func (h hit) score() float64 { return h.relevance + h.boost }

// before orders hits: higher score first, then agent id.
func (h hit) before(o hit) bool {
	if h.score() != o.score() {
		return h.score() > o.score()
	}
	return h.doc.id < o.doc.id
}

// search returns the hits ranked from offset, at most n, and whether more follow.
func (x *searchIndex) search(q searchQuery, offset, n int) ([]hit, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	rel := x.relevance(q.terms)
	top := &hitHeap{}
	k := offset + n + 1
	for num, r := range rel {
		d := x.byNum[num]
		if !q.passes(d) {
			continue
		}
		h := hit{doc: d, relevance: r, boost: ReputationBoost * d.rep}
		if top.Len() < k {
			heap.Push(top, h)
		} else if h.before((*top)[0]) {
			(*top)[0] = h
			heap.Fix(top, 0)
		}
	}
	hits := slices.SortedFunc(slices.Values(*top), func(a, b hit) int {
		if a.before(b) {
			return -1
		}
		return 1
	})
	if offset >= len(hits) {
		return nil, false
	}
	hits = hits[offset:]
	more := len(hits) > n
	return hits[:min(n, len(hits))], more
}

// relevance is the BM25 score of every live document holding a term.
// Terms are summed in query order, so every node adds the same floats alike.
func (x *searchIndex) relevance(terms []string) map[uint32]float64 {
	out := map[uint32]float64{}
	n := float64(len(x.docs))
	if n == 0 {
		return out
	}
	avgdl := float64(x.totalLen) / n
	for _, t := range terms {
		df := float64(x.df[t])
		if df == 0 {
			continue
		}
		idf := math.Log(1 + (n-df+0.5)/(df+0.5))
		for _, p := range x.postings[t] {
			d := x.byNum[p.num]
			if d == nil {
				continue
			}
			tf := float64(p.tf)
			out[p.num] += idf * tf * (bm25K1 + 1) / (tf + bm25K1*(1-bm25B+bm25B*float64(d.len)/avgdl))
		}
	}
	return out
}

func (q *searchQuery) passes(d *searchDoc) bool {
	if q.verified != nil && d.verified != *q.verified {
		return false
	}
	for _, c := range q.caps {
		if !d.caps[c] {
			return false
		}
	}
	return q.keep == nil || q.keep(d)
}

// queryTerms are the distinct terms of s, in order, at most max.
func queryTerms(s string, max int) []string {
	var out []string
	tokens(strings.TrimSpace(s), func(t string) {
		if len(out) < max && !slices.Contains(out, t) {
			out = append(out, t)
		}
	})
	return out
}

// hitHeap keeps the k best hits with the worst on top.
type hitHeap []hit

func (h hitHeap) Len() int           { return len(h) }
func (h hitHeap) Less(i, j int) bool { return h[j].before(h[i]) }
func (h hitHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *hitHeap) Push(v any)        { *h = append(*h, v.(hit)) }
func (h *hitHeap) Pop() any {
	old := *h
	v := old[len(old)-1]
	*h = old[:len(old)-1]
	return v
}
