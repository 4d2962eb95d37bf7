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

// search returns the hits ranked from offset, at most n, and whether more
// follow. A query without words ranks by reputation, then id (browse).
func (x *searchIndex) search(q searchQuery, offset, n int) ([]hit, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if len(q.terms) == 0 {
		return x.browse(q, offset, n)
	}
	top := &hitHeap{}
	k := offset + n + 1
	x.relevance(q.terms, func(num uint32, r float64) {
		// A row whose relevance plus the largest boost cannot beat the
		// worst kept hit is not read at all.
		if top.Len() == k && r+ReputationBoost*x.maxRep < (*top)[0].score() {
			return
		}
		d := x.byNum[num]
		if d.dead || !q.passes(d) {
			return
		}
		h := hit{doc: d, relevance: r, boost: ReputationBoost * d.rep}
		if top.Len() < k {
			heap.Push(top, h)
		} else if h.before((*top)[0]) {
			(*top)[0] = h
			heap.Fix(top, 0)
		}
	})
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

// browse walks the documents in byBoost order, the filters deciding,
// and stops once it has the page and knows whether more follow.
func (x *searchIndex) browse(q searchQuery, offset, n int) ([]hit, bool) {
	var out []hit
	for _, d := range x.order {
		if !q.passes(d) {
			continue
		}
		if offset > 0 {
			offset--
			continue
		}
		if len(out) == n {
			return out, true
		}
		out = append(out, hit{doc: d, boost: ReputationBoost * d.rep})
	}
	return out, false
}

// termCursor walks one query term's postings.
type termCursor struct {
	postingCursor
	idf float64
}

// relevance calls fn with the BM25 score of every document holding a
// term (removed ones among them: fn checks), by its number. It merges the terms' postings (each in num order) a document at
// a time, adding the terms in query order, so every node adds the same
// floats alike and no table of scores is built.
func (x *searchIndex) relevance(terms []string, fn func(uint32, float64)) {
	n := float64(len(x.docs))
	if n == 0 {
		return
	}
	avgdl := float64(x.totalLen) / n
	var cs []termCursor
	for _, t := range terms {
		if e := x.terms[t]; e != nil {
			df := float64(e.df)
			cs = append(cs, termCursor{postingCursor: e.ps.cursor(), idf: math.Log(1 + (n-df+0.5)/(df+0.5))})
		}
	}
	for {
		var num uint32
		found := false
		for i := range cs {
			if c := &cs[i]; c.ok && (!found || c.num < num) {
				num, found = c.num, true
			}
		}
		if !found {
			return
		}
		var r float64
		norm := bm25K1 * (1 - bm25B + bm25B*float64(x.lens[num])/avgdl)
		for i := range cs {
			if c := &cs[i]; c.ok && c.num == num {
				tf := float64(c.tf)
				r += c.idf * tf * (bm25K1 + 1) / (tf + norm)
				c.next()
			}
		}
		fn(num, r)
	}
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
