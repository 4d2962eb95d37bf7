package wall

import (
	"math"
	"slices"
	"testing"
	"time"
)

func TestSequencer(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	type step struct {
		epoch, seq uint64        // a message comes (seq 0: only time passes)
		after      time.Duration // since t0
		start      uint64        // with seq 0 and start > 0: a snapshot of epoch says start-1 was sent last
		whole      bool          // with start: this room listened while they were sent
		word       uint64        // with seq 0 and word > 0: a leave says word was sent last
		want       []uint64      // delivered at this step, in order
		late       bool
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"in order", []step{{epoch: 1, seq: 1, want: []uint64{1}}, {epoch: 1, seq: 2, want: []uint64{2}}}},
		{"swapped", []step{
			{epoch: 1, seq: 1, want: []uint64{1}},
			{epoch: 1, seq: 3},
			{epoch: 1, seq: 2, want: []uint64{2, 3}},
		}},
		{"lost, then late", []step{
			{epoch: 1, seq: 1, want: []uint64{1}},
			{epoch: 1, seq: 3, after: time.Millisecond},
			{epoch: 1, seq: 4, after: 2 * time.Millisecond},
			{after: orderWindow},
			{after: orderWindow + time.Millisecond, want: []uint64{3, 4}},
			{epoch: 1, seq: 2, after: time.Second, late: true},
			{epoch: 1, seq: 5, after: time.Second, want: []uint64{5}},
		}},
		{"duplicate", []step{{epoch: 1, seq: 1, want: []uint64{1}}, {epoch: 1, seq: 1, late: true}}},
		{"joined mid-sequence: the snapshot tells where", []step{
			{start: 41},
			{epoch: 1, seq: 41, want: []uint64{41}},
		}},
		{"a snapshot while listening: what it says was sent still comes", []step{
			{epoch: 1, start: 3, whole: true},
			{epoch: 1, seq: 2, after: time.Millisecond},
			{epoch: 1, seq: 1, after: 2 * time.Millisecond, want: []uint64{1, 2}},
			{epoch: 1, seq: 3, after: 3 * time.Millisecond, want: []uint64{3}},
		}},
		{"a snapshot while listening gives up on what never comes", []step{
			{epoch: 1, start: 3, whole: true},
			{epoch: 1, seq: 3, after: time.Millisecond},
			{after: orderWindow, want: []uint64{3}},
			{epoch: 1, seq: 1, after: time.Second, late: true},
		}},
		{"a snapshot of the next room: the room before's held messages go on", []step{
			{epoch: 1, seq: 1, want: []uint64{1}},
			{epoch: 1, seq: 3},
			{epoch: 2, start: 1, whole: true, want: []uint64{3}},
			{epoch: 2, seq: 1, want: []uint64{1}},
		}},
		{"a message of a room replaced since is late", []step{
			{epoch: 1, seq: 1, want: []uint64{1}},
			{epoch: 2, seq: 1, want: []uint64{1}},
			{epoch: 1, seq: 2, late: true},
			{epoch: 2, seq: 2, want: []uint64{2}},
		}},
		{"a message of an earlier room come late leaves the current one alone", []step{
			{epoch: 5, seq: 1, want: []uint64{1}},
			{epoch: 3, seq: 7, late: true},
			{epoch: 5, seq: 2, want: []uint64{2}},
		}},
		{"a message before the snapshot goes on at once", []step{
			{epoch: 1, seq: 1, want: []uint64{1}},
			{epoch: 1, seq: 2, want: []uint64{2}},
		}},
		{"held before the snapshot, released by it", []step{
			{epoch: 1, seq: 5},
			{epoch: 1, start: 5, want: []uint64{5}},
		}},
		{"unknown start waits out the window", []step{
			{epoch: 1, seq: 8},
			{epoch: 1, seq: 7},
			{after: orderWindow, want: []uint64{7, 8}},
		}},
		{"a leave gives up on the messages before it after the window", []step{
			{epoch: 1, seq: 1, want: []uint64{1}},
			{word: 3, after: time.Millisecond},
			{epoch: 1, seq: 3, after: 2 * time.Millisecond},
			{after: orderWindow},
			{after: orderWindow + time.Millisecond, want: []uint64{3}},
			{epoch: 1, seq: 2, after: time.Second, late: true},
		}},
		{"a leave waits for the last message before it", []step{
			{epoch: 1, seq: 1, want: []uint64{1}},
			{word: 2},
			{epoch: 1, seq: 2, after: time.Millisecond, want: []uint64{2}},
			{after: time.Second},
			{epoch: 1, seq: 3, after: time.Second, want: []uint64{3}},
		}},
		{"a message the leave gave up on is late", []step{
			{epoch: 1, seq: 1, want: []uint64{1}},
			{word: 2},
			{after: orderWindow},
			{epoch: 1, seq: 2, after: time.Second, late: true},
		}},
		{"a new epoch: the old one's held messages go on", []step{
			{epoch: 1, seq: 1, want: []uint64{1}},
			{epoch: 1, seq: 3},
			{epoch: 2, seq: 1, want: []uint64{3, 1}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var q sequencer
			for i, st := range tc.steps {
				now := t0.Add(st.after)
				var got []*wireMsg
				late := false
				switch {
				case st.seq != 0:
					got, late = q.add(&wireMsg{Epoch: st.epoch, Seq: st.seq}, now)
				case st.start != 0:
					got = q.start(max(st.epoch, 1), st.start-1, st.whole, now)
				case st.word != 0:
					if q.passed(1, st.word) {
						t.Fatalf("step %d: messages up to %d passed already", i, st.word)
					}
					q.expect(st.word, now)
				default:
					got = q.release(now)
				}
				var seqs []uint64
				for _, w := range got {
					seqs = append(seqs, w.Seq)
				}
				if !slices.Equal(seqs, st.want) || late != st.late {
					t.Fatalf("step %d: delivered %v (late %v), want %v (late %v)", i, seqs, late, st.want, st.late)
				}
			}
		})
	}
}

// TestCountersOutOfRange: a peer's seq or rev near the top of uint64
// (where seq+1 wraps to 0 and a sequencer would wait for ever) is refused
// on the topic and in a roster.
func TestCountersOutOfRange(t *testing.T) {
	t.Parallel()
	huge := uint64(math.MaxUint64)
	for _, w := range []wireMsg{
		{T: wireBye, Epoch: 1, Seq: huge},
		{T: wireBye, Seq: maxCount + 1},
		{T: wireMessage, ID: "m", TS: 1, Epoch: 1, Seq: huge, From: "a", Payload: []byte(`1`)},
		{T: wireLeave, Epoch: 1, Rev: huge, Seq: 1, Member: &member{Agent: "a", Vis: VisPublic}},
	} {
		if w.check("c_x", newProofMemory()) == nil {
			t.Errorf("%s with seq %d rev %d accepted", w.T, w.Seq, w.Rev)
		}
	}
	if (&wireMsg{T: wireBye, Epoch: 1, Seq: maxCount}).check("c_x", newProofMemory()) != nil {
		t.Error("a bye at maxCount refused")
	}
	for _, ro := range []roster{{Epoch: 1, Seq: huge}, {Epoch: 1, Rev: maxCount + 1}} {
		if ro.check("c_x", newProofMemory()) == nil {
			t.Errorf("roster seq %d rev %d accepted", ro.Seq, ro.Rev)
		}
	}
}
