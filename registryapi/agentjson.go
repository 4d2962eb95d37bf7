package registryapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
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

// viewParts are what a read of a row answers from, kept with it while it
// is cached: the fields a read needs, and its encoded parts in one string
// (head | seen | tail | suffix), read front to back. A read touches this and
// not the row, whose fields lie apart in memory: a cold line costs a read
// more than anything it computes.
type viewParts struct {
	text string
	// seen, tail and suffix are where those parts start in text: head is
	// viewHead encoded without its closing brace, seen LastSeen as the view
	// encodes it (last_seen until the agent's first heartbeat), tail
	// viewTail without either brace, and suffix the handle's end
	// (`/agent/<id>"`), empty when the id must be escaped.
	seen, tail, suffix int
	lastSeen           time.Time
	reg                uint64
	id                 string // the agent's id, in text when it is there as it is
}

func (p *viewParts) head() string { return p.text[:p.seen] }

func encodeParts(ag *Agent) viewParts {
	head, tail := encodeJSON(headOf(ag)), encodeJSON(tailOf(ag))
	b := append([]byte(nil), head[:len(head)-1]...)
	p := viewParts{seen: len(b), lastSeen: ag.LastSeen, reg: ag.Reg, id: ag.ID}
	b = appendTime(b, ag.LastSeen)
	p.tail = len(b)
	b = append(b, tail[1:len(tail)-1]...)
	p.suffix = len(b)
	if plainJSON(ag.ID) {
		b = append(append(append(b, "/agent/"...), ag.ID...), '"')
	}
	p.text = string(b)
	if s := p.text[len(`{"agent_id":"`):]; strings.HasPrefix(s, ag.ID) {
		p.id = s[:len(ag.ID)]
	}
	return p
}

// partsOf are e's parts.
func partsOf(e *cachedAgent) *viewParts { return &e.view }

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

// writeAgentView answers with p's agentView, its handle at base: the
// row's parts as they are kept and the rest put together in a buffer of
// the pool, written at once.
func writeAgentView(w http.ResponseWriter, p *viewParts, base string, online bool, lastSeen time.Time, roll Rollup) {
	buf := answers.Get().(*answerBuf)
	b := append(append(buf[:0], p.head()...), `,"handle":`...)
	if p.suffix < len(p.text) && plainJSON(base) {
		b = append(append(append(b, '"'), base...), p.text[p.suffix:]...)
	} else {
		b = append(b, encodeJSON(base+"/agent/"+p.id)...)
	}
	b = append(b, `,"registered":true,"live":`...)
	b = appendBool(b, online)
	b = append(b, `,"online":`...)
	b = appendBool(b, online)
	b = append(b, `,"last_seen":`...)
	if lastSeen == p.lastSeen { // the very value of the row (no heartbeat is later): kept encoded
		b = append(b, p.text[p.seen:p.tail]...)
	} else {
		b = appendTime(b, lastSeen)
	}
	b = append(append(append(b, ','), p.text[p.tail:p.suffix]...), ',')
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
	answers.Put(buf)
}

// answerBuf holds an answer being put together (one that outgrows it, for
// a large card, grows a buffer of its own). The pool keeps buffers, not
// slices of them: a read writes into the one it gets, without first
// reading where its bytes are.
type answerBuf [4096]byte

var answers = sync.Pool{New: func() any { return new(answerBuf) }}

// The header values of the answer, shared: net/http only reads them.
var (
	jsonType = []string{"application/json"}
	noSniff  = []string{"nosniff"}
)

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
