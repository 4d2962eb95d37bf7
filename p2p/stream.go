package p2p

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-msgio"
)

// streamTimeout bounds a whole request/response exchange.
const streamTimeout = 30 * time.Second

// RequestHandler answers one request from a peer. It returns the response
// bytes; an error resets the stream (the requester sees a transport error)
// and counts the request as refused. ctx ends when the exchange times out
// or the host closes.
type RequestHandler func(ctx context.Context, from peer.ID, req []byte) ([]byte, error)

// HandleRequests serves proto as a request/response protocol: one request
// and one response per stream, each a uvarint length-prefixed frame. Requests
// longer than maxReq are refused without reading them; every peer's
// requests and the bytes of its answers are budgeted (streamlimits.go).
// Close waits for the handlers running.
func (h *Host) HandleRequests(proto string, maxReq int, fn RequestHandler) {
	h.h.SetStreamHandler(protocol.ID(proto), func(s network.Stream) {
		if !h.handlers.Enter() {
			s.Reset()
			return
		}
		defer h.handlers.Done()
		from := s.Conn().RemotePeer()
		if !h.streams.request(from, proto) {
			h.dropped(SurfaceStream, DropRate)
			s.Reset()
			return
		}
		ctx, cancel := context.WithTimeout(h.ctx, streamTimeout)
		defer cancel()
		// Closing the host or the timeout unblocks reads and writes.
		defer context.AfterFunc(ctx, func() { s.Reset() })()
		defer s.Close()
		s.SetDeadline(time.Now().Add(streamTimeout))
		req, err := readFrame(s, maxReq)
		if err != nil {
			h.countStreamDrop(err)
			s.Reset()
			return
		}
		resp, err := fn(ctx, from, req)
		if err != nil {
			h.cfg.Logger.Debug("request handler failed", "proto", proto, "peer", from, "err", err)
			h.dropped(SurfaceStream, DropRefused)
			s.Reset()
			return
		}
		if err := h.streams.answer(ctx, from, len(resp)); err != nil {
			h.cfg.Logger.Debug("answer over the peer's budget", "proto", proto, "peer", from, "bytes", len(resp))
			h.dropped(SurfaceStream, DropRate)
			s.Reset()
			return
		}
		if err := msgio.NewVarintWriter(s).WriteMsg(resp); err != nil {
			s.Reset()
		}
	})
}

// countStreamDrop counts a request that could not be read, unless the host
// is closing.
func (h *Host) countStreamDrop(err error) {
	switch {
	case h.ctx.Err() != nil:
	case errors.Is(err, ErrTooLarge):
		h.dropped(SurfaceStream, DropTooLarge)
	default:
		h.dropped(SurfaceStream, DropMalformed)
	}
}

// Request sends req to p on proto and returns the response, refusing one
// longer than maxResp.
func (h *Host) Request(ctx context.Context, p peer.ID, proto string, req []byte, maxResp int) ([]byte, error) {
	h.addRelayAddrs(p)
	s, err := h.h.NewStream(ctx, p, protocol.ID(proto))
	if err != nil {
		return nil, err
	}
	defer s.Close()
	deadline := time.Now().Add(streamTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	s.SetDeadline(deadline)
	if err := msgio.NewVarintWriter(s).WriteMsg(req); err != nil {
		s.Reset()
		return nil, err
	}
	if err := s.CloseWrite(); err != nil {
		s.Reset()
		return nil, err
	}
	resp, err := readFrame(s, maxResp)
	if err != nil {
		s.Reset()
		return nil, err
	}
	return resp, nil
}

func readFrame(r io.Reader, max int) ([]byte, error) {
	b, err := msgio.NewVarintReaderSize(r, max).ReadMsg()
	if err == msgio.ErrMsgTooLarge {
		return nil, fmt.Errorf("%w (limit %d bytes)", ErrTooLarge, max)
	}
	return b, err
}
