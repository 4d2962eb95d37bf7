package wall

import (
	"context"
	"net/http"

	"github.com/gobwas/ws"

	"github.com/agentmesh/mesh/internal/httpx"
)

// Identity is per socket. A handle that a member holds with a proof of key
// (proof.go) belongs to that did in the cluster while the member is
// online, on any node: a socket that connects with the handle without
// proving that did's key is refused before the upgrade (409
// handle_taken); a socket that proves it while unproven sockets hold the
// handle on this node takes the handle over, and those are closed. Frames
// say did_verified only of the socket (or the member) that proved the key,
// and direct messages to a handle held with a proof go only to sockets
// that proved it. An unproven socket on another node that held the handle
// before the proof came is not closed from afar: it stays, receives no
// direct message, and its messages carry no did on any node (its own
// strips it once it knows of the proof, every other node whatever its
// node says: believedLocked); presence, the online lists and the cluster's
// members show the handle as the member who proved it (presentLocked).

// ErrHandleTaken: the handle is held by a member that proved its did.
var ErrHandleTaken = httpx.E(http.StatusConflict, "handle_taken",
	"this handle is held by a member who proved its did's key: connect with a proof of that key, or another handle")

// causeTaken closes the unproven sockets of a handle that a proven socket
// took over.
var causeTaken = &closeCause{ws.StatusPolicyViolation, "handle taken by a member who proved its did", "handle_taken"}

// provedHolderLocked returns the member that holds handle h with a proof
// of key, here or on another node (a view's members come from rosters
// whose proofs were checked), if any.
func (r *room) provedHolderLocked(h string) (member, bool) {
	m, on := r.presentLocked(h)
	return m, on && m.verified()
}

// mayHoldLocked reports whether socket s may act as its handle: the handle
// is held with no proof, or s proved the holder's did.
func (r *room) mayHoldLocked(s *socket) bool {
	m, held := r.provedHolderLocked(s.handle)
	return !held || (s.proof != "" && s.did == m.DID)
}

// checkHandle refuses join j into cluster cl when its handle is held with
// a proof of another did than j proved (or with j proving none): in the
// room here, or, with no room here, by the nodes that serve the cluster
// (asked as a peek would). A spectator (spectate=1) is no member and holds
// no handle.
func (s *Service) checkHandle(ctx context.Context, cl *Cluster, j joinQuery) error {
	if j.spectate {
		return nil
	}
	var holder member
	held := false
	if r := s.room(cl.ID); r != nil {
		r.mu.Lock()
		holder, held = r.provedHolderLocked(j.agent)
		r.mu.Unlock()
	} else {
		var seal *sealer
		if !cl.Public() {
			seal = newSealer(cl.ID, j.token)
		}
		for _, m := range s.online(ctx, cl, seal) {
			if m.Agent == j.agent && m.verified() {
				holder, held = m, true
			}
		}
	}
	if held && (j.proof == "" || j.did != holder.DID) {
		return ErrHandleTaken.With("the handle %q is held by %s, who proved its key: connect with a proof of that key (docs/api.md, Proving a did), or another handle", j.agent, holder.DID)
	}
	return nil
}

// takeOverLocked makes proven socket s the holder of its handle, which
// unproven sockets hold here: the member becomes s's (its join goes to the
// other nodes), and those sockets are returned, to be closed.
func (r *room) takeOverLocked(s *socket) (*wireMsg, []*socket) {
	lm := r.local[s.handle]
	if s.proof == "" || lm == nil || lm.m.verified() {
		return nil, nil
	}
	r.digest.flip(lm.m)
	lm.m = s.member()
	r.digest.flip(lm.m)
	r.rev++
	var unproven []*socket
	for o := range r.sockets {
		if o.handle == s.handle && o.proof == "" && !o.readOnly {
			unproven = append(unproven, o)
		}
	}
	m := lm.m
	return &wireMsg{T: wireJoin, Member: &m, Epoch: r.epoch, Rev: r.rev}, unproven
}
