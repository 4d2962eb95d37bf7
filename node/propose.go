package node

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/agentmesh/mesh/internal/httpx"
	"github.com/agentmesh/mesh/p2p"
	"github.com/agentmesh/mesh/registryapi"
	"github.com/agentmesh/mesh/wall"
)

// Proposals: a node that is not the directory sends self-certifying log
// operations (cluster records and admin actions, signed by the cluster's
// admin key) to the directory node, which checks the signatures itself when
// it applies them and sequences them with its own clock. Registry writes do
// not travel this way: they are forwarded as the caller's signed HTTP
// request (forward.go), which the directory verifies itself.
const (
	proposeProto   = p2p.ProtocolPrefix + "/directory/propose/1.0.0"
	maxProposal    = 256 << 10
	maxProposalRes = 1 << 20
)

// remoteKinds are the entry kinds the directory accepts as proposals.
var remoteKinds = map[string]bool{wall.Kind: true}

type proposal struct {
	Kind string          `json:"kind"`
	Op   json.RawMessage `json:"op"`
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
}

// serveProposal applies a proposal on the directory node.
func (n *Node) serveProposal(ctx context.Context, from peer.ID, raw []byte) ([]byte, error) {
	var p proposal
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, err
	}
	var out proposalResult
	res, err := n.proposeRemote(ctx, p)
	if err == nil {
		out.Result, err = json.Marshal(res)
	}
	if err != nil {
		e, ok := httpx.AsError(err)
		if !ok {
			n.log.Error("proposal failed", "kind", p.Kind, "from", from, "err", err)
		}
		out.Error = &wireError{Status: e.Status, Code: e.Code, Detail: e.Detail}
	}
	out.Seq = n.clog.Seq()
	return json.Marshal(out)
}

func (n *Node) proposeRemote(ctx context.Context, p proposal) (any, error) {
	if !remoteKinds[p.Kind] {
		return nil, httpx.E(http.StatusForbidden, "not_proposable", "%q operations are not accepted from other nodes", p.Kind)
	}
	if !n.view.isDirectory() {
		return nil, errNotLeader.With("%s leader %s", errNotLeader.Detail, n.view.directory())
	}
	return n.orderer.Propose(ctx, p.Kind, n.cfg.Now().UnixNano(), p.Op)
}

// replicaProposer is the Proposer of a node that does not order writes:
// it sends proposals of remoteKinds to the node that does (trying the
// leader of a quorum, as roundTrip does) and waits until its own copy of
// the log has applied them, so a client reads its writes here.
type replicaProposer struct{ n *Node }

func (rp replicaProposer) Propose(ctx context.Context, kind string, _ int64, op any) (any, error) {
	n := rp.n
	if !remoteKinds[kind] {
		return nil, registryapi.ErrReadOnly
	}
	b, err := json.Marshal(op)
	if err != nil {
		return nil, err
	}
	req, _ := json.Marshal(proposal{Kind: kind, Op: b})
	rctx, cancel := context.WithTimeout(ctx, n.cfg.ForwardTimeout)
	defer cancel()
	var res proposalResult
	for {
		dir, why := n.view.directoryFor(rctx)
		if dir == "" {
			return nil, why
		}
		raw, err := n.host.Request(rctx, dir, proposeProto, req, maxProposalRes)
		if err != nil {
			return nil, errNoDirectory.With("the directory node did not answer: %v", err)
		}
		res = proposalResult{}
		if err := json.Unmarshal(raw, &res); err != nil {
			return nil, fmt.Errorf("proposal result: %w", err)
		}
		if e := res.Error; e == nil || e.Code != errNotLeader.Code {
			break
		}
		n.view.notLeader(dir, "")
	}
	if e := res.Error; e != nil {
		return nil, &httpx.Error{Status: e.Status, Code: e.Code, Detail: e.Detail}
	}
	wctx, cancel := context.WithTimeout(ctx, readYourWrite)
	defer cancel()
	n.replica.WaitFor(wctx, res.Seq)
	return res.Result, nil
}
