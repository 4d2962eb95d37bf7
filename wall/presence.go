package wall

import (
	"maps"
	"slices"
)

// Presence: a handle is online while some non-ghost socket with it is
// connected here, or some other node's roster, as seen here, lists it.
// Every change of that, for whatever reason (a socket, a delta, a roster,
// a node that went silent), is announced to this node's sockets as a
// presence frame.

// presentLocked reports whether handle h is online, and as which member:
// the one that proved its did, if a member holding h did (identity.go: the
// handle is that did's), else this node's, else another node's.
func (r *room) presentLocked(h string) (m member, on bool) {
	if lm := r.local[h]; lm != nil {
		m, on = lm.m, true
	}
	for _, n := range r.remote {
		if m.verified() {
			break
		}
		if rm, ok := n.members[h]; ok && prefer(m, on, rm) {
			m, on = rm, true
		}
	}
	return m, on
}

// prefer reports whether member m rather than cur (if any: ok) stands for
// their handle: cur is missing, or m proved its did and cur did not.
func prefer(cur member, ok bool, m member) bool { return !ok || (m.verified() && !cur.verified()) }

// change runs fn on the room's state and announces, to every socket but
// skip, the handles whose presence it changed. fn calls touch(h) before it
// changes anything that may bear on handle h. Frames are queued under the
// room's lock, so every socket sees changes in order.
func (r *room) change(skip *socket, fn func(touch func(h string))) {
	r.mu.Lock()
	defer r.mu.Unlock()
	type was struct {
		m  member
		on bool
	}
	var before map[string]was // made on first use: most messages touch nobody
	var touched []string
	fn(func(h string) {
		if before == nil {
			before = map[string]was{}
		}
		if _, ok := before[h]; !ok {
			m, on := r.presentLocked(h)
			before[h] = was{m, on}
			touched = append(touched, h)
		}
	})
	for _, h := range touched {
		m, now := r.presentLocked(h)
		if now == before[h].on && (!now || samePresence(m, before[h].m)) {
			continue // no change, or as the same member still online (a changed one, such as one that proved its did, is announced again)
		}
		status := "online"
		if !now {
			m, status = before[h].m, "offline"
		}
		f := text(encodeFrame(presenceFrame{Kind: KindPresence, Agent: h, DID: nullable(m.DID), Verified: m.verified(), Status: status}))
		for s := range r.sockets {
			if s != skip && !s.eventsOnly {
				s.send(f)
			}
		}
	}
}

// samePresence reports whether a and b make the same presence frame.
func samePresence(a, b member) bool { return a.DID == b.DID && a.verified() == b.verified() }

// members lists everyone online, on every node, sorted by handle.
func (r *room) members() []member {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.membersLocked()
}

func (r *room) membersLocked() []member {
	all := map[string]member{}
	for _, n := range r.remote {
		for h, m := range n.members {
			if cur, ok := all[h]; prefer(cur, ok, m) {
				all[h] = m
			}
		}
	}
	for h, lm := range r.local { // this node's, unless only another node's proved the did
		if cur, ok := all[h]; !ok || !prefer(lm.m, true, cur) {
			all[h] = lm.m
		}
	}
	return sortedMembers(all)
}

func sortedMembers(byHandle map[string]member) []member {
	out := make([]member, 0, len(byHandle))
	for _, h := range slices.Sorted(maps.Keys(byHandle)) {
		out = append(out, byHandle[h])
	}
	return out
}

// localRoster is a snapshot of this node's roster: its visible members,
// and the last message published (pubMu: a number taken is published).
func (r *room) localRoster() roster {
	r.pubMu.Lock()
	defer r.pubMu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	ro := roster{Epoch: r.epoch, Rev: r.rev, Seq: r.seq.Load(), Members: make([]member, 0, len(r.local))}
	for _, lm := range r.local {
		ro.Members = append(ro.Members, lm.m)
	}
	return ro
}

// localMember counts a handle's non-ghost sockets here; m is as the
// first of them connected.
type localMember struct {
	n int
	m member
}

// addLocked and removeLocked keep the sockets and the local members in
// step. They return the roster change (a join or leave delta to publish)
// when the handle came or went, else nil.
func (r *room) addLocked(s *socket) *wireMsg {
	r.sockets[s] = struct{}{}
	if s.ghost() {
		return nil
	}
	lm := r.local[s.handle]
	var w *wireMsg
	if lm == nil {
		lm, w = r.reserveLocked(s.member())
	}
	lm.n++
	return w
}

// reserveLocked adds member m, with no socket yet, to the roster.
func (r *room) reserveLocked(m member) (*localMember, *wireMsg) {
	lm := &localMember{m: m}
	r.local[m.Agent] = lm
	r.rev++
	r.digest.flip(m)
	return lm, &wireMsg{T: wireJoin, Member: &m, Epoch: r.epoch, Rev: r.rev}
}

func (r *room) removeLocked(s *socket) *wireMsg {
	if _, ok := r.sockets[s]; !ok {
		return nil
	}
	delete(r.sockets, s)
	lm := r.local[s.handle]
	if lm == nil || s.ghost() {
		return nil
	}
	if lm.n--; lm.n > 0 {
		return nil
	}
	delete(r.local, s.handle)
	r.rev++
	r.digest.flip(lm.m)
	// Seq: the other nodes show the leave only after the messages sent
	// before it (settleLocked); the member's own were all published, as a
	// socket leaves once its reads are done.
	return &wireMsg{T: wireLeave, Member: &lm.m, Epoch: r.epoch, Rev: r.rev, Seq: r.seq.Load()}
}
