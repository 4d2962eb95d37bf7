package wall

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Frames of the wall protocol (spec 2.2): JSON objects, one per WebSocket
// message, told apart by "kind". The first frame a socket receives is of
// kind "welcome" (the kind the specification leaves unnamed).
const (
	KindWelcome  = "welcome"
	KindPresence = "presence"
	KindMessage  = "message"
	KindAck      = "ack"
	KindBoard    = "board" // a board or post was created or deleted
	KindClosed   = "closed"
	KindError    = "error"
)

// MaxFrame is the largest frame a client may send, in bytes (spec 8).
const MaxFrame = 64 << 10

// Member visibility (spec 2.6).
const (
	VisPublic  = "public"
	VisPrivate = "private"
	VisGhost   = "ghost"
)

// maxRecipients bounds the handles of one multi-recipient message.
const maxRecipients = 100

type welcomeFrame struct {
	Kind   string  `json:"kind"`
	You    string  `json:"you"`
	YouDID *string `json:"you_did"`
	// Verified: the socket proved it holds you_did's key (proof.go).
	Verified bool     `json:"did_verified"`
	Public   bool     `json:"public"` // the cluster is public
	Owner    bool     `json:"owner"`  // the socket holds the cluster's token or admin token
	Online   []string `json:"online"`
	// More (beyond the spec) is how many handles online the welcome left
	// out, to fit in a frame: each follows it as a presence frame.
	More    int    `json:"more,omitempty"`
	Cluster string `json:"cluster"`
	Vis     string `json:"vis"`
}

type presenceFrame struct {
	Kind  string  `json:"kind"`
	Agent string  `json:"agent"`
	DID   *string `json:"did"`
	// Verified: the member proved it holds did's key, checked by the node
	// it connected to and by this one (proof.go).
	Verified bool   `json:"did_verified"`
	Status   string `json:"status"` // online or offline
}

type messageFrame struct {
	Kind    string `json:"kind"`
	From    string `json:"from"`
	FromDID string `json:"from_did,omitempty"`
	// Verified: the sending socket proved it holds from_did's key; absent
	// otherwise, so that the envelope of other messages stays as it was.
	Verified bool            `json:"did_verified,omitempty"`
	To       *string         `json:"to"` // null for broadcast, else the receiving handle
	TS       int64           `json:"ts"` // Unix ms
	Payload  json.RawMessage `json:"payload"`
	Board    string          `json:"board,omitempty"`
	Ref      string          `json:"ref,omitempty"`
}

type ackFrame struct {
	Kind      string `json:"kind"`
	To        any    `json:"to"` // as the client addressed it: null, a handle or handles
	Delivered int    `json:"delivered"`
}

type closedFrame struct {
	Kind   string `json:"kind"`
	Reason string `json:"reason"`
}

type errorFrame struct {
	Kind   string `json:"kind"`
	Code   string `json:"code"`
	Detail string `json:"detail"`
}

func encodeFrame(v any) []byte {
	b, err := marshal(v)
	if err != nil {
		panic(fmt.Sprintf("wall: frame does not encode: %v", err)) // our own types always do
	}
	return b
}

// marshal is json.Marshal without HTML escaping, for everything the wall
// sends: json.Marshal would send each '<', '>' and '&' (payloads
// included) as six bytes, so that a frame within the limit left the node
// up to six times larger.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

func errorFrameBytes(code, format string, args ...any) []byte {
	return encodeFrame(errorFrame{Kind: KindError, Code: code, Detail: fmt.Sprintf(format, args...)})
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// send is what a client frame asks for.
type send struct {
	// To lists the addressed handles; nil means broadcast.
	To []string
	// AckTo echoes the addressing in the ack: nil, a handle or the handles.
	AckTo   any
	Payload json.RawMessage
}

// frameError is a problem with a client frame; the socket gets an error
// frame and stays open.
type frameError struct{ code, detail string }

func (e *frameError) Error() string { return e.detail }

func badFrame(code, format string, args ...any) *frameError {
	return &frameError{code: code, detail: fmt.Sprintf(format, args...)}
}

// decodeFrame reads a client's text frame (spec 2.2): a bare string is a
// broadcast; an object whose keys are only "to" and "payload" is a send,
// direct when "to" names a handle or handles; any other object, and any
// other JSON value, is content broadcast as it is. Text that is not JSON
// is a bare string. The payload, as it will be sent, is at most MaxFrame
// bytes.
func decodeFrame(data []byte) (send, error) {
	s, err := readFrame(data)
	if err == nil && len(s.Payload) > MaxFrame {
		err = badFrame("frame_too_large", "the payload is %d bytes as JSON (text that is not JSON is sent as a JSON string, escapes included), over the %d byte limit", len(s.Payload), MaxFrame)
	}
	return s, err
}

func readFrame(data []byte) (send, error) {
	if len(data) > MaxFrame {
		return send{}, badFrame("frame_too_large", "a frame of %d bytes is over the %d-byte limit; chunk it or link it by url", len(data), MaxFrame)
	}
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return send{}, badFrame("empty_frame", "empty frame")
	}
	if !json.Valid(trimmed) {
		s, _ := marshal(string(data))
		return send{Payload: s}, nil
	}
	if trimmed[0] != '{' {
		return send{Payload: json.RawMessage(trimmed)}, nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &fields); err != nil {
		return send{}, badFrame("invalid_frame", "frame: %v", err)
	}
	if to, ok := fields["to"]; ok && isEmptyArray(to) {
		return send{}, badFrame("empty_to", `"to" is an empty array: name at least one handle, or leave "to" out to broadcast`)
	}
	for k := range fields {
		if k != "to" && k != "payload" {
			return send{Payload: json.RawMessage(trimmed)}, nil // content
		}
	}
	payload, ok := fields["payload"]
	switch {
	case !ok && len(fields) == 0:
		return send{}, badFrame("payload_required", `the object is empty: send {"payload": ...} (with "to" for a direct message), or any other JSON value to broadcast it`)
	case !ok:
		return send{}, badFrame("payload_required", `a frame with "to" needs a "payload"`)
	}
	s := send{Payload: payload}
	to, ok := fields["to"]
	if !ok || string(to) == "null" {
		return s, nil
	}
	return s, s.address(to)
}

func isEmptyArray(v json.RawMessage) bool {
	var a []json.RawMessage
	return json.Unmarshal(v, &a) == nil && a != nil && len(a) == 0
}

// address reads "to": a handle, or a non-empty array of handles.
func (s *send) address(to json.RawMessage) error {
	var one string
	if json.Unmarshal(to, &one) == nil {
		if err := validHandle(one); err != nil {
			return badFrame("invalid_to", "to: %v", err)
		}
		s.To, s.AckTo = []string{one}, one
		return nil
	}
	var many []string
	if err := json.Unmarshal(to, &many); err != nil {
		return badFrame("invalid_to", `"to" must be a handle, an array of handles or null`)
	}
	if len(many) > maxRecipients {
		return badFrame("too_many_recipients", "at most %d handles in \"to\"", maxRecipients)
	}
	seen := map[string]bool{}
	for _, h := range many {
		if err := validHandle(h); err != nil {
			return badFrame("invalid_to", "to: %v", err)
		}
		if !seen[h] {
			seen[h] = true
			s.To = append(s.To, h)
		}
	}
	s.AckTo = many
	return nil
}

// maxHandleLen bounds a handle, and maxDIDLen a did, in bytes.
const (
	maxHandleLen = 64
	maxDIDLen    = 256
)

// validDID: a member's did is echoed to peers, not verified (spec 1), but
// it must look like a DID.
func validDID(d string) error {
	if !strings.HasPrefix(d, "did:") || len(d) > maxDIDLen || strings.ContainsFunc(d, func(r rune) bool { return r <= ' ' || r > '~' }) {
		return fmt.Errorf("did must be a DID (did:method:...) of at most %d printable ASCII characters", maxDIDLen)
	}
	return nil
}

// validHandle: handles are self-asserted, 1 to 64 bytes of printable text
// without spaces.
func validHandle(h string) error {
	switch {
	case h == "":
		return fmt.Errorf("handle is empty")
	case len(h) > maxHandleLen:
		return fmt.Errorf("handle longer than %d bytes", maxHandleLen)
	case !utf8.ValidString(h):
		return fmt.Errorf("handle is not valid UTF-8")
	case strings.ContainsFunc(h, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }):
		return fmt.Errorf("handle %q contains spaces or unprintable characters", h)
	}
	return nil
}
