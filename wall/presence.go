package wall

import (
	"maps"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Presence: a handle is online while some non-ghost socket with it is
// connected here, or some other node lists it in its roster. Every change of
// that, for whatever reason (a socket, a delta, a roster, a node that went
// silent), is announced to this node's sockets as a presence frame.

// presentLocked reports whether handle is online, and as which member.
func (r *room) presentLocked(h string) (member, bool) {
	if lm := r.local[h]; lm != nil {
		return lm.m, true
	}
	for _, n := range r.remote {
		if m, ok := n.members[h]; ok {
			return m, true
		}
	}
	return member{}, false
}

// change runs fn on the room's state and announces the handles among
// touched whose presence it changed to every socket but skip. Frames are
// queued under the room's lock, so every socket sees changes in order.
func (r *room) change(touched []string, skip *socket, fn func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	before := make(map[string]member, len(touched))
	for _, h := range touched {
		if m, ok := r.presentLocked(h); ok {
			before[h] = m
		}
	}
	fn()
	for _, h := range touched {
		m, now := r.presentLocked(h)
		was, wasOn := before[h]
		if now == wasOn {
			continue
		}
		status := "online"
		if !now {
			m, status = was, "offline"
		}
		f := outFrame{data: encodeFrame(presenceFrame{Kind: KindPresence, Agent: h, DID: nullable(m.DID), Status: status})}
		for s := range r.sockets {
			if s != skip {
				s.send(f)
			}
		}
	}
}

// onlineLocked lists every online handle, sorted.
func (r *room) onlineLocked() []string {
	set := map[string]bool{}
	for h := range r.local {
		set[h] = true
	}
	for _, n := range r.remote {
		for h := range n.members {
			set[h] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// members lists everyone online, on every node, sorted by handle.
func (r *room) members() []member {
	r.mu.Lock()
	defer r.mu.Unlock()
	all := map[string]member{}
	for _, n := range r.remote {
		maps.Copy(all, n.members)
	}
	for h, lm := range r.local {
		all[h] = lm.m
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

// localMembers are this node's visible members, as its roster reports them.
func (r *room) localMembers() []member {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]member, 0, len(r.local))
	for _, lm := range r.local {
		out = append(out, lm.m)
	}
	return out
}

// localMember counts a handle's non-ghost sockets here; m is as the
// first of them connected.
type localMember struct {
	n int
	m member
}

// addLocked and removeLocked keep the sockets and the local members in step.
func (r *room) addLocked(s *socket) {
	r.sockets[s] = struct{}{}
	if s.ghost() {
		return
	}
	lm := r.local[s.handle]
	if lm == nil {
		lm = &localMember{m: member{Agent: s.handle, DID: s.did, Vis: s.vis}}
		r.local[s.handle] = lm
	}
	lm.n++
}

func (r *room) removeLocked(s *socket) {
	if _, ok := r.sockets[s]; !ok {
		return
	}
	delete(r.sockets, s)
	if lm := r.local[s.handle]; lm != nil && !s.ghost() {
		if lm.n--; lm.n == 0 {
			delete(r.local, s.handle)
		}
	}
}

// node returns the record of remote node p, creating it (locked).
func (r *room) nodeLocked(p peer.ID) *remoteNode {
	n := r.remote[p]
	if n == nil {
		n = &remoteNode{members: map[string]member{}}
		r.remote[p] = n
	}
	n.seen = time.Now()
	return n
}

// setRoster replaces what node p reports; bye removes the node.
func (r *room) setRoster(p peer.ID, members []member, bye bool) {
	r.mu.Lock()
	touched := slices.Collect(maps.Keys(r.nodeOrEmpty(p)))
	r.mu.Unlock()
	for _, m := range members {
		touched = append(touched, m.Agent)
	}
	r.change(touched, nil, func() {
		if bye {
			delete(r.remote, p)
			return
		}
		n := r.nodeLocked(p)
		n.members = make(map[string]member, len(members))
		for _, m := range members {
			n.members[m.Agent] = m
		}
	})
}

func (r *room) nodeOrEmpty(p peer.ID) map[string]member {
	if n := r.remote[p]; n != nil {
		return n.members
	}
	return nil
}

// memberDelta applies a join or leave published by node p.
func (r *room) memberDelta(p peer.ID, m member, joined bool) {
	r.change([]string{m.Agent}, nil, func() {
		n := r.nodeLocked(p)
		if joined {
			n.members[m.Agent] = m
		} else {
			delete(n.members, m.Agent)
		}
	})
}

// expire forgets nodes whose last word is older than PresenceTimeout: a
// node that died without saying goodbye takes its members offline.
func (r *room) expire() {
	deadline := time.Now().Add(-r.svc.cfg.PresenceTimeout)
	r.mu.Lock()
	var gone []peer.ID
	var touched []string
	for p, n := range r.remote {
		if n.seen.Before(deadline) {
			gone = append(gone, p)
			touched = slices.AppendSeq(touched, maps.Keys(n.members))
		}
	}
	r.mu.Unlock()
	if len(gone) == 0 {
		return
	}
	r.change(touched, nil, func() {
		for _, p := range gone {
			if n := r.remote[p]; n != nil && n.seen.Before(deadline) {
				delete(r.remote, p)
			}
		}
	})
}
