package p2p

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-msgio"
)

// Sessions: a request/response protocol whose requests share one stream
// (HandleSessions, SessionRequest), for a peer that sends a stream of
// them to one other (a node's writes to the directory). A stream of its
// own for each request costs both sides the opening and closing of a
// yamux stream, protocol negotiation and five or six frames more, each
// encrypted and written apart: more than the request itself.
//
// Each frame is uvarint length-prefixed, as HandleRequests' are. A
// request frame is a uvarint id (the sender's, any value) then the
// request; an answer frame the request's id, a status byte (sessionOK, or
// sessionRefused: the handler failed or the peer is over a budget, as a
// reset stream says of a request of its own) then the answer. Requests
// are served at once, up to sessionInFlight of a peer's at a time over
// all its sessions of the protocol, so answers come in any order.
const (
	sessionOK      = 0
	sessionRefused = 1
	// sessionInFlight bounds the requests of one peer served at once on
	// a protocol, over all its sessions (it may open as many as the
	// resource manager lets it: 64 streams of a protocol and more); past
	// it the sessions' next requests wait in their streams.
	sessionInFlight = 256
	// sessionIdle closes a session that carried no request for this long
	// (the server's side); a client opens a new one for a session idle
	// for sessionReuse, well within it, so that neither closes a session
	// the other is sending on.
	sessionIdle  = 5 * time.Minute
	sessionReuse = time.Minute
)

// ErrRefused is a request the peer refused in a session (SessionRequest):
// its handler failed, or this node is over the peer's budgets.
var ErrRefused = errors.New("p2p: the peer refused the request")

// HandleSessions serves proto as sessions of requests, each answered by
// fn (at most maxReq bytes each) under the same budgets as a stream of
// its own (HandleRequests): each request takes one of the peer's requests
// on proto, each answer its bytes, and fn's ctx ends after streamTimeout
// or when the host closes. Close waits for the sessions.
func (h *Host) HandleSessions(proto string, maxReq int, fn RequestHandler) {
	h.h.SetStreamHandler(protocol.ID(proto), func(s network.Stream) {
		if !h.handlers.Enter() {
			s.Reset()
			return
		}
		defer h.handlers.Done()
		h.serveSession(s, proto, maxReq, fn)
	})
}

// serveSession reads requests from s until it ends, serving each on a
// worker (run; sessionInFlight at once of the peer's), then waits for
// them.
func (h *Host) serveSession(s network.Stream, proto string, maxReq int, fn RequestHandler) {
	from := s.Conn().RemotePeer()
	ctx, cancel := context.WithCancel(h.ctx)
	defer cancel()
	// Closing the host unblocks reads and writes.
	stop := context.AfterFunc(ctx, func() { s.Reset() })
	slots, release := h.servedSlots(sessionKey{from, proto})
	defer release() // once the requests served are done
	var wg sync.WaitGroup
	defer func() {
		wg.Wait()
		if stop() {
			s.Close()
		}
	}()
	out := &sessionWriter{s: s, w: msgio.NewVarintWriter(s)}
	r := msgio.NewVarintReaderSize(s, maxReq+binary.MaxVarintLen64)
	for {
		s.SetReadDeadline(time.Now().Add(sessionIdle))
		id, req, err := h.readSessionRequest(r, maxReq)
		var ne net.Error
		switch {
		case errors.Is(err, io.EOF) || errors.As(err, &ne) && ne.Timeout():
			return // the peer is done, or idle
		case err != nil: // the requests still served fail with it
			cancel()
			return
		}
		if !h.streams.request(from, proto) {
			h.dropped(SurfaceStream, DropRate)
			if !out.answer(id, sessionRefused, nil) {
				cancel() // a frame written in part: the stream is reset
				return
			}
			continue
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		wg.Add(1)
		h.run(func() {
			defer wg.Done()
			defer func() { <-slots }()
			status, resp := h.serveInSession(ctx, from, proto, req, fn)
			if !out.answer(id, status, resp) {
				s.Reset()
			}
		})
	}
}

// readSessionRequest reads the next request frame of a session: its id
// and request. A frame too large, cut short or without an id is counted
// as the peer's fault; a stream that broke (the peer reset it, ending a
// session it no longer uses, or its connection closed) is not.
func (h *Host) readSessionRequest(r msgio.Reader, maxReq int) (uint64, []byte, error) {
	frame, err := readMsg(r, maxReq)
	if errors.Is(err, ErrTooLarge) || errors.Is(err, io.ErrUnexpectedEOF) {
		h.countStreamDrop(err)
	}
	if err != nil {
		return 0, nil, err
	}
	id, n := binary.Uvarint(frame)
	switch {
	case n <= 0:
		h.dropped(SurfaceStream, DropMalformed)
		return 0, nil, errors.New("p2p: a session's frame without an id")
	case len(frame)-n > maxReq:
		err := fmt.Errorf("%w (limit %d bytes)", ErrTooLarge, maxReq)
		h.countStreamDrop(err)
		return 0, nil, err
	}
	return id, frame[n:], nil
}

// peerSlots are the requests of one peer served at once on a session
// protocol (a token each in ch), shared by its sessions open (refs).
type peerSlots struct {
	ch   chan struct{}
	refs int
}

// servedSlots are the slots of key's peer on its protocol, for one more
// session of it; release gives them back when that session is done.
func (h *Host) servedSlots(key sessionKey) (slots chan struct{}, release func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.served == nil {
		h.served = map[sessionKey]*peerSlots{}
	}
	p := h.served[key]
	if p == nil {
		p = &peerSlots{ch: make(chan struct{}, sessionInFlight)}
		h.served[key] = p
	}
	p.refs++
	return p.ch, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if p.refs--; p.refs == 0 {
			delete(h.served, key)
		}
	}
}

// serveInSession answers one request of a session: the status and answer.
func (h *Host) serveInSession(ctx context.Context, from peer.ID, proto string, req []byte, fn RequestHandler) (byte, []byte) {
	ctx, cancel := context.WithTimeout(ctx, streamTimeout)
	defer cancel()
	resp, err := fn(ctx, from, req)
	if err != nil {
		h.cfg.Logger.Debug("request handler failed", "proto", proto, "peer", from, "err", err)
		h.dropped(SurfaceStream, DropRefused)
		return sessionRefused, nil
	}
	if err := h.streams.answer(ctx, from, len(resp)); err != nil {
		h.cfg.Logger.Debug("answer over the peer's budget", "proto", proto, "peer", from, "bytes", len(resp))
		h.dropped(SurfaceStream, DropRate)
		return sessionRefused, nil
	}
	return sessionOK, resp
}

// sessionWriter writes whole frames to a session's stream, one at a time.
type sessionWriter struct {
	mu sync.Mutex
	s  network.Stream
	w  msgio.WriteCloser
}

// answer writes the answer frame of request id; false when the stream
// broke.
func (w *sessionWriter) answer(id uint64, status byte, resp []byte) bool {
	frame := binary.AppendUvarint(make([]byte, 0, binary.MaxVarintLen64+1+len(resp)), id)
	return w.write(append(append(frame, status), resp...), time.Now().Add(streamTimeout)) == nil
}

// write writes frame by deadline. A frame written in part leaves the
// stream unusable: the caller resets it.
func (w *sessionWriter) write(frame []byte, deadline time.Time) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.s.SetWriteDeadline(deadline)
	return w.w.WriteMsg(frame)
}

// SessionRequest sends req to p on session protocol proto and returns the
// answer, at most maxResp bytes, as Request does; the requests of this
// node to p share one stream while it lasts. A peer that does not name
// proto among its protocols (a release without it) gets the request on a
// stream of its own, on fallback. A request the session could not send
// is sent again on a new one; one that was sent fails with the session.
func (h *Host) SessionRequest(ctx context.Context, p peer.ID, proto, fallback string, req []byte, maxResp int) ([]byte, error) {
	if ok, _ := h.h.Peerstore().SupportsProtocols(p, protocol.ID(proto)); len(ok) == 0 {
		return h.Request(ctx, p, fallback, req, maxResp)
	}
	ctx, cancel := context.WithTimeout(ctx, streamTimeout)
	defer cancel()
	for {
		s, fresh, err := h.session(ctx, p, proto, maxResp)
		if err != nil {
			return nil, err
		}
		resp, sent, err := s.call(ctx, req)
		if err == nil || sent || fresh {
			return resp, err
		}
	}
}

// DropSession ends this node's session with p on proto, if any: requests
// waiting on it fail.
func (h *Host) DropSession(p peer.ID, proto string) {
	h.mu.Lock()
	s := h.sessions[sessionKey{p, proto}]
	h.mu.Unlock()
	if s != nil {
		s.fail(errors.New("p2p: session dropped"))
	}
}

type sessionKey struct {
	peer  peer.ID
	proto string
}

// session is this node's session with p on proto, opened when there is
// none, or none used within sessionReuse; fresh when just opened.
func (h *Host) session(ctx context.Context, p peer.ID, proto string, maxResp int) (*clientSession, bool, error) {
	key := sessionKey{p, proto}
	h.mu.Lock()
	s := h.sessions[key]
	h.mu.Unlock()
	if s != nil && s.reusable() {
		return s, false, nil
	}
	h.addRelayAddrs(p)
	st, err := h.h.NewStream(ctx, p, protocol.ID(proto))
	if err != nil {
		return nil, false, err
	}
	if h.ctx.Err() != nil {
		st.Reset()
		return nil, false, errors.New("p2p: host closed")
	}
	s = &clientSession{s: st, w: &sessionWriter{s: st, w: msgio.NewVarintWriter(st)}, pending: map[uint64]chan sessionAnswer{}, used: time.Now()}
	s.drop = func() {
		h.mu.Lock()
		if h.sessions[key] == s {
			delete(h.sessions, key)
		}
		h.mu.Unlock()
	}
	h.mu.Lock()
	if h.sessions == nil {
		h.sessions = map[sessionKey]*clientSession{}
	}
	cur := h.sessions[key]
	if cur != nil && cur.reusable() { // another request opened one meanwhile
		h.mu.Unlock()
		st.Reset()
		return cur, false, nil
	}
	h.sessions[key] = s
	h.mu.Unlock()
	if cur != nil {
		cur.fail(errors.New("p2p: session idle"))
	}
	stop := context.AfterFunc(h.ctx, func() { s.fail(errors.New("p2p: host closed")) })
	h.goroutine(func() {
		defer stop()
		s.read(maxResp)
	})
	return s, true, nil
}

// clientSession is this node's end of a session.
type clientSession struct {
	s    network.Stream
	w    *sessionWriter
	drop func() // forgets the session on its host

	mu      sync.Mutex
	next    uint64
	pending map[uint64]chan sessionAnswer
	err     error // why the session ended; nil while it lasts
	used    time.Time
}

type sessionAnswer struct {
	resp []byte
	err  error
}

// reusable reports whether a request may go on s.
func (s *clientSession) reusable() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err == nil && time.Since(s.used) < sessionReuse
}

// call sends req and waits for its answer; sent reports whether req may
// have reached the peer.
func (s *clientSession) call(ctx context.Context, req []byte) (resp []byte, sent bool, err error) {
	ch := make(chan sessionAnswer, 1)
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return nil, false, s.err
	}
	id := s.next
	s.next++
	s.pending[id] = ch
	s.used = time.Now()
	s.mu.Unlock()
	deadline, _ := ctx.Deadline() // SessionRequest set one
	frame := binary.AppendUvarint(make([]byte, 0, binary.MaxVarintLen64+len(req)), id)
	if err := s.w.write(append(frame, req...), deadline); err != nil {
		s.fail(err)
		return nil, false, err
	}
	select {
	case a := <-ch:
		return a.resp, true, a.err
	case <-ctx.Done():
		s.mu.Lock()
		delete(s.pending, id)
		s.mu.Unlock()
		return nil, true, ctx.Err()
	}
}

// read hands each answer to the request waiting for it, until the
// session ends.
func (s *clientSession) read(maxResp int) {
	r := msgio.NewVarintReaderSize(s.s, maxResp+binary.MaxVarintLen64+1)
	for {
		frame, err := readMsg(r, maxResp)
		if err != nil {
			s.fail(err)
			return
		}
		id, n := binary.Uvarint(frame)
		if n <= 0 || len(frame) == n {
			s.fail(errors.New("p2p: malformed answer in a session"))
			return
		}
		a := sessionAnswer{resp: frame[n+1:]}
		if frame[n] != sessionOK {
			a = sessionAnswer{err: ErrRefused}
		}
		s.mu.Lock()
		ch := s.pending[id]
		delete(s.pending, id)
		s.mu.Unlock()
		if ch != nil {
			ch <- a
		}
	}
}

// fail ends the session for err, once: its stream is reset and every
// request waiting on it fails.
func (s *clientSession) fail(err error) {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return
	}
	s.err = err
	pending := s.pending
	s.pending = nil
	s.mu.Unlock()
	s.drop()
	s.s.Reset()
	for _, ch := range pending {
		ch <- sessionAnswer{err: err}
	}
}
