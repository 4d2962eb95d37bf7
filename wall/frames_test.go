package wall

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestDecodeFrame(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", MaxFrame+1)
	for _, tc := range []struct {
		in      string
		to      []string
		ackTo   any
		payload string // JSON
		code    string // error frame code, if refused
		detail  string // in the error's detail
	}{
		{in: `"hi"`, payload: `"hi"`},
		{in: `hello there`, payload: `"hello there"`},
		{in: `{"payload":"hi"}`, payload: `"hi"`},
		{in: `{"payload":{"text":"hi"},"to":null}`, payload: `{"text":"hi"}`},
		{in: `{"to":"bob","payload":"psst"}`, to: []string{"bob"}, ackTo: "bob", payload: `"psst"`},
		{in: `{"to":["a","b","a"],"payload":1}`, to: []string{"a", "b"}, ackTo: []string{"a", "b", "a"}, payload: `1`},
		// Any other key makes the whole object content, broadcast.
		{in: `{"kind":"message","to":"bob","payload":"x"}`, payload: `{"kind":"message","to":"bob","payload":"x"}`},
		{in: `[1,2]`, payload: `[1,2]`},
		{in: ` 42 `, payload: `42`},
		{in: `{"to":[],"payload":"x"}`, code: "empty_to"},
		{in: `{"to":[],"kind":"x"}`, code: "empty_to"},
		{in: `{"to":"bob"}`, code: "payload_required", detail: `"to" needs a "payload"`},
		{in: `{}`, code: "payload_required", detail: "the object is empty"},
		{in: ` { } `, code: "payload_required", detail: "the object is empty"},
		{in: `{"to":5,"payload":"x"}`, code: "invalid_to"},
		{in: `{"to":["ok",""],"payload":"x"}`, code: "invalid_to"},
		{in: `{"to":"has space","payload":"x"}`, code: "invalid_to"},
		{in: `   `, code: "empty_frame"},
		{in: big, code: "frame_too_large"},
		// Text that is not JSON goes as a JSON string: escapes count.
		{in: `a<b & "c"`, payload: `"a<b & \"c\""`},
		{in: strings.Repeat("\x01", MaxFrame/4), code: "frame_too_large"},
	} {
		got, err := decodeFrame([]byte(tc.in))
		name := tc.in
		if len(name) > 40 {
			name = name[:40]
		}
		if tc.code != "" {
			var fe *frameError
			if !errors.As(err, &fe) || fe.code != tc.code || !strings.Contains(fe.detail, tc.detail) {
				t.Errorf("%s: error %v, want code %s saying %q", name, err, tc.code, tc.detail)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if !reflect.DeepEqual(got.To, tc.to) || !reflect.DeepEqual(got.AckTo, tc.ackTo) || string(got.Payload) != tc.payload {
			t.Errorf("%s: got to=%v ackTo=%v payload=%s", name, got.To, got.AckTo, got.Payload)
		}
	}
}

// FuzzDecodeFrame: whatever a client sends, decoding never panics, and an
// accepted frame has a valid JSON payload within the limit and valid
// handles.
func FuzzDecodeFrame(f *testing.F) {
	for _, s := range []string{`"hi"`, `{"to":"b","payload":1}`, `{"to":[],"payload":1}`, `{"to":["a"],"payload":{}}`, "\xff\xfe", `{"payload"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := decodeFrame(data)
		if err != nil {
			var fe *frameError
			if !errors.As(err, &fe) || fe.code == "" {
				t.Fatalf("error %v is not a frame error", err)
			}
			return
		}
		if !json.Valid(s.Payload) || len(s.Payload) > 2*MaxFrame+2 {
			t.Fatalf("payload %q", s.Payload)
		}
		for _, h := range s.To {
			if validHandle(h) != nil {
				t.Fatalf("invalid handle %q accepted", h)
			}
		}
		if s.To != nil && len(s.To) == 0 {
			t.Fatal("empty recipient list accepted")
		}
	})
}

// FuzzWire: messages from other nodes never panic the decoder, and what
// passes check is safe to fan out.
func FuzzWire(f *testing.F) {
	f.Add([]byte(`{"t":"msg","id":"x","from":"a","ts":1,"payload":"hi"}`))
	f.Add([]byte(`{"t":"beat","epoch":7,"rev":3,"digest":"00112233445566778899aabbccddeeff"}`))
	f.Add([]byte(`{"t":"join","member":{"agent":"a","vis":"ghost"},"epoch":7,"rev":4}`))
	f.Add([]byte(`{"t":"bye"}`))
	seal := newSealer("c_x", "ck_x")
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, s := range []*sealer{nil, seal} {
			var w wireMsg
			if decodeWire(s, sealTopic, data, &w) != nil || w.check("c_x", newProofMemory()) != nil {
				continue
			}
			if w.T == wireMessage && (validHandle(w.From) != nil || !json.Valid(w.Payload) || !utf8.Valid(w.Payload)) {
				t.Fatalf("bad message passed: %+v", w)
			}
			if (w.T == wireJoin || w.T == wireLeave) && (w.Member == nil || w.Rev == 0) {
				t.Fatalf("bad delta passed: %+v", w)
			}
		}
	})
}
