package wall

import (
	"cmp"
	"slices"
	"time"
)

// orderWindow is how long a message from another node waits for those
// sent before it. Gossipsub validates messages on several goroutines, and
// a message may come by another path than the one before it, so messages
// from one node arrive slightly out of order; a message still missing
// after orderWindow is taken as lost, and the ones after it go on.
const orderWindow = 250 * time.Millisecond

// maxHeld bounds the messages waiting for a missing one; past it, the
// oldest go on without waiting.
const maxHeld = 1024

// sequencer puts one node's messages back in the order its room sent them
// (by Seq within the room's Epoch). A message waits until those before it
// came, or at most orderWindow; one that comes after a later one went on
// is dropped, so what is delivered is always in order.
type sequencer struct {
	epoch uint64
	next  uint64 // the next Seq due; 0 when not known yet
	held  []held // sorted by Seq
}

type held struct {
	w  *wireMsg
	at time.Time
}

// start tells the sequencer where epoch's messages are: seq is the last
// one sent (as a roster snapshot reports it). It does nothing when the
// sequencer already knows.
func (q *sequencer) start(epoch, seq uint64) {
	if epoch != q.epoch {
		q.epoch, q.next, q.held = epoch, 0, nil
	}
	if q.next == 0 {
		q.next = seq + 1
		if len(q.held) > 0 && q.held[0].w.Seq < q.next {
			q.next = q.held[0].w.Seq // sent before the snapshot, arrived before it
		}
	}
}

// add takes message w, which came at now, and returns the messages to
// deliver now, in order, and whether w came too late to be delivered.
func (q *sequencer) add(w *wireMsg, now time.Time) (ready []*wireMsg, late bool) {
	if w.Epoch != q.epoch {
		ready = q.drain() // the node's previous room is gone: what it sent goes on
		q.epoch, q.next = w.Epoch, 0
	}
	if w.Seq == 1 && q.next == 0 {
		q.next = 1 // the room's first message: nothing came before it
	}
	i, dup := slices.BinarySearchFunc(q.held, w.Seq, func(h held, seq uint64) int { return cmp.Compare(h.w.Seq, seq) })
	if dup || (q.next != 0 && w.Seq < q.next) {
		return ready, true
	}
	q.held = slices.Insert(q.held, i, held{w: w, at: now})
	return append(ready, q.release(now)...), false
}

// release returns the held messages due at now: the next one in order,
// and any that waited orderWindow for those before it.
func (q *sequencer) release(now time.Time) []*wireMsg {
	var out []*wireMsg
	for len(q.held) > 0 {
		h := q.held[0]
		if h.w.Seq != q.next && now.Sub(h.at) < orderWindow && len(q.held) <= maxHeld {
			break
		}
		out = append(out, h.w)
		q.next = h.w.Seq + 1
		q.held = q.held[1:]
	}
	if len(q.held) == 0 {
		q.held = nil
	}
	return out
}

// drain returns every held message, in order.
func (q *sequencer) drain() []*wireMsg {
	out := make([]*wireMsg, 0, len(q.held))
	for _, h := range q.held {
		out = append(out, h.w)
	}
	q.held = nil
	return out
}

// due is when release has something to return even if nothing more
// comes; zero when nothing is held.
func (q *sequencer) due() time.Time {
	if len(q.held) == 0 {
		return time.Time{}
	}
	return q.held[0].at.Add(orderWindow)
}
