package registryapi

import (
	"bytes"
	"encoding/binary"
)

// postings name the documents holding a term by their numbers
// (searchIndex.byNum has the documents, searchIndex.lens their lengths),
// each with the term's frequency in it, in num order (rows are appended
// as numbered, and a compaction keeps their order), which the ranking's
// merge relies on. Each is the uvarint of its num less the one before,
// then the uvarint of its tf: some 2 to 3 bytes where a struct of num, tf
// and the row's length took 8. An index holds one per distinct word of
// every row, most of its heap.
type postings struct {
	b    []byte
	last uint32 // the last posting's num
	n    int    // postings in b
}

// add appends a posting of a num above the last's: a full list grows by
// a quarter, where append would double one (most lists are short): their
// slack took as much as the postings.
func (ps *postings) add(num uint32, tf uint16) {
	var enc [2 * binary.MaxVarintLen32]byte
	p := binary.AppendUvarint(binary.AppendUvarint(enc[:0], uint64(num-ps.last)), uint64(tf))
	if len(ps.b)+len(p) > cap(ps.b) {
		ps.b = append(make([]byte, 0, len(ps.b)+len(p)+len(ps.b)/4), ps.b...)
	}
	ps.b = append(ps.b, p...)
	ps.last, ps.n = num, ps.n+1
}

// keep keeps the postings of the documents live reports live, numbered
// as it says (in the same order).
func (ps *postings) keep(live func(num uint32) (uint32, bool)) {
	out := postings{b: make([]byte, 0, len(ps.b))} // renumbered, a num less the one before takes no more
	for c := ps.cursor(); c.ok; c.next() {
		if to, ok := live(c.num); ok {
			out.add(to, c.tf)
		}
	}
	if cap(out.b)-len(out.b) > len(out.b)/4 {
		out.b = bytes.Clone(out.b)
	}
	*ps = out
}

// cursor is at ps's first posting.
func (ps *postings) cursor() postingCursor {
	c := postingCursor{b: ps.b}
	c.next()
	return c
}

// postingCursor reads postings in order: num and tf are the current
// one's, while ok.
type postingCursor struct {
	b   []byte
	num uint32
	tf  uint16
	ok  bool
}

func (c *postingCursor) next() {
	if b := c.b; len(b) >= 2 && b[0] < 0x80 && b[1] < 0x80 { // a byte each, as most are
		c.b, c.num, c.tf, c.ok = b[2:], c.num+uint32(b[0]), uint16(b[1]), true
		return
	}
	c.decode()
}

func (c *postingCursor) decode() {
	if c.ok = len(c.b) > 0; !c.ok {
		return
	}
	d, n := binary.Uvarint(c.b)
	tf, m := binary.Uvarint(c.b[n:])
	c.b, c.num, c.tf = c.b[n+m:], c.num+uint32(d), uint16(tf)
}
