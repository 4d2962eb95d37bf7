package node

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/agentmesh/mesh/internal/admission"
	"github.com/agentmesh/mesh/internal/cmdlog"
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
	// reflects: the entry the request landed in (cmdlog.WithSeqNote), or
	// the directory's head for one that proposed nothing. The node waits
	// until its replica has applied that much, so a client reads its own
	// writes on the node it talks to.
	seqHeader = "X-Mesh-Seq"
	// originHeader carries the forwarding node's public URL, so that the
	// directory's answer names the node the client called.
	originHeader = "X-Mesh-Origin-Url"
	// clientHeader carries the client's address (httpx.AddrKey) for the
	// directory's write budgets, which it keeps apart for each forwarding
	// node.
	clientHeader  = "X-Mesh-Client"
	readYourWrite = 2 * time.Second
)

// forwardedHeaders are the request headers that cross to the directory;
// the directory drops any other a peer sends.
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

// forwardedRoutes are the routes a node forwards to the one that orders
// the directory's writes, the only ones served over the forward stream:
// the registry's (registryapi.ForwardedRoutes: its writes and the lookup
// of a node still catching up) and the quorum's member changes.
func forwardedRoutes() []string {
	return append(registryapi.ForwardedRoutes(), slices.Sorted(maps.Keys(quorumWrites))...)
}

// isForwardedWrite reports whether r is a write that only the node
// ordering the directory's writes serves: a registry write, or a change of
// the quorum's members.
func (n *Node) isForwardedWrite(r *http.Request) bool {
	name, _ := n.forwarded.Match(r)
	return name != ""
}

// forwardWrites sends directory writes to the node that orders them
// (forward). A lone directory serves them itself; so does a member of a
// quorum a request another node forwarded to it, which is sent on nowhere
// (its forwarder tries the next leader itself).
func (n *Node) forwardWrites(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !n.isForwardedWrite(r) || (n.quorum == nil && n.view.isDirectory()) || forwardedToUs(r) {
			next.ServeHTTP(w, r) // a read (most requests) is let through on its method alone
			return
		}
		_, r.Pattern = n.forwarded.Match(r) // the route metrics count it under its route
		if err := n.forward(w, r, next); err != nil {
			httpx.WriteError(n.log, w, r, err)
		}
	})
}

// forwardedToUs reports whether another node forwarded r here.
func forwardedToUs(r *http.Request) bool {
	o, _ := admission.OriginOf(r.Context())
	return o.Peer != ""
}

// forward sends write r to the node that orders writes, over forwardProto,
// or serves it with next while this node leads, and writes the answer to
// w. Each try is an attempt of one write (cmdlog.Write): the log applies
// it at most once however many times it is sent (toDirectory).
func (n *Node) forward(w http.ResponseWriter, r *http.Request, next http.Handler) error {
	body, err := httpx.ReadBody(w, r, maxForwardReq-64<<10)
	if err != nil {
		return err
	}
	wr := n.newWrite(n.selfPeer())
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
	origin := httpx.BaseURL(r, n.URL())
	if httpx.CheckBaseURL(origin) != nil {
		origin = n.URL() // a Host header the directory would refuse
	}
	out.Header.Set(originHeader, origin)
	if client := httpx.AddrKey(httpx.ClientIP(r)); httpx.ValidAddrKey(client) {
		out.Header.Set(clientHeader, client)
	}
	out.Header.Set(writeHeader, hex.EncodeToString(wr.Secret))
	local := func(ctx context.Context) (*http.Response, error) {
		rec := &recorder{header: http.Header{}, status: http.StatusOK}
		in := r.Clone(cmdlog.WithWrite(ctx, wr))
		in.Body, in.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		next.ServeHTTP(rec, in)
		if isNotLeader(rec) {
			return nil, errNotLeader
		}
		return rec.response(), nil
	}
	resp, err := n.roundTrip(r.Context(), out, local)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err = io.ReadAll(resp.Body) // in memory already, at most maxForwardResp
	if err != nil {
		return err
	}
	if resp.StatusCode == http.StatusServiceUnavailable && errorCode(body) == admission.ErrDirectoryBusy.Code {
		n.admission.DirectoryShed()
		admission.Refund(r.Context())
	}
	ctx, cancel := context.WithTimeout(r.Context(), readYourWrite)
	if seq, err := strconv.ParseUint(resp.Header.Get(seqHeader), 10, 64); err == nil {
		n.replica.WaitFor(ctx, seq)
		if c := resp.Header.Get(registryapi.PresenceHeader); c != "" {
			n.awaitPresence(ctx, c)
		}
	}
	cancel()
	resp.Header.Del(seqHeader) // between nodes only
	resp.Header.Del(registryapi.PresenceHeader)
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, err = w.Write(body)
	return err
}

// frameReader reads raw, a whole request or answer held in memory, with a
// buffer no larger than it (bufio's default is 4 KiB a request).
func frameReader(raw []byte) *bufio.Reader {
	return bufio.NewReaderSize(bytes.NewReader(raw), min(len(raw), 4096))
}

// errorCode is the code of a JSON error answer; "" for anything else.
func errorCode(body []byte) string {
	var e httpx.Error
	json.Unmarshal(body, &e)
	return e.Code
}

// roundTrip sends req to the node that orders writes and reads its
// response, or, while this node leads, has local answer it (nil local: a
// request only another node answers). See toDirectory for the retries.
func (n *Node) roundTrip(ctx context.Context, req *http.Request, local func(context.Context) (*http.Response, error)) (*http.Response, error) {
	var buf bytes.Buffer // req as it goes on the wire, once it does
	var resp *http.Response
	err := n.toDirectory(ctx, func(ctx context.Context) (again bool, err error) {
		if local == nil {
			return false, errNoDirectory
		}
		resp, err = local(ctx)
		return errors.Is(err, errNotLeader), err
	}, func(ctx context.Context, dir peer.ID) (again bool, err error) {
		if buf.Len() == 0 {
			buf.Grow(int(req.ContentLength) + 1<<10) // the headers, within
			if err := req.Write(&buf); err != nil {
				return false, err
			}
		}
		raw, err := n.host.SessionRequest(ctx, dir, forwardSessionProto, forwardProto, buf.Bytes(), maxForwardResp)
		if err != nil {
			if ctx.Err() != nil && n.view.directory() != dir {
				// A leader this node no longer believes in: the writes on
				// their way to it are sent to the next (whileLeads).
				n.host.DropSession(dir, forwardSessionProto)
			}
			return n.view.several(), errNoDirectory.Because(fmt.Errorf("forwarding to the directory %s: %w", dir, err))
		}
		resp, err = http.ReadResponse(frameReader(raw), req)
		if err != nil {
			return false, fmt.Errorf("directory response: %w", err)
		}
		if _, ok := resp.Header[notLeaderHeader]; ok {
			resp.Body.Close()
			n.view.notLeader(dir, resp.Header.Get(notLeaderHeader))
			return true, errNotLeader
		}
		return false, nil
	})
	return resp, err
}

// toDirectory has a write land on the node that orders the directory's
// writes: local tries it while this node leads, remote sends it to the
// leader otherwise. While a try says to try again (the node tried does
// not lead, or, in a quorum of several, the way to it broke or the leader
// this node knew of was replaced meanwhile), the next goes to the leader
// known then, at once
// when that changed, else after ForwardRetry; for ForwardTimeout in all.
// A try may have been applied, its answer lost: what is tried again is an
// attempt of the same write (cmdlog.Write), which the log applies once;
// tries go on only within half of cmdlog.WriteWindow, which the log
// remembers a write for.
func (n *Node) toDirectory(ctx context.Context, local func(context.Context) (bool, error), remote func(context.Context, peer.ID) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.ForwardTimeout)
	defer cancel()
	first, self := time.Now(), n.selfPeer()
	for {
		dir, moved, err := n.view.directoryFor(ctx)
		if err != nil {
			return err
		}
		var again bool
		if dir == self {
			again, err = local(ctx)
		} else {
			tctx, stop := n.view.whileLeads(ctx, moved)
			again, err = remote(tctx, dir)
			stop()
		}
		if !again {
			return err
		}
		if time.Since(first) > cmdlog.WriteWindow/2 {
			return errNoDirectory.With("the directory's leader changed while this write was on its way, for too long: it may or may not have been applied; retry").Because(err)
		}
		select {
		case <-ctx.Done():
			return errNoDirectory.With("no leader of the directory took this write in time: it may or may not have been applied; retry").Because(err)
		case <-moved:
		case <-time.After(n.cfg.ForwardRetry):
		}
	}
}

// writeHeader carries, between nodes, the secret of the write a forwarded
// request is an attempt of (cmdlog.Write), hex.
const writeHeader = "X-Mesh-Write"

// newWrite draws the secret of a new write that origin sends.
func (n *Node) newWrite(origin peer.ID) cmdlog.Write {
	secret := make([]byte, 32)
	rand.Read(secret)
	return writeOf(origin, secret)
}

// writeOf is the write of secret sent by origin: its id is bound to the
// node that sends it, so a node cannot name another node's writes.
func writeOf(origin peer.ID, secret []byte) cmdlog.Write {
	h := sha256.New()
	h.Write([]byte(origin))
	h.Write(secret)
	return cmdlog.Write{ID: hex.EncodeToString(h.Sum(nil)), Secret: secret}
}

// parseWrite reads the write secret a forwarding node sent ("" for none).
func parseWrite(origin peer.ID, s string) (cmdlog.Write, bool, error) {
	if s == "" {
		return cmdlog.Write{}, false, nil
	}
	secret, err := hex.DecodeString(s)
	if err != nil || len(secret) != 32 {
		return cmdlog.Write{}, false, errBadWrite.With("%s: want 32 bytes, hex", writeHeader)
	}
	return writeOf(origin, secret), true, nil
}

// serveForward serves, on the directory, a request another node
// forwarded: exactly the routes nodes forward (forwardedRoutes),
// through this node's own bridge as if the client had sent it here, with
// the forwarding node's budgets (see serveForwarded). Whatever the peer
// sends, the answer is an HTTP response: never a 500 for bad input, never
// an upgrade.
func (n *Node) serveForward(ctx context.Context, from peer.ID, raw []byte) ([]byte, error) {
	rec := &recorder{header: http.Header{}, status: http.StatusOK}
	ctx, noted := cmdlog.WithSeqNote(ctx)
	r, err := http.ReadRequest(frameReader(raw))
	switch {
	case err != nil:
		httpx.WriteJSON(rec, http.StatusBadRequest, httpx.ErrInvalid.With("malformed forwarded request: %v", err))
	case n.isForwardedWrite(r) && !n.view.isDirectory():
		httpx.WriteJSON(rec, errNotLeader.Status, errNotLeader)
		rec.header.Set(notLeaderHeader, n.view.directory().String())
	default:
		n.serveForwarded(rec, r.WithContext(ctx), from)
		if isNotLeader(rec) { // leadership lost under the request
			rec.header.Set(notLeaderHeader, n.view.directory().String())
		}
	}
	seq := noted() // the entry the request landed in
	if seq == 0 {  // none: it answered from the state as it is now
		seq = n.clog.Seq()
	}
	rec.header.Set(seqHeader, strconv.FormatUint(seq, 10))
	var out bytes.Buffer
	out.Grow(rec.body.Len() + 1<<10) // the headers, within
	err = rec.response().Write(&out)
	return out.Bytes(), err
}

// Errors of the forward stream.
var (
	errBadOrigin = httpx.E(http.StatusBadRequest, "invalid_origin", "the forwarding node named a malformed origin URL")
	errBadClient = httpx.E(http.StatusBadRequest, "invalid_client_addr", "the forwarding node named a malformed client address")
	errBadWrite  = httpx.E(http.StatusBadRequest, "invalid_write_id", "the forwarding node named a malformed write")
)

// serveForwarded admits forwarded request r from peer and serves it. The
// route must be one that nodes forward, the origin URL a plain http(s)
// base URL, the client address one that httpx.AddrKey makes and the write
// a well-formed one; then the request costs the peer one token of its
// node budget. Only the headers a node forwards are kept. The request
// then goes through the bridge, whose write budgets count it under the
// peer and the client it reports (admission.Origin).
func (n *Node) serveForwarded(w http.ResponseWriter, r *http.Request, from peer.ID) {
	surface, _ := n.surfaces.Match(r)
	if surface == "" {
		surface = "forward"
	}
	if _, pattern := n.forwardMux.Handler(r); pattern == "" {
		n.admission.Refused(surface, "route")
		n.forwardMux.ServeHTTP(w, r) // its JSON 404 or 405
		return
	}
	origin, client := r.Header.Get(originHeader), r.Header.Get(clientHeader)
	if origin != "" {
		if err := httpx.CheckBaseURL(origin); err != nil {
			n.admission.Refused(surface, "origin")
			httpx.WriteError(n.log, w, r, errBadOrigin.With("%s %q: %v", originHeader, origin, err))
			return
		}
	}
	if client != "" && !httpx.ValidAddrKey(client) {
		n.admission.Refused(surface, "client_addr")
		httpx.WriteError(n.log, w, r, errBadClient.With("%s %q: want an IPv4 address or an IPv6 /64", clientHeader, client))
		return
	}
	wr, isWrite, err := parseWrite(from, r.Header.Get(writeHeader))
	if err != nil {
		n.admission.Refused(surface, "write_id")
		httpx.WriteError(n.log, w, r, err)
		return
	}
	peerID := from.String()
	node := admission.Key{Budget: admission.Node, ID: peerID}
	if err := n.admission.Admit(surface, node); err != nil {
		httpx.WriteError(n.log, w, r, err)
		return
	}
	hdr := http.Header{}
	for _, h := range forwardedHeaders {
		if v := r.Header.Values(h); len(v) > 0 {
			hdr[h] = v
		}
	}
	r.Header, r.Host, r.RemoteAddr = hdr, "", "p2p/"+peerID
	ctx := admission.WithOrigin(r.Context(), admission.Origin{Peer: peerID, Client: client})
	ctx = n.admission.Charged(ctx, node)
	if origin != "" {
		ctx = httpx.WithBaseURL(ctx, origin)
	}
	if isWrite {
		ctx = cmdlog.WithWrite(ctx, wr)
	}
	n.forwardMux.ServeHTTP(w, r.WithContext(ctx))
}

// isNotLeader reports whether rec holds an errNotLeader answer.
func isNotLeader(rec *recorder) bool {
	return rec.status == errNotLeader.Status && errorCode(rec.body.Bytes()) == errNotLeader.Code
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

// response is what r recorded, as an HTTP/1.1 response.
func (r *recorder) response() *http.Response {
	return &http.Response{
		StatusCode: r.status, ProtoMajor: 1, ProtoMinor: 1, Header: r.header,
		Body: io.NopCloser(&r.body), ContentLength: int64(r.body.Len()),
	}
}

// LookupDHT finds agent id in the DHT alone, bypassing the local
// directory: the agent's own signed record, as the directory attested it.
// Only agents that registered with a key have one; a deleted agent has a
// tombstone, which LookupDHT reports as registryapi.ErrAgentNotFound.
func (n *Node) LookupDHT(ctx context.Context, id string) (*registryapi.Agent, error) {
	rec, err := n.lookupRecord(ctx, registryapi.IDRecordKey(id))
	if err != nil {
		return nil, err
	}
	return rec.Agent()
}

// lookupRecord gets the record under key (by agent id or by did) from the
// DHT.
func (n *Node) lookupRecord(ctx context.Context, key string) (*registryapi.AgentRecord, error) {
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
	a, err := n.fallback(ctx, registryapi.IDRecordKey(id), id)
	if err == nil && a.ID != id {
		return nil, registryapi.ErrAgentNotFound
	}
	return a, err
}

// fallbackKey finds, as fallbackAgent does, the agent that did is bound
// to when this replica binds it to none: from the DHT record under the
// did, then from the directory (which resolves the did:mesh alias). It
// returns the agent's id.
func (n *Node) fallbackKey(ctx context.Context, did string) (string, error) {
	a, err := n.fallback(ctx, registryapi.DIDRecordKey(did), registryapi.AliasOf(did))
	switch {
	case err != nil:
		return "", err
	case a.DID != did:
		return "", registryapi.ErrAgentNotFound
	}
	return a.ID, nil
}

// fallback asks the DHT for the record under key, then the directory for
// GET /v1/agents/<id> (an id or an alias), unless this replica is caught
// up.
func (n *Node) fallback(ctx context.Context, key, id string) (*registryapi.Agent, error) {
	if _, caughtUp, _ := n.replica.Status(); caughtUp {
		return nil, registryapi.ErrAgentNotFound
	}
	if n.host.DHTServers() > 0 {
		dctx, cancel := context.WithTimeout(ctx, dhtFallbackTimeout)
		rec, err := n.lookupRecord(dctx, key)
		cancel()
		if err == nil {
			return rec.Agent()
		}
	}
	req, _ := http.NewRequest(http.MethodGet, "/v1/agents/"+url.PathEscape(id), nil)
	resp, err := n.roundTrip(ctx, req, nil)
	if err != nil {
		return nil, registryapi.ErrAgentNotFound
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, registryapi.ErrAgentNotFound
	}
	var a registryapi.Agent
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxForwardResp)).Decode(&a); err != nil {
		return nil, errors.Join(registryapi.ErrAgentNotFound, err)
	}
	a.Reg = 1 // registered, as the directory said; presence as of now unknown
	return &a, nil
}
