package registryapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"sync"
	"time"
)

// A read of GET /v1/agents/<id> answers what encoding agentView with
// httpx.WriteJSON would, byte for byte, without encoding the whole view
// each time: the parts only the row decides (viewHead, viewTail) are
// encoded once per cached row, and the rest (the handle, which names the
// node the client asked; presence; reputation, whose empty form is encoded
// once) is put in between. Reads are most of what a directory serves, and
// the encoding was most of a read's cost.

// viewParts are a row's encoded viewHead without its closing brace, and
// viewTail without either brace.
type viewParts struct{ head, tail []byte }

func encodeParts(ag *Agent) *viewParts {
	head, tail := encodeJSON(headOf(ag)), encodeJSON(tailOf(ag))
	return &viewParts{head: head[:len(head)-1], tail: tail[1 : len(tail)-1]}
}

// partsOf are e's parts, encoded on first use.
func partsOf(e *cachedAgent) *viewParts {
	if p := e.parts.Load(); p != nil {
		return p
	}
	p := encodeParts(e.a)
	e.parts.Store(p)
	return p
}

// noReputation is the reputation of an agent without reports, encoded.
var noReputation = func() []byte {
	var none rollupBuilder
	return reputationJSON(none.rollup())
}()

// reputationJSON is roll as the view's two last fields, encoded.
func reputationJSON(roll Rollup) []byte {
	v := encodeJSON(struct {
		Reputation         specReputation `json:"reputation"`
		WeightedReputation Weighted       `json:"weighted_reputation"`
	}{specOf(roll), roll.Weighted})
	return v[1 : len(v)-1]
}

// writeAgentView answers with e's agentView: the row's parts as they are
// kept, the rest put together in a small buffer of the pool.
func writeAgentView(w http.ResponseWriter, e *cachedAgent, handle string, online bool, lastSeen time.Time, roll Rollup) {
	p := partsOf(e)
	buf := answers.Get().(*[]byte)
	b := append((*buf)[:0], `,"handle":`...)
	b = appendJSONString(b, handle)
	b = append(b, `,"registered":true,"live":`...)
	b = appendBool(b, online)
	b = append(b, `,"online":`...)
	b = appendBool(b, online)
	b = append(b, `,"last_seen":"`...)
	b = append(lastSeen.AppendFormat(b, time.RFC3339Nano), '"', ',')
	rep := noReputation
	if roll.N > 0 || roll.Weighted.N > 0 {
		rep = reputationJSON(roll)
	}
	h := w.Header()
	h["Content-Type"], h["X-Content-Type-Options"] = jsonType, noSniff
	w.WriteHeader(http.StatusOK)
	for _, part := range [...][]byte{p.head, b, p.tail, {','}, rep, {'}', '\n'}} {
		w.Write(part)
	}
	*buf = b
	answers.Put(buf)
}

// answers hold the middle of answers being put together, so that a read
// does not allocate one each time.
var answers = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// The header values of the answer, shared: net/http only reads them.
var (
	jsonType = []string{"application/json"}
	noSniff  = []string{"nosniff"}
)

// appendJSONString appends s as a JSON string: quoted as it is when it
// holds nothing to escape (a URL), else as encodeJSON does.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			return append(b, encodeJSON(s)...)
		}
	}
	return append(append(append(b, '"'), s...), '"')
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, "true"...)
	}
	return append(b, "false"...)
}

// encodeJSON is v as WriteJSON encodes it (no HTML escaping), without its
// final line feed.
func encodeJSON(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}
