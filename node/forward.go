package node

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/agentmesh/mesh/internal/httpx"
	"github.com/agentmesh/mesh/registryapi"
)

// Forwarding: a node that is not the directory sends directory writes to the
// directory node over forwardProto as the HTTP/1.1 request it received, with
// the caller's body and Mesh-Sig and Authorization headers untouched, so the
// directory verifies the caller itself and trusts no intermediate node. The
// answer comes back as the HTTP/1.1 response the directory gave, status and
// body unchanged.
const (
	maxForwardReq  = 2 << 20
	maxForwardResp = 2 << 20
	// seqHeader tells the forwarding node which directory seq the answer
	// reflects; it waits until its replica has applied that much, so a
	// client reads its own writes on the node it talks to.
	seqHeader = "X-Mesh-Seq"
	// originHeader carries the forwarding node's public URL, so that the
	// directory's answer names the node the client called.
	originHeader  = "X-Mesh-Origin-Url"
	readYourWrite = 2 * time.Second
)

// forwardedHeaders are the request headers that cross to the directory.
var forwardedHeaders = []string{"Content-Type", "Authorization", "Mesh-Sig", "Accept", "User-Agent"}

var errNoDirectory = httpx.E(http.StatusServiceUnavailable, "directory_unavailable",
	"this node has no connection to the directory node; retry later")

// errNotLeader answers a write sent to a member of a quorum that does not
// lead it (any more): nothing was applied, the forwarding node tries the
// leader (notLeaderHeader names it when known).
var errNotLeader = httpx.E(http.StatusServiceUnavailable, "not_leader",
	"this bootstrap node does not lead the directory's quorum; retry on the leader")

// notLeaderHeader marks, between nodes, an answer of errNotLeader, with
// the leader's peer id when known.
const notLeaderHeader = "X-Mesh-Not-Leader"

// forwardWrites sends directory writes to the node that orders them.
func (n *Node) forwardWrites(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.view.isDirectory() || !registryapi.IsDirectoryWrite(r) {
			next.ServeHTTP(w, r)
			return
		}
		if err := n.forward(w, r); err != nil {
			httpx.WriteError(n.log, w, r, err)
		}
	})
}

func (n *Node) forward(w http.ResponseWriter, r *http.Request) error {
	body, err := httpx.ReadBody(w, r, maxForwardReq-64<<10)
	if err != nil {
		return err
	}
	out := &http.Request{
		Method: r.Method, Host: r.Host, Header: http.Header{}, ProtoMajor: 1, ProtoMinor: 1,
		URL:  &url.URL{Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery},
		Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body)),
	}
	for _, h := range forwardedHeaders {
		if v := r.Header.Values(h); len(v) > 0 {
			out.Header[h] = v
		}
	}
	out.Header.Set(originHeader, httpx.BaseURL(r, n.URL()))
	resp, err := n.roundTrip(r.Context(), out)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	ctx, cancel := context.WithTimeout(r.Context(), readYourWrite)
	if seq, err := strconv.ParseUint(resp.Header.Get(seqHeader), 10, 64); err == nil {
		n.replica.WaitFor(ctx, seq)
	}
	if c := resp.Header.Get(registryapi.PresenceHeader); c != "" {
		n.awaitPresence(ctx, c)
	}
	cancel()
	resp.Header.Del(seqHeader) // between nodes only
	resp.Header.Del(registryapi.PresenceHeader)
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, err = io.Copy(w, resp.Body)
	return err
}

// roundTrip sends req to the node that orders writes and reads its
// response. A member of a quorum that answers that it does not lead (the
// request was not applied) sends it on to the leader; while no leader is
// known but a member is reachable (an election), it tries again every
// ForwardRetry, for ForwardTimeout in all. A request that may have
// reached the directory is never sent twice.
func (n *Node) roundTrip(ctx context.Context, req *http.Request) (*http.Response, error) {
	var buf bytes.Buffer
	if err := req.Write(&buf); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.ForwardTimeout)
	defer cancel()
	for {
		dir, why := n.view.directoryFor(ctx)
		if dir == "" {
			return nil, why
		}
		raw, err := n.host.Request(ctx, dir, forwardProto, buf.Bytes(), maxForwardResp)
		if err != nil {
			n.log.Warn("forwarding to the directory failed", "peer", dir, "err", err)
			return nil, errNoDirectory.With("the directory node did not answer: %v", err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), req)
		if err != nil {
			return nil, fmt.Errorf("directory response: %w", err)
		}
		if _, ok := resp.Header[notLeaderHeader]; !ok {
			return resp, nil
		}
		resp.Body.Close()
		n.view.notLeader(dir, resp.Header.Get(notLeaderHeader))
	}
}

// serveForward runs a forwarded request through this (directory) node's
// own bridge, exactly as if the caller had sent it here.
func (n *Node) serveForward(ctx context.Context, from peer.ID, raw []byte) ([]byte, error) {
	rec := &recorder{header: http.Header{}, status: http.StatusOK}
	r, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
	switch {
	case err != nil:
		httpx.WriteJSON(rec, http.StatusBadRequest, httpx.ErrInvalid.With("malformed forwarded request: %v", err))
	case registryapi.IsDirectoryWrite(r) && !n.view.isDirectory():
		httpx.WriteJSON(rec, errNotLeader.Status, errNotLeader)
		rec.header.Set(notLeaderHeader, n.view.directory().String())
	default:
		if u := r.Header.Get(originHeader); u != "" {
			ctx = httpx.WithBaseURL(ctx, u)
		}
		r = r.WithContext(ctx)
		r.RemoteAddr = "p2p/" + from.String()
		n.handler.ServeHTTP(rec, r)
		if isNotLeader(rec) { // leadership lost under the request
			rec.header.Set(notLeaderHeader, n.view.directory().String())
		}
	}
	rec.header.Set(seqHeader, strconv.FormatUint(n.clog.Seq(), 10))
	resp := &http.Response{
		StatusCode: rec.status, ProtoMajor: 1, ProtoMinor: 1, Header: rec.header,
		Body: io.NopCloser(&rec.body), ContentLength: int64(rec.body.Len()),
	}
	var out bytes.Buffer
	err = resp.Write(&out)
	return out.Bytes(), err
}

// isNotLeader reports whether rec holds an errNotLeader answer.
func isNotLeader(rec *recorder) bool {
	if rec.status != errNotLeader.Status {
		return false
	}
	var e struct {
		Code string `json:"code"`
	}
	return json.Unmarshal(rec.body.Bytes(), &e) == nil && e.Code == errNotLeader.Code
}

// recorder is the ResponseWriter of a forwarded request.
type recorder struct {
	header      http.Header
	status      int
	wroteHeader bool
	body        bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) WriteHeader(code int) {
	if !r.wroteHeader {
		r.status, r.wroteHeader = code, true
	}
}
func (r *recorder) Write(b []byte) (int, error) {
	r.wroteHeader = true
	return r.body.Write(b)
}

// LookupDHT finds agent id in the DHT alone, bypassing the local
// directory: the agent's own signed record, as the directory attested it.
// Only agents that registered with a key have one; a deleted agent has a
// tombstone, which LookupDHT reports as registryapi.ErrAgentNotFound.
func (n *Node) LookupDHT(ctx context.Context, id string) (*registryapi.Agent, error) {
	rec, err := n.lookupRecord(ctx, id)
	if err != nil {
		return nil, err
	}
	return rec.Agent()
}

func (n *Node) lookupRecord(ctx context.Context, id string) (*registryapi.AgentRecord, error) {
	key := registryapi.IDRecordKey(id)
	val, err := n.host.GetValue(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", registryapi.ErrAgentNotFound, err)
	}
	return n.validator.Parse(key, val)
}

// dhtFallbackTimeout bounds the DHT lookup of an agent this node lacks: a
// lookup in a healthy mesh takes milliseconds.
const dhtFallbackTimeout = time.Second

// fallbackAgent finds an agent this replica does not hold: while it is
// still catching up, from the DHT record, then from the directory node.
// A replica that is caught up is authoritative and answers not found; so
// is a tombstone in the DHT. Without a DHT server to ask, or the
// directory, the answer is not found at once.
func (n *Node) fallbackAgent(ctx context.Context, id string) (*registryapi.Agent, error) {
	if _, caughtUp, _ := n.replica.Status(); caughtUp {
		return nil, registryapi.ErrAgentNotFound
	}
	if n.host.DHTServers() > 0 {
		dctx, cancel := context.WithTimeout(ctx, dhtFallbackTimeout)
		rec, err := n.lookupRecord(dctx, id)
		cancel()
		if err == nil {
			return rec.Agent()
		}
	}
	req, _ := http.NewRequest(http.MethodGet, "/v1/agents/"+url.PathEscape(id), nil)
	resp, err := n.roundTrip(ctx, req)
	if err != nil {
		return nil, registryapi.ErrAgentNotFound
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, registryapi.ErrAgentNotFound
	}
	var a registryapi.Agent
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxForwardResp)).Decode(&a); err != nil || a.ID != id {
		return nil, errors.Join(registryapi.ErrAgentNotFound, err)
	}
	a.Reg = 1 // registered, as the directory said; presence as of now unknown
	return &a, nil
}
