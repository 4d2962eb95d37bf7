package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/identity/meshsig"
	"github.com/agentmesh/mesh/internal/httpx"
	"github.com/agentmesh/mesh/internal/nonces"
	"github.com/agentmesh/mesh/internal/quorum"
	"github.com/agentmesh/mesh/registryapi"
)

// The quorum's admin API (`mesh quorum add|remove|list`): changing the
// members takes a Mesh-Sig by a member's key, as catalog imports do; the
// request is forwarded to the leader like every directory write, and the
// leader changes Raft's configuration. The leader then names the new
// members in the log (syncSigners).

var (
	errNotQuorum    = httpx.E(http.StatusConflict, "not_a_quorum", "this directory is not run by a quorum of bootstrap nodes")
	errQuorumChange = httpx.E(http.StatusServiceUnavailable, "directory_unavailable", "the directory's quorum did not take the change; retry later")
)

// membershipTimeout bounds a change of members (a new member installs the
// directory's snapshot before the change commits).
const membershipTimeout = 2 * time.Minute

type addMemberRequest struct {
	Addr string `json:"addr"` // full multiaddr of the member to add
}

// quorumWrites are the quorum admin API's changes, by route: forwarded to
// the leader like the registry's writes (forward.go), and metered like
// them (internal/admission).
var quorumWrites = map[string]string{
	"POST /v1/admin/quorum/members":          "quorum_add",
	"DELETE /v1/admin/quorum/members/{peer}": "quorum_remove",
}

func (n *Node) quorumRoutes(mux httpx.Router) {
	mux.Handle("GET /v1/admin/quorum", httpx.Handle(n.log, n.listQuorum))
	mux.Handle("POST /v1/admin/quorum/members", httpx.Handle(n.log, n.addMember))
	mux.Handle("DELETE /v1/admin/quorum/members/{peer}", httpx.Handle(n.log, n.removeMember))
}

func (n *Node) listQuorum(w http.ResponseWriter, r *http.Request) error {
	httpx.WriteJSON(w, http.StatusOK, n.quorumView())
	return nil
}

// operator checks the request's Mesh-Sig by a member's key, and that this
// node can change the quorum.
func (n *Node) operator(r *http.Request, body []byte) error {
	h, err := meshsig.Verify(r, body, n.cfg.Now(), nil)
	switch {
	case err != nil:
		return err
	case h == nil:
		return meshsig.ErrNoSig
	case !n.isAdmin(h.Pubkey):
		return registryapi.ErrNotAdmin.With("Mesh-Sig key is not the key of a member of the directory's quorum")
	case n.quorum == nil:
		return errNotQuorum
	case !n.quorum.IsLeader():
		return errNotLeader
	}
	// The leader remembers the nonces of the requests it took, so that one
	// seen on the way cannot be made again. Only a member's key gets this
	// far, which bounds what it holds; a new leader starts afresh, and a
	// replay to it within the window is the one left open.
	switch err := n.adminNonces.Claim(h.Pubkey, h.Nonce, n.cfg.Now()); {
	case errors.Is(err, nonces.ErrFull):
		return httpx.ErrUnavailable.With("too many admin requests in the last %v: try again shortly", identity.NonceMemory)
	case err != nil:
		return meshsig.ErrReplay
	}
	return nil
}

func (n *Node) addMember(w http.ResponseWriter, r *http.Request) error {
	body, err := httpx.ReadBody(w, r, 4<<10)
	if err != nil {
		return err
	}
	if err := n.operator(r, body); err != nil {
		return err
	}
	var req addMemberRequest
	if err := httpx.DecodeJSON(body, &req); err != nil {
		return err
	}
	a, err := ma.NewMultiaddr(req.Addr)
	if err != nil {
		return httpx.ErrInvalid.With("addr: %v", err)
	}
	info, err := peer.AddrInfoFromP2pAddr(a)
	if err != nil {
		return httpx.ErrInvalid.With("addr: a full multiaddr ends in /p2p/<peer id>: %v", err)
	}
	if _, err := quorum.DIDOf(info.ID); err != nil {
		return httpx.ErrInvalid.With("addr: %v", err)
	}
	n.host.Libp2p().Peerstore().AddAddrs(info.ID, info.Addrs, peerstore.PermanentAddrTTL)
	return n.changeMembers(w, r, func(ctx context.Context) error { return n.addVoter(ctx, info.ID) })
}

// addVoter takes p in first as a nonvoter, and makes it a voter once it
// holds the directory as of the leader's log when it was added: a member
// that never catches up (not started, unreachable) never counts in the
// majority, so adding it cannot stop the quorum.
func (n *Node) addVoter(ctx context.Context, p peer.ID) error {
	if err := n.quorum.AddNonvoter(ctx, p); err != nil {
		return err
	}
	want := n.clog.Seq()
	for {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		raw, err := n.host.Request(rctx, p, quorumProto, []byte("{}"), maxQuorumRes)
		cancel()
		var v quorumView
		if err == nil && json.Unmarshal(raw, &v) == nil && v.Seq >= want {
			return n.quorum.AddVoter(ctx, p)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s did not catch up with the directory (it stays a nonvoter; remove it or retry): %w", p, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (n *Node) removeMember(w http.ResponseWriter, r *http.Request) error {
	if err := n.operator(r, nil); err != nil {
		return err
	}
	id, err := peer.Decode(r.PathValue("peer"))
	if err != nil {
		return httpx.ErrInvalid.With("peer id: %v", err)
	}
	if !n.quorum.IsMember(id) {
		return httpx.E(http.StatusNotFound, "not_a_member", "%s is not a member of the quorum", id)
	}
	return n.changeMembers(w, r, func(ctx context.Context) error { return n.quorum.RemoveServer(ctx, id) })
}

func (n *Node) changeMembers(w http.ResponseWriter, r *http.Request, change func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(r.Context(), membershipTimeout)
	defer cancel()
	switch err := change(ctx); {
	case errors.Is(err, quorum.ErrNotLeader):
		return errNotLeader
	case err != nil:
		return errQuorumChange.Because(err)
	}
	signal(n.signersDue)
	httpx.WriteJSON(w, http.StatusOK, n.quorumView())
	return nil
}

// maxAdminNonces bounds the nonces of admin requests the leader remembers:
// far more than operators sign in the 240 s a nonce is kept.
const maxAdminNonces = 10_000
