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
	h.serveFramed(proto, maxReq, streamTimeout, func(ctx context.Context, s network.Stream, req []byte) error {
		from := s.Conn().RemotePeer()
		resp, err := fn(ctx, from, req)
		if err != nil {
			return err
		}
		if err := h.streams.answer(ctx, from, len(resp)); err != nil {
			h.cfg.Logger.Debug("answer over the peer's budget", "proto", proto, "peer", from, "bytes", len(resp))
			h.dropped(SurfaceStream, DropRate)
			s.Reset()
			return nil
		}
		if err := msgio.NewVarintWriter(s).WriteMsg(resp); err != nil {
			s.Reset()
		}
		return nil
	})
}

// serveFramed serves proto: it admits a stream while the host runs, reads
// its request frame (at most maxReq bytes) and hands it to fn, whose ctx
// ends after limit or when the host closes (resetting the stream). An
// error of fn is counted as a refusal and resets the stream.
func (h *Host) serveFramed(proto string, maxReq int, limit time.Duration, fn func(ctx context.Context, s network.Stream, req []byte) error) {
	h.h.SetStreamHandler(protocol.ID(proto), func(s network.Stream) {
		if !h.handlers.Enter() {
			s.Reset()
			return
		}
		defer h.handlers.Done()
		if !h.streams.request(s.Conn().RemotePeer(), proto) {
			h.dropped(SurfaceStream, DropRate)
			s.Reset()
			return
		}
		ctx, cancel := context.WithTimeout(h.ctx, limit)
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
		if err := fn(ctx, s, req); err != nil {
			h.cfg.Logger.Debug("request handler failed", "proto", proto, "peer", s.Conn().RemotePeer(), "err", err)
			h.dropped(SurfaceStream, DropRefused)
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
	return readMsg(msgio.NewVarintReaderSize(r, max), max)
}

// readMsg reads the next frame of r, whose frames hold at most max bytes
// beyond what the caller adds (limit, ErrTooLarge past it).
func readMsg(r msgio.Reader, limit int) ([]byte, error) {
	b, err := r.ReadMsg()
	if err == msgio.ErrMsgTooLarge {
		return nil, fmt.Errorf("%w (limit %d bytes)", ErrTooLarge, limit)
	}
	return b, err
}

// DownloadHandler writes the answer to one request to w, as long as it
// takes; an error resets the stream.
type DownloadHandler func(ctx context.Context, from peer.ID, req []byte, w io.Writer) error

// HandleDownloads serves proto for answers too large for one frame (a
// snapshot): a request frame of at most maxReq bytes, then the answer as a
// raw stream until the handler returns. Each read and write must progress
// within streamTimeout, and the answer's bytes come out of the peer's
// answer budget as they are written (streamlimits.go): a large download
// goes at the budget's rate. Close waits for the handlers running.
func (h *Host) HandleDownloads(proto string, maxReq int, fn DownloadHandler) {
	// No bound on the whole exchange: idleWriter bounds each write.
	h.serveFramed(proto, maxReq, 1<<62, func(ctx context.Context, s network.Stream, req []byte) error {
		from := s.Conn().RemotePeer()
		return fn(ctx, from, req, budgetWriter{ctx: ctx, l: h.streams, p: from, w: idleWriter{s}})
	})
}

// budgetWriter takes what it writes out of peer p's answer budget, in
// pieces well under the budget's burst.
type budgetWriter struct {
	ctx context.Context
	l   *streamLimits
	p   peer.ID
	w   io.Writer
}

func (b budgetWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		piece := p[:min(len(p), 1<<20)]
		if err := b.l.answer(b.ctx, b.p, len(piece)); err != nil {
			return n, err
		}
		k, err := b.w.Write(piece)
		n += k
		if err != nil {
			return n, err
		}
		p = p[len(piece):]
	}
	return n, nil
}

// Download sends req to p on proto and hands the answer, at most max
// bytes, to fn as it arrives.
func (h *Host) Download(ctx context.Context, p peer.ID, proto string, req []byte, max int64, fn func(io.Reader) error) error {
	h.addRelayAddrs(p)
	s, err := h.h.NewStream(ctx, p, protocol.ID(proto))
	if err != nil {
		return err
	}
	defer s.Close()
	defer context.AfterFunc(ctx, func() { s.Reset() })()
	s.SetDeadline(time.Now().Add(streamTimeout))
	if err := msgio.NewVarintWriter(s).WriteMsg(req); err != nil {
		s.Reset()
		return err
	}
	if err := s.CloseWrite(); err != nil {
		s.Reset()
		return err
	}
	if err := fn(io.LimitReader(idleReader{s}, max)); err != nil {
		s.Reset()
		return err
	}
	return nil
}

// idleReader and idleWriter give each read or write of a stream
// streamTimeout to progress: a download takes as long as it needs while
// bytes flow, and fails once they stop.
type idleReader struct{ s network.Stream }

func (r idleReader) Read(p []byte) (int, error) {
	r.s.SetReadDeadline(time.Now().Add(streamTimeout))
	return r.s.Read(p)
}

type idleWriter struct{ s network.Stream }

func (w idleWriter) Write(p []byte) (int, error) {
	w.s.SetWriteDeadline(time.Now().Add(streamTimeout))
	return w.s.Write(p)
}
