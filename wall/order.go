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
// after orderWindow is taken as lost, and the ones after it go on. A
// second: on a loaded node, validation may hold one message a few hundred
// milliseconds behind the next, and a message given up on is lost for
// good, while the wait costs only when a message really is lost (rare).
const orderWindow = time.Second

// maxHeld bounds the messages waiting for a missing one; past it, the
// oldest go on without waiting.
const maxHeld = 1024

// sequencer puts one node's messages back in the order its room sent them
// (by Seq within the room's Epoch). A message waits until those before it
// came, or at most orderWindow; one that comes after a later one went on
// is dropped, so what is delivered is always in order.
//
// What the node says about its members goes after the messages it sent
// before (a member's leave, the node's goodbye): such a word carries the
// last Seq sent, and waits (passed) until those messages are delivered,
// or given up on after orderWindow (expect).
type sequencer struct {
	epoch uint64 // the node's room whose messages are in order here
	next  uint64 // the next Seq due; 0 when not known yet
	held  []held // sorted by Seq
	// until is the last Seq that a word waiting since untilAt says was
	// sent; 0 when no word waits.
	until   uint64
	untilAt time.Time
}

type held struct {
	w  *wireMsg
	at time.Time
}

// start tells the sequencer where epoch's messages are: seq is the last
// one sent (as a roster snapshot reports it). With whole (this room was
// listening while they were sent), those still on their way will come, and
// are waited for, at most orderWindow; otherwise they went before this
// room listened, and the messages after seq are due. It returns the
// messages that go on now: those the node's room before left waiting, and
// those now due. It does nothing more when the sequencer knows already.
func (q *sequencer) start(epoch, seq uint64, whole bool, now time.Time) []*wireMsg {
	var ready []*wireMsg
	if epoch != q.epoch {
		ready = q.switchTo(epoch)
	}
	if q.next != 0 {
		return ready
	}
	q.next = seq + 1
	if whole {
		q.next = 1
		q.expect(seq, now)
	}
	if len(q.held) > 0 && q.held[0].w.Seq < q.next {
		q.next = q.held[0].w.Seq // sent before the snapshot, arrived before it
	}
	return append(ready, q.release(now)...)
}

// switchTo goes on to the node's room of epoch: what the room before left
// waiting goes on (it is returned).
func (q *sequencer) switchTo(epoch uint64) []*wireMsg {
	ready := q.drain()
	q.epoch, q.next, q.until = epoch, 0, 0
	return ready
}

// ended reports whether epoch is of a room the node replaced since the
// one the sequencer follows: a node's rooms have increasing epochs
// (Service.nextEpoch), so a message of an earlier one is late.
func (q *sequencer) ended(epoch uint64) bool {
	return epoch < q.epoch
}

// add takes message w, which came at now, and returns the messages to
// deliver now, in order, and whether w came too late to be delivered.
func (q *sequencer) add(w *wireMsg, now time.Time) (ready []*wireMsg, late bool) {
	if q.ended(w.Epoch) {
		return nil, true // its room's successor is followed already
	}
	if w.Epoch != q.epoch {
		ready = q.switchTo(w.Epoch)
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
// and any that waited orderWindow for those before it. Past orderWindow
// after a word that waits for them came (expect), the messages it waits
// for that are still missing are taken as lost.
func (q *sequencer) release(now time.Time) []*wireMsg {
	var out []*wireMsg
	if q.until > 0 && q.until >= q.next && now.Sub(q.untilAt) >= orderWindow {
		for len(q.held) > 0 && q.held[0].w.Seq <= q.until {
			out = append(out, q.pop())
		}
		q.next = q.until + 1
	}
	for len(q.held) > 0 {
		h := q.held[0]
		if h.w.Seq != q.next && now.Sub(h.at) < orderWindow && len(q.held) <= maxHeld {
			break
		}
		out = append(out, q.pop())
	}
	if len(q.held) == 0 {
		q.held = nil
	}
	return out
}

// pop takes the first held message, the next in order.
func (q *sequencer) pop() *wireMsg {
	w := q.held[0].w
	q.next = w.Seq + 1
	q.held = q.held[1:]
	return w
}

// passed reports whether every message of epoch up to seq is delivered or
// given up on: a word of the node that says seq was its last goes on.
func (q *sequencer) passed(epoch, seq uint64) bool {
	// Another epoch: the sequencer went on to the node's next room, and
	// delivered what the earlier one sent (switchTo); or the word is of a
	// room whose messages it does not follow, and nothing is to wait for.
	return seq == 0 || epoch != q.epoch || (q.next != 0 && q.next > seq)
}

// expect notes that a word which came at now waits for the messages up to
// seq: those still missing orderWindow later are given up on (release).
func (q *sequencer) expect(seq uint64, now time.Time) {
	if seq > q.until {
		q.until, q.untilAt = seq, now
	}
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

// due is when release has something to do even if nothing more comes
// (deliver what waited, give up on what a word waits for); zero when
// nothing waits.
func (q *sequencer) due() time.Time {
	var at time.Time
	if len(q.held) > 0 {
		at = q.held[0].at.Add(orderWindow)
	}
	if q.until >= q.next && q.until > 0 && (at.IsZero() || q.untilAt.Add(orderWindow).Before(at)) {
		at = q.untilAt.Add(orderWindow)
	}
	return at
}
