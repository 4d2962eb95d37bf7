package wall

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/agentmesh/mesh/internal/clock"
)

// viewRoom is a room with no sockets whose goroutines never run, so that a
// test sees the decision to fetch a roster (remoteNode.fetching) without
// a fetch. It runs on a manual clock (viewClock).
func viewRoom() *room {
	svc := &Service{ctx: context.Background(), log: slog.New(slog.DiscardHandler), proofs: newProofMemory(),
		cfg: Config{Clock: clock.NewManual(time.Unix(1_800_000_000, 0))}}
	svc.cfg.Tuning.fill()
	r := newRoom(svc, &Cluster{Record: Record{ID: "c_view", Visibility: Public}}, "")
	r.stopping = true
	return r
}

// viewClock is the clock of a viewRoom.
func viewClock(r *room) *clock.Manual { return r.svc.cfg.Clock.(*clock.Manual) }

func TestRosterView(t *testing.T) {
	t.Parallel()
	const p = peer.ID("node-b")
	m := func(h string) member { return member{Agent: h, Vis: VisPublic} }
	join := func(epoch, rev uint64, h string) *wireMsg {
		mm := m(h)
		return &wireMsg{T: wireJoin, Member: &mm, Epoch: epoch, Rev: rev}
	}
	leave := func(epoch, rev uint64, h string) *wireMsg {
		w := join(epoch, rev, h)
		w.T = wireLeave
		return w
	}
	digestOf := func(hs ...string) string {
		var d digest
		for _, h := range hs {
			d.flip(m(h))
		}
		return d.String()
	}
	view := func(r *room) []string { return slices.Sorted(maps.Keys(r.remote[p].members)) }

	r := viewRoom()
	r.setRoster(p, roster{Epoch: 7, Rev: 3, Members: []member{m("a"), m("b")}})
	r.delta(p, join(7, 5, "c")) // early: waits for rev 4
	if got := view(r); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("a delta applied before the one it follows: %v", got)
	}
	r.delta(p, leave(7, 4, "b"))
	r.delta(p, join(7, 3, "b")) // already in the snapshot
	if got, n := view(r), r.remote[p]; !slices.Equal(got, []string{"a", "c"}) || n.rev != 5 || len(n.pending) != 0 {
		t.Fatalf("after the missing delta: %v at rev %d, %d pending", got, n.rev, len(n.pending))
	}
	r.setRoster(p, roster{Epoch: 7, Rev: 4, Members: []member{m("a")}}) // older than the view
	if got := view(r); !slices.Equal(got, []string{"a", "c"}) {
		t.Fatalf("an old snapshot replaced a newer view: %v", got)
	}

	fetching := func() bool { return r.remote[p].fetching }
	r.beatFrom(p, &wireMsg{T: wireBeat, Epoch: 7, Rev: 5, Digest: digestOf("a", "c")})
	if fetching() {
		t.Fatal("a view in step with the beat is fetched")
	}
	r.beatFrom(p, &wireMsg{T: wireBeat, Epoch: 7, Rev: 6, Digest: digestOf("a")})
	if fetching() {
		t.Fatal("fetched at the first beat ahead of the view: its delta may be on the way")
	}
	r.beatFrom(p, &wireMsg{T: wireBeat, Epoch: 7, Rev: 6, Digest: digestOf("a")})
	if !fetching() {
		t.Fatal("a delta lost for a whole beat interval: no fetch")
	}
	r.remote[p].fetching = false
	r.delta(p, leave(7, 6, "c"))
	r.beatFrom(p, &wireMsg{T: wireBeat, Epoch: 7, Rev: 6, Digest: digestOf("x")})
	if !fetching() {
		t.Fatal("a view at the beat's rev with another digest: no fetch")
	}

	// The node restarted its room: a new epoch.
	r.remote[p].fetching = false
	r.delta(p, join(9, 2, "d"))
	if !fetching() || !slices.Equal(view(r), []string{"a"}) {
		t.Fatalf("a delta of a new epoch: fetching %v, view %v", fetching(), view(r))
	}
	r.setRoster(p, roster{Epoch: 9, Rev: 1, Members: []member{m("e")}})
	if got := view(r); !slices.Equal(got, []string{"d", "e"}) || r.remote[p].rev != 2 {
		t.Fatalf("the new epoch's snapshot and the delta that came ahead: %v at rev %d", got, r.remote[p].rev)
	}
}

// TestViewBounds: strangers (nodes heard only on the topic, where keys
// cost nothing) get at most maxStrangers views; a node that proves it
// serves the cluster gets one even then, up to maxNodes.
func TestViewBounds(t *testing.T) {
	t.Parallel()
	r := viewRoom()
	beat := &wireMsg{T: wireBeat, Epoch: 1, Digest: digest{}.String()}
	stranger := func(i int) peer.ID { return peer.ID(fmt.Sprintf("stranger-%d", i)) }
	for i := range maxStrangers + 10 {
		r.beatFrom(stranger(i), beat)
		r.deliverRemote(stranger(i), &wireMsg{T: wireMessage, ID: "m", Epoch: 1, Seq: 1})
	}
	if len(r.remote) != maxStrangers || r.strangers != maxStrangers {
		t.Fatalf("%d views, %d strangers, want %d", len(r.remote), r.strangers, maxStrangers)
	}
	m := member{Agent: "a", Vis: VisPublic}
	r.setRoster("honest", roster{Epoch: 3, Rev: 1, Members: []member{m}})
	if n := r.remote["honest"]; n == nil || !n.known || len(n.members) != 1 {
		t.Fatalf("a node's roster refused while strangers fill their views: %+v", n)
	}
	r.setRoster(stranger(0), roster{Epoch: 1})
	r.forget([]peer.ID{stranger(1)}, 0)
	if r.strangers != maxStrangers-2 || !r.remote[stranger(0)].known {
		t.Fatalf("%d strangers after one proved itself and one was forgotten", r.strangers)
	}
	for i := range maxNodes {
		r.setRoster(peer.ID(fmt.Sprintf("node-%d", i)), roster{Epoch: 1})
	}
	if known := len(r.remote) - r.strangers; known != maxNodes {
		t.Fatalf("%d known nodes, want at most %d", known, maxNodes)
	}
}

// TestRosterBounds: a node's view past maxRoster (join deltas with fresh
// handles) or the room's views past maxRemoteMembers are refused: emptied,
// and not fetched again at each beat, for refuseFor.
func TestRosterBounds(t *testing.T) {
	t.Parallel()
	members := func(prefix string, n int) []member {
		out := make([]member, n)
		for i := range out {
			out[i] = member{Agent: fmt.Sprintf("%s%d", prefix, i), Vis: VisPublic}
		}
		return out
	}
	join := func(rev uint64, h string) *wireMsg {
		return &wireMsg{T: wireJoin, Member: &member{Agent: h, Vis: VisPublic}, Epoch: 1, Rev: rev}
	}
	beat := &wireMsg{T: wireBeat, Epoch: 1, Rev: 1, Digest: digest{}.String()}

	r := viewRoom()
	const p = peer.ID("node-b")
	r.setRoster(p, roster{Epoch: 1, Rev: 1, Members: members("m", maxRoster)})
	r.delta(p, join(2, "m0")) // a handle it has: no growth
	r.delta(p, join(3, "one-too-many"))
	n := r.remote[p]
	if len(n.members) != 0 || r.remoteMembers != 0 || !r.refusingLocked(n) {
		t.Fatalf("a view grown past maxRoster: %d members (%d in the room), refused %v", len(n.members), r.remoteMembers, n.refused)
	}
	r.beatFrom(p, beat)
	r.delta(p, join(1, "again"))
	if n.fetching || len(n.members) != 0 {
		t.Fatalf("a refused view: fetching %v, %d members", n.fetching, len(n.members))
	}
	r.beats = n.refused // the while passed
	r.beatFrom(p, beat)
	if !n.fetching {
		t.Fatal("a refused view is not fetched anew once the while passed")
	}

	r = viewRoom()
	node := func(i int) peer.ID { return peer.ID(fmt.Sprintf("node-%d", i)) }
	for i := range maxRemoteMembers / maxRoster {
		r.setRoster(node(i), roster{Epoch: 1, Rev: 1, Members: members(fmt.Sprintf("n%d-", i), maxRoster)})
	}
	if r.remoteMembers != maxRemoteMembers {
		t.Fatalf("%d members followed, want %d", r.remoteMembers, maxRemoteMembers)
	}
	r.setRoster("one-more", roster{Epoch: 1, Rev: 1, Members: members("x", 1)})
	r.delta(node(0), join(2, "fresh"))
	if r.remoteMembers != maxRemoteMembers-maxRoster || len(r.remote["one-more"].members) != 0 {
		t.Fatalf("past maxRemoteMembers: %d members followed", r.remoteMembers)
	}
}

// TestByeOfAnEarlierRoom: a node's room shut down and a new one started at
// once (a fast reconnect) and exchanged rosters here; the goodbye of the
// room before, arriving late, leaves the new view alone. The new room's
// goodbye, or one without an epoch (the earlier release), forgets it.
func TestByeOfAnEarlierRoom(t *testing.T) {
	t.Parallel()
	const p = peer.ID("node-b")
	r := viewRoom()
	online := func() bool { _, ok := r.presentLocked("a"); return ok }
	r.setRoster(p, roster{Epoch: 9, Rev: 1, Members: []member{{Agent: "a", Vis: VisPublic}}})
	r.bye(p, &wireMsg{T: wireBye, Epoch: 7})
	if !online() {
		t.Fatal("the goodbye of the room before took the new room's members offline")
	}
	r.bye(p, &wireMsg{T: wireBye, Epoch: 9})
	if online() || r.remote[p] != nil {
		t.Fatal("the room's own goodbye did not forget it")
	}
	r.setRoster(p, roster{Epoch: 9, Rev: 1, Members: []member{{Agent: "a", Vis: VisPublic}}})
	r.bye(p, &wireMsg{T: wireBye})
	if online() {
		t.Fatal("a goodbye without an epoch did not forget the node")
	}
}

// TestLeaveWaitsForMessages: a member's leave, or its node's goodbye, that
// overtakes messages the node sent before it waits for them, or gives up
// on them after orderWindow; a message given up on is not delivered after
// the leave.
func TestLeaveWaitsForMessages(t *testing.T) {
	t.Parallel()
	const p = peer.ID("node-b")
	a := member{Agent: "a", Vis: VisPublic}
	msg := func(seq uint64) *wireMsg {
		return &wireMsg{T: wireMessage, ID: fmt.Sprint("m", seq), From: "a", TS: 1, Payload: []byte(`"hi"`), Epoch: 9, Seq: seq}
	}
	for _, tc := range []struct {
		name  string
		leave *wireMsg
	}{
		{"leave", &wireMsg{T: wireLeave, Member: &a, Epoch: 9, Rev: 2, Seq: 3}},
		{"goodbye", &wireMsg{T: wireBye, Epoch: 9, Seq: 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := viewRoom()
			online := func() bool { _, ok := r.presentLocked("a"); return ok }
			word := func() {
				if tc.leave.T == wireBye {
					r.bye(p, tc.leave)
				} else {
					r.delta(p, tc.leave)
				}
			}
			r.setRoster(p, roster{Epoch: 9, Rev: 1, Seq: 0, Members: []member{a}})
			r.deliverRemote(p, msg(1))
			word()
			if !online() {
				t.Fatal("the leave went before the messages sent before it")
			}
			r.deliverRemote(p, msg(2))
			if !online() {
				t.Fatal("the leave went before the last message sent before it")
			}
			viewClock(r).Advance(orderWindow) // message 3 is lost
			r.flushAt(p, viewClock(r).Now())
			if online() {
				t.Fatal("the leave still waits for a message lost long ago")
			}
			if tc.leave.T == wireBye {
				return // the node is forgotten
			}
			r.deliverRemote(p, msg(3))
			if n := r.remote[p]; n.order.next != 4 || len(n.order.held) != 0 {
				t.Fatalf("the lost message, come late, was taken: next %d", n.order.next)
			}
		})
	}
}

// TestRosterRepairWaitsForMessages: what a fetched snapshot, or a node's
// answer that it serves the cluster no more, says of members who left is
// shown only after the messages they sent before; and such an answer to a
// fetch asked before the node's next room exchanged rosters here leaves
// that room's view alone.
func TestRosterRepairWaitsForMessages(t *testing.T) {
	t.Parallel()
	const p = peer.ID("node-b")
	a := member{Agent: "a", Vis: VisPublic}
	msg := func(epoch, seq uint64) *wireMsg {
		return &wireMsg{T: wireMessage, ID: fmt.Sprint("m", epoch, seq), From: "a", TS: 1, Payload: []byte(`"hi"`), Epoch: epoch, Seq: seq}
	}
	listening := func() *room {
		r := viewRoom()
		close(r.ready)
		return r
	}
	online := func(r *room) bool { _, ok := r.presentLocked("a"); return ok }

	t.Run("a stale fetch answered after the next room started", func(t *testing.T) {
		r := listening()
		r.setRoster(p, roster{Epoch: 7, Rev: 1, Members: []member{a}})
		r.deliverRemote(p, msg(7, 1))
		r.bye(p, &wireMsg{T: wireBye, Epoch: 7, Seq: 1})
		r.delta(p, &wireMsg{T: wireJoin, Member: &a, Epoch: 7, Rev: 1}) // late: fetches
		if n := r.remote[p]; n == nil || !n.fetching {
			t.Fatal("the late join fetched nothing")
		}
		r.setRoster(p, roster{Epoch: 9, Rev: 1, Members: []member{a}}) // the next room
		r.fetched(p, 0, roster{}, errNotServing)                       // between the two rooms
		if !online(r) {
			t.Fatal("an answer from between two rooms took the next room's members offline")
		}
	})
	t.Run("a snapshot without the member", func(t *testing.T) {
		r := listening()
		r.setRoster(p, roster{Epoch: 9, Rev: 1, Members: []member{a}})
		r.fetched(p, 9, roster{Epoch: 9, Rev: 2, Seq: 2}, nil)
		if !online(r) {
			t.Fatal("the member went offline before its messages came")
		}
		r.deliverRemote(p, msg(9, 2))
		if !online(r) {
			t.Fatal("the member went offline before its first message came")
		}
		r.deliverRemote(p, msg(9, 1))
		if online(r) {
			t.Fatal("the member is still online after its messages came")
		}
	})
	t.Run("not serving any more", func(t *testing.T) {
		r := listening()
		r.setRoster(p, roster{Epoch: 9, Rev: 1, Members: []member{a}})
		r.fetched(p, 9, roster{}, errNotServing)
		r.deliverRemote(p, msg(9, 1))
		if !online(r) {
			t.Fatal("the node was forgotten at once: messages on their way would go after its members left")
		}
		viewClock(r).Advance(orderWindow)
		r.flushAt(p, viewClock(r).Now())
		if online(r) || r.remote[p] != nil {
			t.Fatal("the node is still there orderWindow after it said it serves the cluster no more")
		}
	})
	t.Run("the snapshot of a new room, while listening", func(t *testing.T) {
		r := listening()
		r.setRoster(p, roster{Epoch: 9, Rev: 1, Seq: 1, Members: []member{a}})
		r.delta(p, &wireMsg{T: wireLeave, Member: &a, Epoch: 9, Rev: 2, Seq: 1})
		if !online(r) {
			t.Fatal("the member went offline before the message the snapshot says it sent")
		}
		r.deliverRemote(p, msg(9, 1))
		if online(r) {
			t.Fatal("the member is still online after its message came")
		}
	})
}

// TestNextRoomOutlivesTheOneBefore: what a node's replaced room says late
// (its goodbye, a join) leaves alone what its next room sent; and a join
// of the next room that comes before the snapshot waits for it.
func TestNextRoomOutlivesTheOneBefore(t *testing.T) {
	t.Parallel()
	const p = peer.ID("node-b")
	a, b := member{Agent: "a", Vis: VisPublic}, member{Agent: "b", Vis: VisPublic}
	msg := func(epoch, seq uint64) *wireMsg {
		return &wireMsg{T: wireMessage, ID: fmt.Sprint("m", epoch, seq), From: "b", TS: 1, Payload: []byte(`"hi"`), Epoch: epoch, Seq: seq}
	}
	online := func(r *room, h string) bool { _, ok := r.presentLocked(h); return ok }

	t.Run("a late goodbye of the room before", func(t *testing.T) {
		r := viewRoom()
		r.setRoster(p, roster{Epoch: 7, Rev: 1, Members: []member{a}})
		r.deliverRemote(p, msg(9, 2)) // the next room's: held for its first message
		r.bye(p, &wireMsg{T: wireBye, Epoch: 7})
		n := r.remote[p]
		if n == nil || online(r, "a") {
			t.Fatal("want the room before's members gone and the node kept")
		}
		if len(n.order.held) != 1 || n.order.epoch != 9 {
			t.Fatalf("the next room's held message was dropped with the goodbye: %+v", n.order)
		}
	})
	t.Run("a join of the next room before its snapshot", func(t *testing.T) {
		r := viewRoom()
		r.setRoster(p, roster{Epoch: 7, Rev: 1, Members: []member{a}})
		r.delta(p, &wireMsg{T: wireJoin, Member: &b, Epoch: 9, Rev: 2}) // the snapshot (rev 1) is fetched
		r.deliverRemote(p, msg(7, 1))                                   // meanwhile
		r.setRoster(p, roster{Epoch: 9, Rev: 1, Members: []member{a}})
		if !online(r, "b") {
			t.Fatal("the join that came ahead of the snapshot was lost")
		}
	})
	t.Run("a late join of the room before", func(t *testing.T) {
		r := viewRoom()
		r.setRoster(p, roster{Epoch: 9, Rev: 1, Members: []member{b}})
		r.delta(p, &wireMsg{T: wireJoin, Member: &a, Epoch: 7, Rev: 1})
		if n := r.remote[p]; n.fetching || online(r, "a") {
			t.Fatal("a join of a replaced room was taken, or fetched a roster")
		}
	})
}

// TestOrderWindowOnAClockThatStandsStill: a node hands its wall a clock
// whose Now its tests hold still, its timers running in real time. Each
// message that came ahead of a missing one still waits orderWindow for
// it, measured as the timers run: a wait armed by an earlier gap does not
// give up on a message missing for a moment only.
func TestOrderWindowOnAClockThatStandsStill(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const p = peer.ID("node-b") // a stranger: no receipts
		msg := func(seq uint64) *wireMsg {
			return &wireMsg{T: wireMessage, ID: fmt.Sprint("m", seq), From: "a", TS: 1, Payload: []byte(`"hi"`), Epoch: 9, Seq: seq}
		}
		r := viewRoom()
		still := time.Unix(1_800_000_000, 0)
		r.svc.cfg.Clock = clock.WithNow(func() time.Time { return still })
		r.stopping = false // its waits run
		defer func() { r.cancel(); r.wg.Wait() }()
		next := func() uint64 {
			r.mu.Lock()
			defer r.mu.Unlock()
			return r.remote[p].order.next
		}
		r.deliverRemote(p, msg(1))
		r.deliverRemote(p, msg(3)) // ahead of 2: a wait is armed
		time.Sleep(100 * time.Millisecond)
		r.deliverRemote(p, msg(2))
		time.Sleep(800 * time.Millisecond)
		r.deliverRemote(p, msg(5)) // ahead of 4, 0.9 s after the first wait was armed
		time.Sleep(200 * time.Millisecond)
		synctest.Wait()
		if got := next(); got != 4 {
			t.Fatalf("message 4, missing for 0.2 s, was given up on (next %d)", got)
		}
		time.Sleep(orderWindow)
		synctest.Wait()
		if got := next(); got != 6 {
			t.Fatalf("message 4, missing for orderWindow, is still waited for (next %d)", got)
		}
	})
}
