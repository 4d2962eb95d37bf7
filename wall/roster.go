package wall

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Other nodes' rosters. A node's view of another's roster is built from
// snapshots (exchanged over the roster stream when either starts serving
// the cluster, and fetched when the view went wrong) and the deltas (join,
// leave) the other publishes on the topic. Each room has a random epoch and
// counts the changes of its roster (rev): a delta carries the rev its
// change made, a snapshot the rev it is at, and a beat, published every
// BeatInterval, the rev and the digest of the roster. So deltas apply in
// rev order (one arriving early waits for the missing ones), never twice
// and never over a newer snapshot; a view still short of the rev a beat
// announced by the next beat (a delta was lost), or at that rev with
// another digest, or of another epoch (the node restarted the room) is
// replaced by a snapshot fetched from the node.

// roster is a snapshot of a node's roster, as the roster stream carries it.
type roster struct {
	Epoch   uint64   `json:"epoch"`
	Rev     uint64   `json:"rev"`
	Seq     uint64   `json:"seq"` // the last message the room published
	Members []member `json:"members"`
}

// digestSize is the size of a roster digest, in bytes.
const digestSize = 16

// maxPending bounds the deltas a view holds while one is missing; past it
// they are dropped and the view waits for a snapshot.
const maxPending = 4096

// digest is a roster's digest: the XOR of a hash of each member, so that
// nodes agree on it whatever order they hold members in, and it is kept up
// to date member by member.
type digest [digestSize]byte

// flip adds m to the digest, or takes it out. A member's proof of key is
// left out, so that nodes of the release before proofs, which drop it,
// agree on digests with newer ones.
func (d *digest) flip(m member) {
	sum := sha256.Sum256([]byte(m.Agent + "\x00" + m.DID + "\x00" + m.Vis))
	subtle.XORBytes(d[:], d[:], sum[:digestSize])
}

func (d digest) String() string { return hex.EncodeToString(d[:]) }

// remoteNode is another node serving the cluster, as seen here.
type remoteNode struct {
	// known: a roster exchange with the node (when either started serving
	// the cluster, or a fetch since) proved it serves the cluster (in a
	// public cluster, with the rendezvous vouching for it: vouch.go). Until
	// then it is a stranger, heard only on the topic, where any peer may
	// sign with keys made up for the purpose: a stranger's view holds no
	// members (they come from snapshots), acks never wait for it, and it
	// gets no receipts.
	known    bool
	members  map[string]member
	digest   digest // of members
	epoch    uint64
	rev      uint64
	pending  map[uint64]*wireMsg // deltas past a missing one, by rev
	mark     uint64              // the rev a beat announced while the view lagged behind it
	seen     uint64              // the room's beats (room.beats) at its last word
	fetching bool                // its roster is being fetched
	order    sequencer           // its messages
	flushing bool                // a flushAt waits for what order holds
	bye      *wireMsg            // its goodbye, waiting for its messages
	snap     *roster             // a snapshot of its view's epoch, waiting for its messages
	// refused: until the room's beats reach it, the view stays empty
	// (refuseLocked).
	refused uint64
}

// Bounds on what a room holds of other nodes' rosters: a node reports at
// most maxRoster members (its own sockets are capped so, see admit), and
// the room follows at most maxRemoteMembers across the other nodes. A
// view that would pass either is refused for refuseFor.
const (
	maxRemoteMembers = 10 * maxRoster
	refuseFor        = time.Minute
)

// putMemberLocked adds m to node n's view, or replaces the member of its
// handle. It changes nothing and reports false when the view, or the
// room's views together, would pass their bounds.
func (r *room) putMemberLocked(n *remoteNode, m member) bool {
	if old, ok := n.members[m.Agent]; ok {
		n.digest.flip(old)
	} else {
		if len(n.members) >= maxRoster || r.remoteMembers >= maxRemoteMembers {
			return false
		}
		r.remoteMembers++
	}
	n.members[m.Agent] = m
	n.digest.flip(m)
	return true
}

func (r *room) removeMemberLocked(n *remoteNode, h string) {
	if old, ok := n.members[h]; ok {
		n.digest.flip(old)
		delete(n.members, h)
		r.remoteMembers--
	}
}

// clearViewLocked takes every member out of node n's view.
func (r *room) clearViewLocked(n *remoteNode, touch func(string)) {
	for h := range n.members {
		touch(h)
	}
	r.remoteMembers -= len(n.members)
	clear(n.members)
	n.digest = digest{}
}

// refuseLocked empties node n's view, which would pass maxRoster (the
// node misbehaves) or take the room past maxRemoteMembers (the cluster is
// larger than a room follows): for refuseFor, nothing the node says about
// its roster is applied or fetched; then a beat fetches it anew.
func (r *room) refuseLocked(n *remoteNode, touch func(string)) {
	r.clearViewLocked(n, touch)
	clear(n.pending)
	n.epoch, n.rev, n.mark = 0, 0, 0
	n.refused = r.beats + r.beatsFor(refuseFor)
	r.svc.log.Warn("a node's roster is over the bounds: its members are not shown here for a while",
		"cluster", r.cl.ID, "max_per_node", maxRoster, "max_total", maxRemoteMembers)
}

// Bounds on the views a room keeps of other nodes: so many known nodes
// (as many as a rendezvous returns), so many strangers. A stranger past
// the bound is not heard; a node registered at the rendezvous is fetched
// when the room renews its registration, and so becomes known (renew).
const (
	maxNodes     = 1000
	maxStrangers = 64
)

// nodeLocked returns the view of node p, creating a stranger's if there
// is room, and notes that p was heard from; nil when there is no room
// (what p says is dropped).
func (r *room) nodeLocked(p peer.ID) *remoteNode {
	n := r.remote[p]
	if n == nil {
		if r.strangers >= maxStrangers {
			return nil
		}
		n = newRemoteNode()
		r.remote[p] = n
		r.strangers++
	}
	n.seen = r.beats
	return n
}

// knowLocked is nodeLocked for a node that proved it serves the cluster:
// its view is known from now on. Nil when maxNodes are known already.
func (r *room) knowLocked(p peer.ID) *remoteNode {
	n := r.remote[p]
	if n == nil || !n.known {
		if len(r.remote)-r.strangers >= maxNodes {
			return nil
		}
		if n == nil {
			n = newRemoteNode()
			r.remote[p] = n
		} else {
			r.strangers--
		}
		n.known = true
	}
	n.seen = r.beats
	return n
}

func newRemoteNode() *remoteNode {
	return &remoteNode{members: map[string]member{}, pending: map[uint64]*wireMsg{}}
}

// setRoster makes snapshot ro the view of node p, with the deltas that
// came ahead of it, unless the view is newer. p proved it serves the
// cluster: its view is known. A snapshot of the view's epoch waits for the
// messages sent before it, like a leave: a member it lacks left after them.
func (r *room) setRoster(p peer.ID, ro roster) {
	r.change(nil, func(touch func(string)) {
		n := r.knowLocked(p)
		if n == nil {
			return
		}
		now := r.svc.waited()
		r.deliverReadyLocked(p, n, n.order.start(ro.Epoch, ro.Seq, r.listening(), now))
		switch {
		case ro.Epoch == n.epoch && ro.Rev < n.rev: // the view is newer
		case ro.Epoch == n.epoch && !n.order.passed(ro.Epoch, ro.Seq):
			n.snap = &ro
			n.order.expect(ro.Seq, now)
		default:
			r.applyRosterLocked(n, ro, touch)
		}
		r.settleLocked(p, n, touch)
	})
}

// applyRosterLocked makes snapshot ro the view of node n.
func (r *room) applyRosterLocked(n *remoteNode, ro roster, touch func(string)) {
	r.clearViewLocked(n, touch)
	if r.remoteMembers+len(ro.Members) > maxRemoteMembers {
		r.refuseLocked(n, touch)
		return
	}
	for _, m := range ro.Members { // at most maxRoster (roster.check)
		touch(m.Agent)
		r.putMemberLocked(n, m)
	}
	n.epoch, n.rev, n.mark, n.refused = ro.Epoch, ro.Rev, 0, 0
}

// listening reports whether the room has started: the other nodes'
// messages published from now on reach it.
func (r *room) listening() bool {
	select {
	case <-r.ready:
		return true
	default:
		return false
	}
}

// delta applies a join or leave published by node p, in rev order.
func (r *room) delta(p peer.ID, w *wireMsg) {
	fetch := false
	r.change(nil, func(touch func(string)) {
		n := r.nodeLocked(p)
		if n == nil || r.refusingLocked(n) || (w.Epoch == n.epoch && w.Rev <= n.rev) ||
			w.Epoch < n.epoch || n.order.ended(w.Epoch) {
			return // no room for its view, the view is refused, has it already, or it is of a room replaced since
		}
		if len(n.pending) >= maxPending {
			clear(n.pending)
		}
		n.pending[w.Rev] = w
		if w.Epoch != n.epoch {
			fetch = claimFetch(n) // no snapshot to apply it to
			return
		}
		r.settleLocked(p, n, touch)
	})
	if fetch {
		r.goroutine(func() { r.fetchRoster(p) })
	}
}

// settleLocked applies what node p said of its roster, in order, as far
// as the messages it sent before have been delivered: a member's leave, or
// the node's goodbye, is never shown before the member's last messages.
// What still waits goes on when the sequencer gives up on them.
func (r *room) settleLocked(p peer.ID, n *remoteNode, touch func(string)) {
	if ro := n.snap; ro != nil && (ro.Epoch != n.epoch || n.order.passed(ro.Epoch, ro.Seq)) {
		n.snap = nil
		if ro.Epoch == n.epoch && ro.Rev >= n.rev {
			r.applyRosterLocked(n, *ro, touch)
		}
	}
	r.drainLocked(n, touch)
	if w := n.bye; w != nil {
		switch {
		case w.Epoch != 0 && w.Epoch != n.epoch:
			n.bye = nil // the goodbye of a room the node has replaced
		case n.order.ended(w.Epoch):
			// The node's next room is followed already: only this room's
			// members go, and what the next one sent stays.
			n.bye = nil
			r.clearViewLocked(n, touch)
		case n.order.passed(w.Epoch, w.Seq):
			r.dropLocked(p, n, touch)
			return
		default:
			n.order.expect(w.Seq, r.svc.waited())
		}
	}
	if due := n.order.due(); !due.IsZero() && !n.flushing {
		n.flushing = true
		r.goroutine(func() { r.flushAt(p, due) })
	}
}

// drainLocked applies the pending deltas that follow the view's rev. A
// leave waits until the messages the node sent before it are delivered
// or given up on.
func (r *room) drainLocked(n *remoteNode, touch func(string)) {
	for w := n.pending[n.rev+1]; w != nil && w.Epoch == n.epoch; w = n.pending[n.rev+1] {
		if w.T == wireLeave && !n.order.passed(w.Epoch, w.Seq) {
			n.order.expect(w.Seq, r.svc.waited())
			break
		}
		delete(n.pending, n.rev+1)
		touch(w.Member.Agent)
		if w.T == wireLeave {
			r.removeMemberLocked(n, w.Member.Agent)
		} else if !r.putMemberLocked(n, *w.Member) {
			r.refuseLocked(n, touch)
			return
		}
		n.rev++
	}
	for rev, w := range n.pending {
		if w.Epoch < n.epoch || (w.Epoch == n.epoch && rev <= n.rev) {
			delete(n.pending, rev) // applied, or of a room replaced since; a later room's wait for its snapshot
		}
	}
}

// beatFrom notes that node p is alive and checks the view of its roster
// against what the beat announces, fetching a snapshot when it is wrong.
func (r *room) beatFrom(p peer.ID, w *wireMsg) {
	r.mu.Lock()
	n := r.nodeLocked(p)
	if n == nil || r.refusingLocked(n) {
		r.mu.Unlock()
		return
	}
	stale := false
	switch {
	case w.Epoch != n.epoch:
		stale = true
	case n.rev < w.Rev:
		// Deltas may still be on their way; still missing at the next
		// beat, one was lost.
		stale = n.mark != 0 && n.rev < n.mark
		n.mark = w.Rev
	case n.rev == w.Rev:
		n.mark = 0
		stale = n.digest.String() != w.Digest
	default: // deltas overtook the beat
		n.mark = 0
	}
	fetch := stale && claimFetch(n)
	r.mu.Unlock()
	if fetch {
		r.goroutine(func() { r.fetchRoster(p) })
	}
}

// claimFetch reports whether the caller is to fetch n's roster: no fetch
// is under way.
func claimFetch(n *remoteNode) bool {
	if n.fetching {
		return false
	}
	n.fetching = true
	return true
}

// fetchRoster replaces the view of node p with a snapshot p sends over
// the roster stream. A stranger's is fetched only if the rendezvous
// vouches for it: a stranger is heard on the topic, where anyone may
// publish, and its answer would make it a known node.
func (r *room) fetchRoster(p peer.ID) {
	heard := r.svc.asked()
	r.mu.Lock()
	var epoch uint64
	if n := r.remote[p]; n != nil {
		epoch = n.epoch
	}
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(r.ctx, r.svc.cfg.SyncTimeout)
	defer cancel()
	ro, err := roster{}, errUnvouched
	if r.vouched(ctx, p, heard) {
		ro, err = r.svc.askRoster(ctx, p, r.cl.ID, r.seal, roster{}, true)
	}
	r.fetched(p, epoch, ro, err)
}

// fetched applies the answer to a fetch of node p's roster, asked while
// the view was of epoch. A node that serves the cluster no more closed the
// room of that epoch, whose goodbye may still be on its way: the view is
// forgotten as on that goodbye, once the messages sent before are
// delivered (or at most orderWindow on), unless it is of the node's next
// room by then.
func (r *room) fetched(p peer.ID, epoch uint64, ro roster, err error) {
	switch {
	case errors.Is(err, errNotServing):
		r.change(nil, func(touch func(string)) {
			if n := r.remote[p]; n != nil && n.epoch == epoch && n.bye == nil {
				n.bye = &wireMsg{T: wireBye, Epoch: epoch, Seq: maxCount}
				r.settleLocked(p, n, touch)
			}
		})
	case err != nil:
		r.svc.log.Debug("roster fetch failed", "cluster", r.cl.ID, "peer", p, "err", err)
	default:
		r.setRoster(p, ro)
	}
	r.mu.Lock()
	if n := r.remote[p]; n != nil {
		n.fetching = false
	}
	r.mu.Unlock()
}

// forget drops nodes ps and their members; with silentBefore, only those
// of them not heard from since the room's beats reached it.
func (r *room) forget(ps []peer.ID, silentBefore uint64) {
	r.change(nil, func(touch func(string)) {
		for _, p := range ps {
			n := r.remote[p]
			if n == nil || (silentBefore != 0 && n.seen >= silentBefore) {
				continue
			}
			r.dropLocked(p, n, touch)
		}
	})
}

// dropLocked forgets node p, whose view is n, and its members.
func (r *room) dropLocked(p peer.ID, n *remoteNode, touch func(string)) {
	r.clearViewLocked(n, touch)
	delete(r.remote, p)
	if !n.known {
		r.strangers--
	}
}

// bye forgets node p, which said goodbye (w) from its room of w.Epoch,
// once the messages it sent before are delivered, unless the view is of
// another epoch: the node's next room (a fast reconnect) may have
// exchanged rosters with this node before the goodbye of the one before
// came. A goodbye without an epoch (from the earlier release) forgets the
// node at once, whatever its view.
func (r *room) bye(p peer.ID, w *wireMsg) {
	r.change(nil, func(touch func(string)) {
		if n := r.remote[p]; n != nil && (w.Epoch == 0 || n.epoch == w.Epoch) {
			n.bye = w
			r.settleLocked(p, n, touch)
		}
	})
}

// expire counts a beat of the room, and forgets the nodes not heard from
// in the last PresenceTimeout of beats: a node that died without saying
// goodbye takes its members offline.
func (r *room) expire() {
	r.mu.Lock()
	r.beats++
	silent := r.beatsFor(r.svc.cfg.PresenceTimeout)
	if r.beats <= silent {
		r.mu.Unlock()
		return
	}
	before := r.beats - silent
	var gone []peer.ID
	for p, n := range r.remote {
		if n.seen < before {
			gone = append(gone, p)
		}
	}
	r.mu.Unlock()
	if len(gone) > 0 {
		r.forget(gone, before)
	}
}

// beatsFor is how many of the room's beats d lasts, rounded up. What lasts
// while nothing else happens (a silent node's presence, a refused view)
// is counted in beats, which the clock's ticker makes (maintain), so that
// it passes on a clock whose Now stands still (Config.Clock).
func (r *room) beatsFor(d time.Duration) uint64 {
	b := r.svc.cfg.BeatInterval
	return uint64((d + b - 1) / b)
}

// refusingLocked reports whether node n's view is refused (refuseLocked).
func (r *room) refusingLocked(n *remoteNode) bool { return r.beats < n.refused }

// beat is what this node publishes every BeatInterval.
func (r *room) beat() wireMsg {
	r.mu.Lock()
	defer r.mu.Unlock()
	return wireMsg{T: wireBeat, Epoch: r.epoch, Rev: r.rev, Digest: r.digest.String()}
}
