package wall

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"

	"github.com/gobwas/ws"
)

// The server side of the WebSocket protocol (RFC 6455). gobwas/ws does the
// handshake and reads frame headers; frames are written here, so that a
// socket's writer sends every frame waiting for it with one writev call and
// an idle socket holds no buffer. The upgrade accepts any origin: sockets
// authenticate with tokens in the query, never with cookies.

// wsConn is one upgraded connection.
type wsConn struct {
	conn net.Conn
	rd   io.Reader // what the handshake left buffered, then conn
}

// upgrade completes the WebSocket handshake on r.
func upgrade(w http.ResponseWriter, r *http.Request) (*wsConn, error) {
	conn, rw, _, err := ws.UpgradeHTTP(r, w)
	if err != nil {
		if conn != nil {
			conn.Close()
		}
		return nil, err
	}
	c := &wsConn{conn: conn, rd: conn}
	if rw != nil && rw.Reader.Buffered() > 0 {
		b, _ := rw.Reader.Peek(rw.Reader.Buffered())
		c.rd = io.MultiReader(bytes.NewReader(slices.Clone(b)), conn)
	}
	return c, nil
}

// Errors ending a connection, with the close code the peer is sent.
var (
	errProtocol = &closeCause{ws.StatusProtocolError, "protocol error", "protocol"}
	errTooBig   = &closeCause{ws.StatusMessageTooBig, fmt.Sprintf("message larger than %d bytes", maxMessage), "too_big"}
	errPeerGone = errors.New("wall: the client closed the connection")
)

// message is a data message as read: its opcode, up to keep bytes of its
// payload, and its full size (size > len(data) means the rest was dropped).
type message struct {
	op   ws.OpCode
	data []byte
	size int
}

// readMessage reads the next data message, keeping at most keep bytes of
// it and refusing one larger than maxMessage. Control frames on the way go
// to control (pings, pongs and closes); an error from it ends the read.
func (c *wsConn) readMessage(keep int, control func(op ws.OpCode, payload []byte) error) (message, error) {
	var m message
	for {
		h, err := ws.ReadHeader(c.rd)
		if err != nil {
			return m, err
		}
		if !h.Masked || h.Rsv != 0 || h.Length < 0 {
			return m, errProtocol // clients must mask; no extensions were negotiated
		}
		if h.OpCode.IsControl() {
			if !h.Fin || h.Length > 125 {
				return m, errProtocol
			}
			p, err := c.payload(h, int(h.Length), 0)
			if err != nil {
				return m, err
			}
			if err := control(h.OpCode, p); err != nil {
				return m, err
			}
			if h.OpCode == ws.OpClose {
				return m, errPeerGone
			}
			continue
		}
		switch {
		case h.OpCode == ws.OpContinuation && m.op == 0, h.OpCode != ws.OpContinuation && m.op != 0:
			return m, errProtocol // a continuation of nothing, or a new message inside one
		case h.OpCode != ws.OpContinuation && h.OpCode != ws.OpText && h.OpCode != ws.OpBinary:
			return m, errProtocol
		case int64(m.size)+h.Length > maxMessage:
			return m, errTooBig
		}
		if m.op == 0 {
			m.op = h.OpCode
		}
		take := min(int(h.Length), max(keep-len(m.data), 0))
		p, err := c.payload(h, take, int(h.Length)-take)
		if err != nil {
			return m, err
		}
		m.data = append(m.data, p...)
		m.size += int(h.Length)
		if h.Fin {
			return m, nil
		}
	}
}

// payload reads a frame's payload: take bytes unmasked, then skip more.
func (c *wsConn) payload(h ws.Header, take, skip int) ([]byte, error) {
	p := make([]byte, take)
	if _, err := io.ReadFull(c.rd, p); err != nil {
		return nil, err
	}
	ws.Cipher(p, h.Mask, 0)
	if skip > 0 {
		if _, err := io.CopyN(io.Discard, c.rd, int64(skip)); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// appendHeader appends the header of an unmasked, final server frame.
func appendHeader(b []byte, op ws.OpCode, n int) []byte {
	b = append(b, 0x80|byte(op))
	switch {
	case n < 126:
		return append(b, byte(n))
	case n <= 0xFFFF:
		return binary.BigEndian.AppendUint16(append(b, 126), uint16(n))
	}
	return binary.BigEndian.AppendUint64(append(b, 127), uint64(n))
}

// closeBody is a close frame's payload.
func closeBody(code ws.StatusCode, reason string) []byte {
	if len(reason) > 120 {
		reason = reason[:120]
	}
	return ws.NewCloseFrameBody(code, reason)
}
