package wall

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/gobwas/ws"
)

// clientFrame is a frame as a client sends it: masked.
func clientFrame(fin bool, op ws.OpCode, payload []byte) []byte {
	var b bytes.Buffer
	mask := [4]byte{1, 2, 3, 4}
	ws.WriteHeader(&b, ws.Header{Fin: fin, OpCode: op, Masked: true, Mask: mask, Length: int64(len(payload))})
	p := bytes.Clone(payload)
	ws.Cipher(p, mask, 0)
	b.Write(p)
	return b.Bytes()
}

func TestReadMessage(t *testing.T) {
	t.Parallel()
	var controls []string
	control := func(op ws.OpCode, p []byte) error {
		controls = append(controls, fmt.Sprintf("%d:%s", op, p))
		return nil
	}
	stream := bytes.Join([][]byte{
		clientFrame(false, ws.OpText, []byte("hel")),
		clientFrame(true, ws.OpPing, []byte("are you there")), // between fragments
		clientFrame(true, ws.OpContinuation, []byte("lo")),
		clientFrame(true, ws.OpText, bytes.Repeat([]byte("z"), 300)),
		clientFrame(true, ws.OpClose, ws.NewCloseFrameBody(ws.StatusNormalClosure, "")),
	}, nil)
	c := &wsConn{rd: bytes.NewReader(stream)}
	m, err := c.readMessage(100, control)
	if err != nil || string(m.data) != "hello" || m.op != ws.OpText || m.size != 5 {
		t.Fatalf("fragmented message: %+v %v", m, err)
	}
	if len(controls) != 1 || controls[0] != "9:are you there" {
		t.Fatalf("controls: %v", controls)
	}
	m, err = c.readMessage(100, control)
	if err != nil || len(m.data) != 100 || m.size != 300 {
		t.Fatalf("kept part of a long message: %d of %d, %v", len(m.data), m.size, err)
	}
	if _, err := c.readMessage(100, control); !errors.Is(err, errPeerGone) {
		t.Fatalf("close: %v", err)
	}

	for name, bad := range map[string][]byte{
		"unmasked":            {0x81, 0x02, 'h', 'i'},
		"orphan continuation": clientFrame(true, ws.OpContinuation, []byte("x")),
		"fragmented ping":     clientFrame(false, ws.OpPing, nil),
		"reserved opcode":     clientFrame(true, ws.OpCode(3), nil),
		"new message inside":  append(clientFrame(false, ws.OpText, []byte("a")), clientFrame(true, ws.OpText, []byte("b"))...),
	} {
		c := &wsConn{rd: bytes.NewReader(bad)}
		if _, err := c.readMessage(100, control); !errors.Is(err, errProtocol) {
			t.Errorf("%s: %v, want a protocol error", name, err)
		}
	}
	var hdr bytes.Buffer
	ws.WriteHeader(&hdr, ws.Header{Fin: true, OpCode: ws.OpText, Masked: true, Length: maxMessage + 1})
	if _, err := (&wsConn{rd: &hdr}).readMessage(100, control); !errors.Is(err, errTooBig) {
		t.Fatalf("over the limit: %v", err)
	}
}

// FuzzReadMessage: a client's byte stream never panics the reader, and
// what it keeps is bounded.
func FuzzReadMessage(f *testing.F) {
	f.Add(clientFrame(true, ws.OpText, []byte(`"hi"`)))
	f.Add(append(clientFrame(false, ws.OpText, []byte("a")), clientFrame(true, ws.OpContinuation, []byte("b"))...))
	f.Add(clientFrame(true, ws.OpPing, []byte("p")))
	f.Fuzz(func(t *testing.T, data []byte) {
		c := &wsConn{rd: bytes.NewReader(data)}
		for range 8 {
			m, err := c.readMessage(64, func(ws.OpCode, []byte) error { return nil })
			if err != nil {
				return
			}
			if len(m.data) > 64 || m.size > maxMessage {
				t.Fatalf("kept %d bytes of %d", len(m.data), m.size)
			}
		}
	})
}
