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

	"github.com/agentmesh/mesh/internal/admission"
	"github.com/agentmesh/mesh/internal/cmdlog"
	"github.com/agentmesh/mesh/internal/httpx"
	"github.com/agentmesh/mesh/p2p"
	"github.com/agentmesh/mesh/registryapi"
	"github.com/agentmesh/mesh/wall"
)

// Proposals: a node that is not the directory sends self-certifying log
// operations (cluster records and admin actions, signed by the cluster's
// admin key; board actions, signed by its admin or member key, or
// unsigned posts of public clusters) to the directory node, which checks the signatures itself when
// it applies them and sequences them with its own clock. Registry writes do
// not travel this way: they are forwarded as the caller's signed HTTP
// request (forward.go), which the directory verifies itself.
const (
	proposeProto = p2p.ProtocolPrefix + "/directory/propose/1.0.0"
	// maxProposal bounds a proposal: one signed record or action of at
	// most wall.MaxBoardOpSize (the largest), JSON inside JSON.
	maxProposal    = 4 * wall.MaxBoardOpSize
	maxProposalRes = 1 << 20
)

// remoteKinds are the entry kinds the directory accepts as proposals.
var remoteKinds = map[string]bool{wall.Kind: true}

type proposal struct {
	Kind string          `json:"kind"`
	Op   json.RawMessage `json:"op"`
	// Client is the address (httpx.AddrKey) of the client whose request
	// made the proposal, for the directory's write budgets.
	Client string `json:"client,omitempty"`
	// Write is the secret of the write the proposal is an attempt of
	// (cmdlog.Write), hex: a proposal sent again applies once.
	Write string `json:"write,omitempty"`
}

type proposalResult struct {
	Seq    uint64          `json:"seq"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *wireError      `json:"error,omitempty"`
}

// wireError is an *httpx.Error with its status, as it crosses the wire.
type wireError struct {
	Status int    `json:"status"`
	Code   string `json:"code"`
	Detail string `json:"detail"`
	// RetryAfter is the error's Retry-After, in seconds.
	RetryAfter int64 `json:"retry_after,omitempty"`
}

// serveProposal applies a proposal on the directory node. Like a
// forwarded request, it costs the proposing node a token of its node
// budget and its client one of its client budget (kept apart for each
// node), given back if the directory's log sheds it.
func (n *Node) serveProposal(ctx context.Context, from peer.ID, raw []byte) ([]byte, error) {
	var p proposal
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, err
	}
	var out proposalResult
	res, err := n.proposeRemote(ctx, from, p)
	if err == nil {
		out.Result, err = json.Marshal(res)
	}
	if err != nil {
		e, ok := httpx.AsError(err)
		if !ok {
			n.log.Error("proposal failed", "kind", p.Kind, "from", from, "err", err)
		}
		out.Error = &wireError{Status: e.Status, Code: e.Code, Detail: e.Detail}
		if e.RetryAfter > 0 {
			out.Error.RetryAfter = httpx.RetryAfterSeconds(e.RetryAfter)
		}
	}
	out.Seq = n.clog.Seq()
	return json.Marshal(out)
}

func (n *Node) proposeRemote(ctx context.Context, from peer.ID, p proposal) (any, error) {
	if !remoteKinds[p.Kind] {
		return nil, httpx.E(http.StatusForbidden, "not_proposable", "%q operations are not accepted from other nodes", p.Kind)
	}
	if !n.view.isDirectory() {
		return nil, errNotLeader.With("%s leader %s", errNotLeader.Detail, n.view.directory())
	}
	now := n.cfg.Now()
	op, err := n.wall.Proposed(p.Op, now)
	if err != nil {
		return nil, err
	}
	o := admission.Origin{Surface: op.Surface(), Peer: from.String()}
	keys := []admission.Key{{Budget: admission.Node, ID: o.Peer}}
	if httpx.ValidAddrKey(p.Client) {
		o.Client = p.Client
		keys = append(keys, admission.Key{Budget: admission.Client, ID: o.Peer + " " + o.Client})
	}
	wr, isWrite, err := parseWrite(from, p.Write)
	if err != nil {
		return nil, err
	}
	if err := n.admission.Admit(o.Surface, keys...); err != nil {
		return nil, err
	}
	ctx = n.admission.Charged(admission.WithOrigin(ctx, o), keys...)
	if isWrite {
		ctx = cmdlog.WithWrite(ctx, wr)
	}
	return n.orderer.Propose(ctx, p.Kind, now.UnixNano(), op)
}

// replicaProposer is the Proposer of a node that does not order writes:
// it sends proposals of remoteKinds to the node that does (the leader of a
// quorum, tried as toDirectory does; this node's own orderer while it
// leads) and waits until its own copy of the log has applied them, so a
// client reads its writes here. Each proposal is one write
// (cmdlog.Write), applied once however many times it is sent.
type replicaProposer struct{ n *Node }

func (rp replicaProposer) Propose(ctx context.Context, kind string, at int64, op any) (any, error) {
	n := rp.n
	if !remoteKinds[kind] {
		return nil, registryapi.ErrReadOnly
	}
	b, err := json.Marshal(op)
	if err != nil {
		return nil, err
	}
	wr := n.newWrite(n.selfPeer())
	q := proposal{Kind: kind, Op: b, Write: hex.EncodeToString(wr.Secret)}
	if o, ok := admission.OriginOf(ctx); ok {
		q.Client = o.Client
	}
	req, _ := json.Marshal(q)
	var res proposalResult
	var local any
	here := false // this node ordered it
	err = n.toDirectory(ctx, func(ctx context.Context) (bool, error) {
		var err error
		local, err = n.orderer.Propose(cmdlog.WithWrite(ctx, wr), kind, at, op)
		here = true
		return errors.Is(err, errNotLeader), err
	}, func(ctx context.Context, dir peer.ID) (bool, error) {
		raw, err := n.host.Request(ctx, dir, proposeProto, req, maxProposalRes)
		if err != nil {
			return n.view.several(), errNoDirectory.Because(fmt.Errorf("proposing to the directory %s: %w", dir, err))
		}
		res = proposalResult{}
		if err := json.Unmarshal(raw, &res); err != nil {
			return false, fmt.Errorf("proposal result: %w", err)
		}
		if e := res.Error; e != nil && e.Code == errNotLeader.Code {
			n.view.notLeader(dir, "")
			return true, errNotLeader
		}
		here = false
		return false, nil
	})
	switch {
	case err != nil || here:
		return local, err
	case res.Error != nil:
		e := res.Error
		if e.Code == admission.ErrDirectoryBusy.Code {
			n.admission.DirectoryShed()
			admission.Refund(ctx)
		}
		return nil, &httpx.Error{Status: e.Status, Code: e.Code, Detail: e.Detail, RetryAfter: time.Duration(e.RetryAfter) * time.Second}
	}
	wctx, cancel := context.WithTimeout(ctx, readYourWrite)
	defer cancel()
	n.replica.WaitFor(wctx, res.Seq)
	return res.Result, nil
}
