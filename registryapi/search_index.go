package registryapi

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/agentmesh/mesh/store"
)

// The oracle's index: an in-memory inverted index over the directory rows
// this node holds (registered agents and catalog-only listings), rebuilt
// from the store when the Directory is made and changed by every committed
// entry (Directory.Committed). It is derived state: every node that holds
// the same log holds the same index, so the same query ranks alike on
// every node (docs/architecture.md, Search).

// BM25 parameters (Robertson's usual values).
const (
	bm25K1 = 1.2
	bm25B  = 0.75
)

// maxTermLen drops longer tokens: nothing a person types, and it bounds
// what one term costs.
const maxTermLen = 64

// maxDocTerms bounds the distinct terms one row adds to the index, the
// first in reading order (id, capabilities, names, descriptions, skills):
// a card of 64 KiB of words nobody else uses would otherwise cost the
// index several times its size, on every node.
const maxDocTerms = 1024

// searchDoc is one indexed row.
type searchDoc struct {
	num   uint32 // posting number; a changed row gets a new one
	dead  bool   // removed; its postings wait for compaction
	id    string
	terms termIDs // its distinct terms, each once
	len   int
	caps  map[string]bool // lower-cased capabilities, for the filter
	// weighted is the agent's weighted view as of its newest report; rep
	// its score, 0 without.
	weighted   Weighted
	rep        float64
	registered bool
	reg        uint64 // registration, for presence
	verified   bool
	price      *uint64 // cheapest lamports per request; nil when unknown
	usdc       *uint64 // cheapest USDC per request, in millionths; nil when none
}

// withinUSD reports whether d has a per-request price of at most max USD:
// in lamports at usdPerSOL, or in USDC at par.
func (d *searchDoc) withinUSD(max, usdPerSOL float64) bool {
	return d.price != nil && float64(*d.price)/lamportsPerSOL*usdPerSOL <= max || d.usdc != nil && float64(*d.usdc)/usdcUnits <= max
}

// draft is a row made ready to index: its document, and the frequency of
// each of its terms (strings of the row's text, interned by put).
type draft struct {
	doc    *searchDoc
	counts map[string]uint16
}

// term is one indexed word, held once however many rows have it.
type term struct {
	text string
	id   uint32   // its place in searchIndex.byID
	df   int      // live documents holding it
	ps   postings // may hold dead documents; compacted
}

// searchIndex is safe for concurrent use.
type searchIndex struct {
	mu    sync.RWMutex
	docs  map[string]*searchDoc
	terms map[string]*term
	// byID are the terms by id, nil where one was dropped (its id is in
	// free, for the next new term).
	byID []*term
	free []uint32
	// byNum are the documents by number, removed ones among them until
	// a compaction numbers the live ones again from 0; lens are their
	// lengths (at most math.MaxUint16), which relevance reads of every
	// document it scores, before it reads the document.
	byNum    []*searchDoc
	lens     []uint16
	totalLen int
	dead     int // dead postings, for compaction
	live     int // live postings
	// maxRep bounds every row's rep (it may stay above the true maximum
	// after removals): the most a boost can add.
	maxRep float64
	// order is every live document ranked as a search without words
	// ranks them (reputation, then id: byBoost), kept sorted by put and
	// remove; while bulk (a rebuild), put appends and the rebuild sorts
	// once at its end.
	order []*searchDoc
	bulk  bool
}

// byBoost orders documents as a search without words: the higher
// reputation first, then the agent id.
func byBoost(a, b *searchDoc) int {
	if a.rep != b.rep {
		if a.rep > b.rep {
			return -1
		}
		return 1
	}
	return strings.Compare(a.id, b.id)
}

func newSearchIndex() *searchIndex {
	return &searchIndex{docs: map[string]*searchDoc{}, terms: map[string]*term{}}
}

// tokens splits s into lower-case runs of letters and digits.
func tokens(s string, add func(string)) {
	for f := range strings.FieldsFuncSeq(strings.ToLower(s), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	}) {
		if len(f) <= maxTermLen {
			add(f)
		}
	}
}

// docOf builds the indexed form of row a with its oracle reputation w.
func docOf(a *Agent, w Weighted) draft {
	d := &searchDoc{id: a.ID, caps: map[string]bool{}, weighted: w,
		registered: a.Registered(), reg: a.Reg, verified: a.Pubkey != ""}
	counts := map[string]uint16{}
	add := func(t string) {
		d.len++
		if n, ok := counts[t]; ok && n < math.MaxUint16 {
			counts[t]++
		} else if !ok && len(counts) < maxDocTerms {
			counts[t] = 1
		}
	}
	full := cardView(a.FullCard)
	for _, s := range a.searchText(full) {
		tokens(s, add)
	}
	for _, c := range a.allCapabilities() {
		d.caps[strings.ToLower(c)] = true
	}
	d.price, d.usdc = a.requestPrice(full, currencyLamprt), a.requestPrice(full, currencyUSDC)
	if w.Score != nil {
		d.rep = *w.Score
	}
	return draft{d, counts}
}

// searchText is what relevance reads: id, capabilities, the discovery
// card's and the full card's (full, decoded) name, description, skills
// and tags, and the catalog listing.
func (a *Agent) searchText(full *fullCard) []string {
	out := append([]string{a.ID}, a.Capabilities...)
	if c := a.Card; c != nil {
		out = append(append(out, c.Name, c.Description), c.Tags...)
		for _, s := range c.Skills {
			out = append(append(out, s.ID, s.Name, s.Description), s.Tags...)
		}
	}
	if f := full; f != nil {
		out = append(out, f.Name, f.Description)
		for _, s := range f.Skills {
			out = append(append(out, s.ID, s.Name, s.Description), s.Tags...)
		}
	}
	if l := a.Listing; l != nil {
		out = append(append(out, l.Name, l.Description), l.Capabilities...)
	}
	return out
}

// requestPrice is a's cheapest declared per-request price in currency (a
// free row is 0): of its pricing rows (pricingOf) and its full card's
// (full, decoded) skills' own rows; nil when none prices a request.
func (a *Agent) requestPrice(full *fullCard, currency string) *uint64 {
	best := cheapestIn(nil, a.pricingOf(full), currency)
	if full != nil {
		for _, s := range full.Skills {
			best = cheapestIn(best, s.Pricing, currency)
		}
	}
	return best
}

// allCapabilities are the registered capabilities and the listing's,
// each once (compared without case), in order.
func (a *Agent) allCapabilities() []string {
	if a.Listing == nil || len(a.Listing.Capabilities) == 0 {
		return a.Capabilities
	}
	out := slices.Clone(a.Capabilities)
	for _, c := range a.Listing.Capabilities {
		if !slices.ContainsFunc(out, func(o string) bool { return strings.EqualFold(o, c) }) {
			out = append(out, c)
		}
	}
	return out
}

// put indexes dr's row in place of the row of the same id, if any.
func (x *searchIndex) put(dr draft) {
	d := dr.doc
	x.mu.Lock()
	defer x.mu.Unlock()
	x.removeLocked(d.id)
	d.num = uint32(len(x.byNum))
	x.byNum = append(x.byNum, d)
	x.lens = append(x.lens, uint16(min(d.len, math.MaxUint16)))
	x.docs[d.id] = d
	x.totalLen += d.len
	x.maxRep = max(x.maxRep, d.rep)
	if x.bulk {
		x.order = append(x.order, d)
	} else {
		i, _ := slices.BinarySearchFunc(x.order, d, byBoost)
		x.order = slices.Insert(x.order, i, d)
	}
	ids := make([]uint32, 0, len(dr.counts))
	for t, tf := range dr.counts {
		e := x.terms[t]
		if e == nil {
			e = x.newTermLocked(t)
		}
		e.ps.add(d.num, tf)
		e.df++
		x.live++
		ids = append(ids, e.id)
	}
	d.terms = packTerms(ids)
}

// termIDs are a row's distinct terms' ids, ascending, each the uvarint
// of its difference from the one before: a byte or two each where 4 would
// be fixed (a row of 1,024 words, some 1.3 KB for 4 KB; what the index
// holds per row besides its postings).
type termIDs []byte

// packTerms packs ids (sorting them).
func packTerms(ids []uint32) termIDs {
	slices.Sort(ids)
	b := make([]byte, 0, 3*len(ids))
	var prev uint32
	for _, id := range ids {
		b, prev = binary.AppendUvarint(b, uint64(id-prev)), id
	}
	return bytes.Clone(b)
}

// all yields the ids.
func (ts termIDs) all(yield func(uint32) bool) {
	var id uint32
	for b := []byte(ts); len(b) > 0; {
		d, n := binary.Uvarint(b)
		b, id = b[n:], id+uint32(d)
		if !yield(id) {
			return
		}
	}
}

// newTermLocked indexes term t, with an id of its own (a dropped term's,
// if any).
func (x *searchIndex) newTermLocked(t string) *term {
	// Its own copy: t is a piece of the row's text, which it would keep
	// whole.
	e := &term{text: strings.Clone(t), id: uint32(len(x.byID))}
	if n := len(x.free); n > 0 {
		e.id, x.free = x.free[n-1], x.free[:n-1]
		x.byID[e.id] = e
	} else {
		x.byID = append(x.byID, e)
	}
	x.terms[e.text] = e
	return e
}

// reportless reports whether the index holds registration reg of agent
// id, without a report: the index is current once an entry is committed,
// feedback included (Directory.Committed).
func (x *searchIndex) reportless(id string, reg uint64) bool {
	if x == nil {
		return false // not built yet
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	d := x.docs[id]
	return d != nil && d.reg == reg && d.weighted.N == 0
}

// remove drops the row of id.
func (x *searchIndex) remove(id string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.removeLocked(id)
}

func (x *searchIndex) removeLocked(id string) {
	d := x.docs[id]
	if d == nil {
		return
	}
	delete(x.docs, id)
	d.dead = true
	x.totalLen -= d.len
	if i, found := slices.BinarySearchFunc(x.order, d, byBoost); found && !x.bulk {
		x.order = slices.Delete(x.order, i, i+1)
	} else if x.bulk {
		x.order = slices.DeleteFunc(x.order, func(o *searchDoc) bool { return o == d })
	}
	for id := range d.terms.all {
		e := x.byID[id]
		x.live--
		if e.df--; e.df == 0 {
			x.dead -= e.ps.n - 1 // the term's dead postings go with it
			delete(x.terms, e.text)
			x.byID[id], x.free = nil, append(x.free, id)
			continue
		}
		x.dead++
	}
	d.terms = nil
	// Compacted when dead postings outnumber live ones, or removed
	// documents the live ones (each change of a row takes a number).
	removed := len(x.byNum) - len(x.docs)
	if x.dead > x.live && x.dead > 1024 || removed > len(x.docs) && removed > 1024 {
		x.compactLocked()
	}
}

// compactLocked drops the postings of rows no longer indexed, and numbers
// the live documents again from 0, in the order of their numbers.
func (x *searchIndex) compactLocked() {
	var n uint32
	for _, d := range x.byNum {
		if !d.dead {
			d.num, n = n, n+1 // its place once the removed go
		}
	}
	for _, e := range x.terms {
		e.ps.keep(func(num uint32) (uint32, bool) { d := x.byNum[num]; return d.num, !d.dead })
	}
	n = 0
	for i, d := range x.byNum {
		if !d.dead {
			x.byNum[n], x.lens[n] = d, x.lens[i]
			n++
		}
	}
	clear(x.byNum[n:])
	x.byNum, x.lens = x.byNum[:n], x.lens[:n]
	x.dead = 0
}

// rebuild indexes every row in db, reading each agent's reputation, and
// counts the rows in rows as it goes; it stops when ctx ends.
func (x *searchIndex) rebuild(ctx context.Context, db *store.DB, rows *atomic.Int64) error {
	x.bulk = true
	defer func() {
		slices.SortFunc(x.order, byBoost)
		x.bulk = false
	}()
	return db.View(func(tx *store.Txn) error {
		return tx.Scan([]byte("a/"), nil, func(_, v []byte) (bool, error) {
			if err := ctx.Err(); err != nil {
				return false, err
			}
			var a cachedRow // its DHT record is not indexed
			if err := json.Unmarshal(v, &a); err != nil {
				return false, err
			}
			fromLogOrBare(tx, &a.Agent, false, true)
			rep, err := oracleReputation(tx, &a.Agent)
			if err == nil {
				x.put(docOf(&a.Agent, rep))
				rows.Add(1)
			}
			return err == nil, err
		})
	})
}

// reindex indexes the current row of each id, or drops it when gone.
func (x *searchIndex) reindex(db *store.DB, ids []string) error {
	return db.View(func(tx *store.Txn) error {
		for _, id := range ids {
			a, err := getAgent(tx, id)
			if err != nil {
				x.remove(id)
				continue
			}
			if err := fromLog(tx, a, false, true); err != nil {
				return err
			}
			rep, err := oracleReputation(tx, a)
			if err != nil {
				return err
			}
			x.put(docOf(a, rep))
		}
		return nil
	})
}

// oracleReputation is a's weighted view in the reputation window ending
// at its newest report: the log alone decides it, so every node computes
// the same boost whenever it rebuilt its index (a read at the reader's
// clock would drift apart as reports leave the window).
func oracleReputation(tx *store.Txn, a *Agent) (Weighted, error) {
	if !a.Registered() {
		return Weighted{}, nil
	}
	var newest int64
	err := tx.Scan(reportPrefix(a.ID, a.Reg), nil, func(k, _ []byte) (bool, error) {
		at, _ := store.ParseU64(string(k[len(k)-17 : len(k)-9])) // r/<id>/<reg>/<at>/<seq>
		newest = int64(at)
		return true, nil
	})
	if err != nil || newest == 0 {
		return Weighted{}, err
	}
	r, err := rollupIn(tx, a, time.Unix(0, newest).UTC())
	return r.Weighted, err
}
