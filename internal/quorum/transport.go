package quorum

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-libp2p/p2p/net/swarm"
	"github.com/libp2p/go-msgio"
)

// RaftProtocol carries Raft's RPCs between the members of a quorum: one
// RPC per stream, a request frame and a response frame (uvarint length
// prefixed); an InstallSnapshot request is followed by the snapshot in
// frames of at most snapshotChunk bytes, ended by an empty one. The
// leader's AppendEntries go on PipelineProtocol (pipeline.go).
const RaftProtocol = "/mesh/raft/1.0.0"

// Bounds of the protocol. A stream from a peer that is not a member is
// reset before a byte is read; a member's frames are bounded, as is the
// number of its streams served at once.
const (
	// maxFrame bounds a request or response: MaxAppendEntries entries of
	// at most maxEntry bytes, plus their framing.
	maxFrame = maxAppendEntries*maxEntry + 1<<20
	// snapshotChunk bounds a frame of snapshot data.
	snapshotChunk = 1 << 20
	// maxStreamsPerPeer bounds the RPCs of one member served at once (Raft
	// has a few in flight per peer: replication, heartbeats, a vote).
	maxStreamsPerPeer = 16
	// dialTimeout bounds opening a stream to a member.
	dialTimeout = 5 * time.Second
)

// RPC types on the wire (as raft's NetworkTransport numbers them).
const (
	rpcAppendEntries uint8 = iota
	rpcRequestVote
	rpcInstallSnapshot
	rpcTimeoutNow
	rpcRequestPreVote
)

var (
	errNotMember = errors.New("quorum: peer is not a member of the quorum")
	errBusy      = errors.New("quorum: too many streams from one member")
	errShutdown  = errors.New("quorum: transport closed")
)

// transport is a raft.Transport over libp2p streams. Server addresses are
// peer IDs; the host's peerstore knows where they are.
type transport struct {
	h       host.Host
	member  func(peer.ID) bool
	timeout time.Duration
	log     *slog.Logger

	consumer chan raft.RPC

	mu        sync.Mutex
	heartbeat func(raft.RPC)
	streams   map[peer.ID]int // streams served now, per member
	pipelines map[*pipeline]bool
	closed    bool

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

var (
	_ raft.Transport   = (*transport)(nil)
	_ raft.WithPreVote = (*transport)(nil)
	_ raft.WithClose   = (*transport)(nil)
)

// newTransport serves RaftProtocol on h for the peers member accepts;
// timeout bounds each RPC (an InstallSnapshot: each of its frames).
func newTransport(h host.Host, member func(peer.ID) bool, timeout time.Duration, log *slog.Logger) *transport {
	t := &transport{h: h, member: member, timeout: timeout, log: log,
		consumer: make(chan raft.RPC), streams: map[peer.ID]int{}, pipelines: map[*pipeline]bool{}}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	h.SetStreamHandler(protocol.ID(RaftProtocol), func(s network.Stream) { t.serve(s, false) })
	h.SetStreamHandler(protocol.ID(PipelineProtocol), func(s network.Stream) { t.serve(s, true) })
	return t
}

// Consumer implements raft.Transport.
func (t *transport) Consumer() <-chan raft.RPC { return t.consumer }

// LocalAddr implements raft.Transport.
func (t *transport) LocalAddr() raft.ServerAddress { return raft.ServerAddress(t.h.ID().String()) }

// AppendEntries implements raft.Transport.
func (t *transport) AppendEntries(_ raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	return t.call(target, rpcAppendEntries, args, resp)
}

// RequestVote implements raft.Transport.
func (t *transport) RequestVote(_ raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	return t.call(target, rpcRequestVote, args, resp)
}

// RequestPreVote implements raft.WithPreVote.
func (t *transport) RequestPreVote(_ raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	return t.call(target, rpcRequestPreVote, args, resp)
}

// TimeoutNow implements raft.Transport.
func (t *transport) TimeoutNow(_ raft.ServerID, target raft.ServerAddress, args *raft.TimeoutNowRequest, resp *raft.TimeoutNowResponse) error {
	return t.call(target, rpcTimeoutNow, args, resp)
}

// EncodePeer implements raft.Transport.
func (t *transport) EncodePeer(_ raft.ServerID, addr raft.ServerAddress) []byte { return []byte(addr) }

// DecodePeer implements raft.Transport.
func (t *transport) DecodePeer(b []byte) raft.ServerAddress { return raft.ServerAddress(b) }

// SetHeartbeatHandler implements raft.Transport.
func (t *transport) SetHeartbeatHandler(fn func(raft.RPC)) {
	t.mu.Lock()
	t.heartbeat = fn
	t.mu.Unlock()
}

// Close implements raft.WithClose: it stops serving and waits for the
// RPCs being served.
func (t *transport) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	t.mu.Unlock()
	t.h.RemoveStreamHandler(protocol.ID(RaftProtocol))
	t.h.RemoveStreamHandler(protocol.ID(PipelineProtocol))
	t.cancel()
	t.wg.Wait()
	return nil
}

// InstallSnapshot implements raft.Transport.
func (t *transport) InstallSnapshot(_ raft.ServerID, target raft.ServerAddress, args *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	s, err := t.open(target, RaftProtocol)
	if err != nil {
		return err
	}
	defer s.Close()
	if err := t.send(s, rpcInstallSnapshot, args); err != nil {
		s.Reset()
		return err
	}
	w := msgio.NewVarintWriter(s)
	buf := make([]byte, snapshotChunk)
	var sent int64
	for {
		n, rerr := io.ReadFull(data, buf)
		if n > 0 {
			s.SetWriteDeadline(time.Now().Add(t.timeout))
			if err := w.WriteMsg(buf[:n]); err != nil {
				s.Reset()
				return err
			}
			sent += int64(n)
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			s.Reset()
			return rerr
		}
	}
	if sent != args.Size {
		s.Reset()
		return fmt.Errorf("quorum: snapshot of %d bytes announced, %d read", args.Size, sent)
	}
	if err := w.WriteMsg(nil); err != nil {
		s.Reset()
		return err
	}
	s.SetReadDeadline(time.Now().Add(t.timeout))
	return t.receive(s, resp)
}

// call makes one RPC on a stream of its own.
func (t *transport) call(target raft.ServerAddress, typ uint8, args, resp any) error {
	s, err := t.open(target, RaftProtocol)
	if err != nil {
		return err
	}
	defer s.Close()
	s.SetDeadline(time.Now().Add(t.timeout))
	if err := t.send(s, typ, args); err != nil {
		s.Reset()
		return err
	}
	return t.receive(s, resp)
}

func (t *transport) open(target raft.ServerAddress, proto string) (network.Stream, error) {
	p, err := peer.Decode(string(target))
	if err != nil {
		return nil, fmt.Errorf("quorum: server address %q: %w", target, err)
	}
	if t.h.Network().Connectedness(p) != network.Connected {
		// The swarm backs a peer off after a failed dial; Raft has its own
		// backoff, and a member that restarts must be reached at once.
		if sw, ok := t.h.Network().(*swarm.Swarm); ok {
			sw.Backoff().Clear(p)
		}
	}
	ctx, cancel := context.WithTimeout(t.ctx, min(dialTimeout, t.timeout))
	defer cancel()
	s, err := t.h.NewStream(ctx, p, protocol.ID(proto))
	if err != nil {
		return nil, fmt.Errorf("quorum: open a stream to %s: %w", p, err)
	}
	return s, nil
}

var msgpack = &codec.MsgpackHandle{}

func (t *transport) send(s network.Stream, typ uint8, args any) error {
	var buf bytes.Buffer
	buf.WriteByte(typ)
	if err := codec.NewEncoder(&buf, msgpack).Encode(args); err != nil {
		return err
	}
	if buf.Len() > maxFrame {
		return fmt.Errorf("quorum: RPC of %d bytes exceeds %d", buf.Len(), maxFrame)
	}
	return msgio.NewVarintWriter(s).WriteMsg(buf.Bytes())
}

// receive reads a response frame: the error string, then the response.
func (t *transport) receive(s network.Stream, resp any) error {
	b, err := msgio.NewVarintReaderSize(s, maxFrame).ReadMsg()
	if err != nil {
		s.Reset()
		return err
	}
	dec := codec.NewDecoderBytes(b, msgpack)
	var rpcErr string
	if err := dec.Decode(&rpcErr); err != nil {
		return err
	}
	if err := dec.Decode(resp); err != nil {
		return err
	}
	if rpcErr != "" {
		return errors.New(rpcErr)
	}
	return nil
}

// admit counts a stream from p, refusing non-members and members with too
// many streams served already.
func (t *transport) admit(p peer.ID) error {
	if !t.member(p) {
		return errNotMember
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.closed:
		return errShutdown
	case t.streams[p] >= maxStreamsPerPeer:
		return errBusy
	}
	t.streams[p]++
	t.wg.Add(1)
	return nil
}

func (t *transport) release(p peer.ID) {
	t.mu.Lock()
	if t.streams[p]--; t.streams[p] <= 0 {
		delete(t.streams, p)
	}
	t.mu.Unlock()
	t.wg.Done()
}

// serve answers one RPC, or (pipelined) AppendEntries after
// AppendEntries until the stream ends, each with the RPC timeout to come.
func (t *transport) serve(s network.Stream, pipelined bool) {
	from := s.Conn().RemotePeer()
	if err := t.admit(from); err != nil {
		t.log.Debug("raft stream refused", "peer", from, "err", err)
		s.Reset()
		return
	}
	defer t.release(from)
	defer context.AfterFunc(t.ctx, func() { s.Reset() })()
	for {
		s.SetDeadline(time.Now().Add(t.timeout))
		err := t.handle(s, from, pipelined)
		switch {
		case pipelined && errors.Is(err, io.EOF): // the leader closed it
		case err != nil:
			if !errors.Is(err, io.EOF) && t.ctx.Err() == nil {
				t.log.Debug("raft RPC failed", "peer", from, "err", err)
			}
			s.Reset()
			return
		case pipelined:
			continue
		}
		s.Close()
		return
	}
}

// rpcRequests make the request of each RPC type, for decodeRPC.
var rpcRequests = map[uint8]func() any{
	rpcAppendEntries:   func() any { return new(raft.AppendEntriesRequest) },
	rpcRequestVote:     func() any { return new(raft.RequestVoteRequest) },
	rpcRequestPreVote:  func() any { return new(raft.RequestPreVoteRequest) },
	rpcInstallSnapshot: func() any { return new(raft.InstallSnapshotRequest) },
	rpcTimeoutNow:      func() any { return new(raft.TimeoutNowRequest) },
}

// decodeRPC decodes the body of an RPC of type typ into its request.
func decodeRPC(typ uint8, body []byte) (any, error) {
	newReq, ok := rpcRequests[typ]
	if !ok {
		return nil, fmt.Errorf("quorum: unknown RPC type %d", typ)
	}
	req := newReq()
	if err := codec.NewDecoderBytes(body, msgpack).Decode(req); err != nil {
		return nil, err
	}
	return req, nil
}

func (t *transport) handle(s network.Stream, from peer.ID, pipelined bool) error {
	b, err := msgio.NewVarintReaderSize(s, maxFrame).ReadMsg()
	if err != nil {
		return err
	}
	switch {
	case len(b) == 0:
		return errors.New("quorum: empty RPC")
	case pipelined && b[0] != rpcAppendEntries:
		return fmt.Errorf("quorum: RPC type %d on a pipeline", b[0])
	}
	cmd, err := decodeRPC(b[0], b[1:])
	if err != nil {
		return err
	}
	respCh := make(chan raft.RPCResponse, 1)
	rpc := raft.RPC{Command: cmd, RespChan: respCh}
	heartbeat := false
	switch req := cmd.(type) {
	case *raft.AppendEntriesRequest:
		heartbeat = req.Term != 0 && (len(req.Addr) > 0 || len(req.Leader) > 0) &&
			req.PrevLogEntry == 0 && req.PrevLogTerm == 0 && len(req.Entries) == 0 && req.LeaderCommitIndex == 0
	case *raft.InstallSnapshotRequest:
		if req.Size < 0 {
			return errors.New("quorum: negative snapshot size")
		}
		rpc.Reader = &chunkReader{s: s, left: req.Size, timeout: t.timeout}
	}
	// A member speaks for itself only: the sender named in the RPC must be
	// the authenticated peer of the stream.
	if h, ok := rpc.Command.(raft.WithRPCHeader); ok {
		if addr := h.GetRPCHeader().Addr; len(addr) > 0 && string(addr) != from.String() {
			return fmt.Errorf("quorum: RPC from %s claims to come from %s", from, addr)
		}
	}
	t.mu.Lock()
	hb := t.heartbeat
	t.mu.Unlock()
	if heartbeat && hb != nil {
		hb(rpc)
	} else {
		select {
		case t.consumer <- rpc:
		case <-t.ctx.Done():
			return errShutdown
		}
	}
	var resp raft.RPCResponse
	select {
	case resp = <-respCh:
	case <-t.ctx.Done():
		return errShutdown
	}
	if r, ok := rpc.Reader.(*chunkReader); ok && r.left > 0 {
		return errors.New("quorum: snapshot not read whole")
	}
	var out bytes.Buffer
	enc := codec.NewEncoder(&out, msgpack)
	rpcErr := ""
	if resp.Error != nil {
		rpcErr = resp.Error.Error()
	}
	if err := enc.Encode(rpcErr); err != nil {
		return err
	}
	if err := enc.Encode(resp.Response); err != nil {
		return err
	}
	s.SetWriteDeadline(time.Now().Add(t.timeout))
	return msgio.NewVarintWriter(s).WriteMsg(out.Bytes())
}

// chunkReader reads the snapshot that follows an InstallSnapshot request:
// frames of at most snapshotChunk bytes, exactly left bytes in all, then
// an empty frame. Each frame has timeout to arrive.
type chunkReader struct {
	s       network.Stream
	left    int64
	buf     []byte
	timeout time.Duration
	ended   bool
}

func (r *chunkReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if r.ended {
			return 0, io.EOF
		}
		r.s.SetReadDeadline(time.Now().Add(r.timeout))
		b, err := msgio.NewVarintReaderSize(r.s, snapshotChunk).ReadMsg()
		if err != nil {
			return 0, err
		}
		if len(b) == 0 {
			if r.left != 0 {
				return 0, io.ErrUnexpectedEOF
			}
			r.ended = true
			continue
		}
		if int64(len(b)) > r.left {
			return 0, errors.New("quorum: snapshot longer than announced")
		}
		r.left -= int64(len(b))
		r.buf = b
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}
