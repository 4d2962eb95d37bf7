package node

import (
	"context"
	"encoding/hex"
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
	"github.com/agentmesh/mesh/internal/admission"
	"github.com/agentmesh/mesh/internal/cmdlog"
	"github.com/agentmesh/mesh/internal/httpx"
	"github.com/agentmesh/mesh/internal/quorum"
	"github.com/agentmesh/mesh/registryapi"
)

// The quorum's admin API (`mesh quorum add|remove|list`): changing the
// members takes a Mesh-Sig by a member's key, as catalog imports do, its
// nonce claimed in the log (single use whichever member leads); the
// request is forwarded to the leader like every directory write, and the
// leader changes Raft's configuration, one change at a time. The leader
// then names the new members in the log (syncSigners).

var (
	errNotQuorum      = httpx.E(http.StatusConflict, "not_a_quorum", "this directory is not run by a quorum of bootstrap nodes")
	errQuorumChange   = httpx.E(http.StatusServiceUnavailable, "directory_unavailable", "the directory's quorum did not take the change; retry later")
	errChangeUnderWay = httpx.E(http.StatusConflict, "quorum_change_in_progress", "another change of the quorum's members is under way; retry once it is done (mesh quorum list shows it)")
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
	if n.role == RoleNode {
		n.view.refresh(r.Context()) // what the members say now
	}
	httpx.WriteJSON(w, http.StatusOK, n.quorumView())
	return nil
}

// operator checks the request's Mesh-Sig by a member's key, and that this
// node can change the quorum.
func (n *Node) operator(r *http.Request, body []byte) (*identity.SigHeader, error) {
	h, err := meshsig.Verify(r, body, n.cfg.Now(), nil)
	switch {
	case err != nil:
		return nil, err
	case h == nil:
		return nil, meshsig.ErrNoSig
	case !n.isAdmin(h.Pubkey):
		return nil, registryapi.ErrNotAdmin.With("Mesh-Sig key is not the key of a member of the directory's quorum")
	case n.quorum == nil:
		return nil, errNotQuorum
	case !n.quorum.IsLeader():
		return nil, errNotLeader
	}
	return h, nil
}

// claimAdminNonce makes the nonce of admin request h single use: the
// claim is an entry of the log, so that a leader elected later refuses
// it too. A request sent again by the node that forwarded it (the same
// write, cmdlog.Write) is the same claim, and passes.
func (n *Node) claimAdminNonce(ctx context.Context, h *identity.SigHeader) error {
	claim := quorum.SignersOp{Nonce: &quorum.AdminNonce{Pubkey: hex.EncodeToString(h.Pubkey), Nonce: h.Nonce}}
	_, err := n.orderer.Propose(admission.Unmetered(ctx), quorum.MembersKind, n.cfg.Now().UnixNano(), claim)
	if errors.Is(err, cmdlog.ErrNonceUsed) {
		return meshsig.ErrReplay
	}
	return err
}

func (n *Node) addMember(w http.ResponseWriter, r *http.Request) error {
	body, err := httpx.ReadBody(w, r, 4<<10)
	if err != nil {
		return err
	}
	h, err := n.operator(r, body)
	if err != nil {
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
	return n.changeMembers(w, r, func(ctx context.Context) error {
		if err := n.claimAdminNonce(ctx, h); err != nil {
			return err
		}
		return n.addVoter(ctx, *info)
	})
}

// addVoter takes p in first as a nonvoter, and makes it a voter once it
// holds the directory as of the leader's log when it was added: a member
// that never catches up (not started, unreachable) never counts in the
// majority, so adding it cannot stop the quorum. p's addresses enter the
// peerstore once the quorum took it in.
func (n *Node) addVoter(ctx context.Context, p peer.AddrInfo) error {
	if err := n.quorum.AddNonvoter(ctx, p.ID); err != nil {
		return err
	}
	n.host.Libp2p().Peerstore().AddAddrs(p.ID, p.Addrs, peerstore.PermanentAddrTTL)
	want := n.clog.Seq()
	for {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		raw, err := n.host.Request(rctx, p.ID, quorumProto, []byte("{}"), maxQuorumRes)
		cancel()
		var v quorumView
		if err == nil && json.Unmarshal(raw, &v) == nil && v.Seq >= want {
			return n.quorum.AddVoter(ctx, p.ID)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s did not catch up with the directory (it stays a nonvoter; remove it or retry): %w", p.ID, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (n *Node) removeMember(w http.ResponseWriter, r *http.Request) error {
	h, err := n.operator(r, nil)
	if err != nil {
		return err
	}
	id, err := peer.Decode(r.PathValue("peer"))
	if err != nil {
		return httpx.ErrInvalid.With("peer id: %v", err)
	}
	if !n.quorum.IsMember(id) {
		switch again, err := n.sentAgain(r.Context()); {
		case err != nil:
			return err
		case again:
			// An attempt of this very request removed it, and its answer
			// was lost with the leader that made it: answered as that
			// attempt was.
			return n.changed(w)
		}
		return httpx.E(http.StatusNotFound, "not_a_member", "%s is not a member of the quorum", id)
	}
	return n.changeMembers(w, r, func(ctx context.Context) error {
		if err := n.claimAdminNonce(ctx, h); err != nil {
			return err
		}
		return n.quorum.RemoveServer(ctx, id)
	})
}

// sentAgain reports whether the log holds an attempt of the write in ctx
// (its nonce's claim): the node that forwards it sends it again, having
// lost the answer to an earlier attempt. The log is read once this leader
// applied all that committed before, an earlier leader's entries
// included.
func (n *Node) sentAgain(ctx context.Context) (bool, error) {
	wr, ok := cmdlog.WriteOf(ctx)
	if !ok {
		return false, nil
	}
	if err := n.quorum.Barrier(ctx); err != nil {
		return false, changeError(err)
	}
	return n.clog.Remembers(wr.ID, n.cfg.Now())
}

// changeMembers makes one change of the members at a time: another while
// it runs is refused (409) before it does anything (its nonce unspent).
func (n *Node) changeMembers(w http.ResponseWriter, r *http.Request, change func(context.Context) error) error {
	if !n.changing.CompareAndSwap(false, true) {
		return errChangeUnderWay
	}
	defer n.changing.Store(false)
	ctx, cancel := context.WithTimeout(r.Context(), membershipTimeout)
	defer cancel()
	if err := change(ctx); err != nil {
		return changeError(err)
	}
	return n.changed(w)
}

// changed answers a change of the members made: the new view (the leader
// names the new members in the log next, syncSigners).
func (n *Node) changed(w http.ResponseWriter) error {
	signal(n.signersDue)
	httpx.WriteJSON(w, http.StatusOK, n.quorumView())
	return nil
}

// changeError is the answer to a change of the members that failed.
func changeError(err error) error {
	var he *httpx.Error
	switch {
	case errors.Is(err, quorum.ErrNotLeader):
		return errNotLeader
	case errors.Is(err, quorum.ErrUnknownOutcome):
		return errLeaderLost // the node that sent it sends it again
	case errors.Is(err, quorum.ErrChangeInProgress):
		return errChangeUnderWay
	case errors.As(err, &he): // the nonce's claim refused
		return he
	}
	return errQuorumChange.Because(err)
}
