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

// viewParts are a row's encoded viewHead without its closing brace,
// viewTail without either brace, and its LastSeen as the view encodes it
// (what last_seen is until the agent's first heartbeat).
type viewParts struct{ head, tail, seen []byte }

func encodeParts(ag *Agent) *viewParts {
	head, tail := encodeJSON(headOf(ag)), encodeJSON(tailOf(ag))
	return &viewParts{head: head[:len(head)-1], tail: tail[1 : len(tail)-1], seen: appendTime(nil, ag.LastSeen)}
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
var noReputation = reputationJSON(noReports)

// reputationJSON is roll as the view's two last fields, encoded.
func reputationJSON(roll Rollup) []byte {
	v := encodeJSON(struct {
		Reputation         specReputation `json:"reputation"`
		WeightedReputation Weighted       `json:"weighted_reputation"`
	}{specOf(roll), roll.Weighted})
	return v[1 : len(v)-1]
}

// writeAgentView answers with e's agentView, its handle at base: the
// row's parts as they are kept and the rest put together in a buffer of
// the pool, written at once.
func writeAgentView(w http.ResponseWriter, e *cachedAgent, base string, online bool, lastSeen time.Time, roll Rollup) {
	p := partsOf(e)
	buf := answers.Get().(*[]byte)
	b := append(append((*buf)[:0], p.head...), `,"handle":`...)
	b = appendHandle(b, base, e.a.ID)
	b = append(b, `,"registered":true,"live":`...)
	b = appendBool(b, online)
	b = append(b, `,"online":`...)
	b = appendBool(b, online)
	b = append(b, `,"last_seen":`...)
	if lastSeen == e.a.LastSeen { // the very value of the row (no heartbeat is later): kept encoded
		b = append(b, p.seen...)
	} else {
		b = appendTime(b, lastSeen)
	}
	b = append(append(append(b, ','), p.tail...), ',')
	if roll.N > 0 || roll.Weighted.N > 0 {
		b = append(b, reputationJSON(roll)...)
	} else {
		b = append(b, noReputation...)
	}
	b = append(b, '}', '\n')
	h := w.Header()
	h["Content-Type"], h["X-Content-Type-Options"] = jsonType, noSniff
	w.WriteHeader(http.StatusOK)
	w.Write(b)
	if cap(b) <= maxPooledAnswer {
		*buf = b
		answers.Put(buf)
	}
}

// answers hold answers being put together, so that a read does not grow
// a buffer each time; one that a large card made larger than
// maxPooledAnswer is left to the collector.
var answers = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

const maxPooledAnswer = 64 << 10

// The header values of the answer, shared: net/http only reads them.
var (
	jsonType = []string{"application/json"}
	noSniff  = []string{"nosniff"}
)

// appendHandle appends base/agent/id as a JSON string: quoted as it is
// when it holds nothing to escape (a URL), else as encodeJSON does.
func appendHandle(b []byte, base, id string) []byte {
	if plainJSON(base) && plainJSON(id) {
		return append(append(append(append(append(b, '"'), base...), "/agent/"...), id...), '"')
	}
	return append(b, encodeJSON(base+"/agent/"+id)...)
}

// plainJSON reports whether s reads as it is inside a JSON string: no
// byte the encoder escapes or might (control, quote, backslash, non-ASCII).
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// appendTime appends t as a JSON string, as time.Time encodes itself.
func appendTime(b []byte, t time.Time) []byte {
	return append(t.AppendFormat(append(b, '"'), time.RFC3339Nano), '"')
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
