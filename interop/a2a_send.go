package interop

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/agentmesh/mesh/identity"
)

// Message metadata of the A2A binding. The x402.* keys are the A2A x402
// extension's (a2a_x402.go); the mesh.* keys carry what HTTP headers carry
// over HTTP.
const (
	// MetaSig is the Mesh-Sig header value of the call: a signature of
	// POST /v1/<skill> with the skill's input as the body.
	MetaSig = "mesh.sig"
	// MetaAPIKey is the X-Api-Key of a prepaid balance.
	MetaAPIKey = "mesh.api_key"
	// MetaHTTP is, on the agent's messages, the answer the same call gets
	// over HTTP: {"status": <code>, "headers": {<X-* header>: <value>}}.
	MetaHTTP = "mesh.http"
)

// The A2A 0.3 edge: its params and results are the core types as they are.

func (a *Agent) sendV03(r *http.Request, params json.RawMessage) (any, *rpcError) {
	var p struct {
		Message *a2aMessage `json:"message"`
	}
	if e := decodeParams(params, &p); e != nil {
		return nil, e
	}
	return a.sendMessage(r, p.Message)
}

func (a *Agent) getV03(_ *http.Request, params json.RawMessage) (any, *rpcError) {
	id, e := taskIDParam(params)
	if e != nil {
		return nil, e
	}
	return a.getTask(id)
}

func (a *Agent) cancelV03(_ *http.Request, params json.RawMessage) (any, *rpcError) {
	id, e := taskIDParam(params)
	if e != nil {
		return nil, e
	}
	return a.tasks.cancel(id, a.now())
}

// taskIDParam reads the params {"id": <task id>} of a task's get and
// cancel, in either version.
func taskIDParam(params json.RawMessage) (string, *rpcError) {
	var p struct {
		ID string `json:"id"`
	}
	if e := decodeParams(params, &p); e != nil {
		return "", e
	}
	if p.ID == "" {
		return "", rpcErr(rpcInvalidParams, "params.id (a task id) is required")
	}
	return p.ID, nil
}

func (a *Agent) getTask(id string) (a2aTask, *rpcError) {
	t, _, ok := a.tasks.get(id)
	if !ok {
		return a2aTask{}, rpcErr(rpcTaskNotFound, "task %s not found", id)
	}
	return t, nil
}

// sendMessage serves a message of either version: a new task for the call
// the message names, the next step of a task awaiting payment (its call,
// with the message's metadata), or the client's refusal to pay it.
func (a *Agent) sendMessage(r *http.Request, m *a2aMessage) (a2aTask, *rpcError) {
	switch {
	case m == nil:
		return a2aTask{}, rpcErr(rpcInvalidParams, "params.message is required")
	case m.Role != "user":
		return a2aTask{}, rpcErr(rpcInvalidParams, `message.role must be the user's ("user" in A2A 0.3, "ROLE_USER" in 1.0)`)
	case m.MessageID == "":
		return a2aTask{}, rpcErr(rpcInvalidParams, "message.messageId is required")
	}
	sub, e := a.submissionOf(m.Metadata)
	if e != nil {
		return a2aTask{}, e
	}
	var t a2aTask
	var call a2aCall
	if m.TaskID != "" {
		var ok bool
		if t, call, ok = a.tasks.get(m.TaskID); !ok {
			return t, rpcErr(rpcTaskNotFound, "task %s not found (tasks are kept %s); send the message again without taskId", m.TaskID, a.cfg.A2A.TaskTTL)
		}
		if t.terminal() {
			return t, rpcErr(rpcUnsupported, "task %s is %s and takes no more messages", t.ID, t.Status.State)
		}
	} else {
		if sub.rejected {
			return t, rpcErr(rpcInvalidParams, "%s %s answers a task awaiting payment: give its taskId", MetaPaymentStatus, PaymentStatusRejected)
		}
		if call, e = a.callOf(m.Parts); e != nil {
			return t, e
		}
		t = a2aTask{Kind: "task", ID: randomToken("task_", 16), ContextID: m.ContextID}
		if t.ContextID == "" {
			t.ContextID = randomToken("ctx_", 16)
		}
	}
	if sub.rejected {
		a.rejectPayment(&t)
	} else {
		a.settle(&t, call, a.runCall(r, call, sub.header), sub)
	}
	a.tasks.put(t, call)
	return t, nil
}

// callOf reads the call a message's parts name: one data part
// {"skill": <id>, "input": <JSON>}, or, for an agent with one skill, one
// text part whose text is the input (as JSON when it is JSON, else as a
// JSON string).
func (a *Agent) callOf(parts []a2aPart) (a2aCall, *rpcError) {
	var calls []a2aCall
	var texts []string
	for _, p := range parts {
		switch p.Kind {
		case "data":
			var d struct {
				Skill string          `json:"skill"`
				Input json.RawMessage `json:"input"`
			}
			if len(p.Data) == 0 || p.Data[0] != '{' || json.Unmarshal(p.Data, &d) != nil || d.Skill == "" {
				return a2aCall{}, rpcErr(rpcInvalidParams, `a data part must be {"skill": "<skill id>", "input": <JSON>}`)
			}
			if len(d.Input) == 0 {
				d.Input = json.RawMessage("null")
			}
			calls = append(calls, a2aCall{skill: d.Skill, input: d.Input})
		case "text":
			if p.Text == nil {
				return a2aCall{}, rpcErr(rpcInvalidParams, "a text part needs text")
			}
			texts = append(texts, *p.Text)
		case "file":
			return a2aCall{}, rpcErr(rpcContentType, "file parts are not taken: send a data part {\"skill\", \"input\"}")
		default:
			return a2aCall{}, rpcErr(rpcInvalidParams, "part kind %q is unknown (text, data or file)", p.Kind)
		}
	}
	switch {
	case len(calls) == 1:
		return a.knownSkill(calls[0])
	case len(calls) > 1:
		return a2aCall{}, rpcErr(rpcInvalidParams, "one data part per message: it names one skill call")
	case len(texts) == 1 && len(a.cfg.Skills) == 1:
		return a2aCall{skill: a.cfg.Skills[0].ID, input: textInput(texts[0])}, nil
	case len(texts) == 1:
		return a2aCall{}, rpcErr(rpcInvalidParams, `this agent has %d skills: name one in a data part {"skill": "<id>", "input": <JSON>}`, len(a.cfg.Skills))
	}
	return a2aCall{}, rpcErr(rpcInvalidParams, `the message names no call: send a data part {"skill": "<id>", "input": <JSON>}`)
}

func (a *Agent) knownSkill(c a2aCall) (a2aCall, *rpcError) {
	if _, ok := a.handlers[c.skill]; !ok {
		e := rpcErr(rpcInvalidParams, "skill %q is unknown; the card lists the skills", c.skill)
		e.Data = map[string]string{"code": "unknown_skill", "detail": e.Message}
		return a2aCall{}, e
	}
	return c, nil
}

// textInput is a text part as a skill input: the text when it is JSON,
// else the text as a JSON string.
func textInput(s string) []byte {
	if t := strings.TrimSpace(s); t != "" && json.Valid([]byte(t)) {
		return []byte(t)
	}
	b, _ := json.Marshal(s)
	return b
}

// metaString reads the string metadata key into h's header, if present.
func metaString(meta map[string]json.RawMessage, key string, h http.Header, header string) *rpcError {
	raw, ok := meta[key]
	if !ok {
		return nil
	}
	var v string
	if json.Unmarshal(raw, &v) != nil {
		return rpcErr(rpcInvalidParams, "metadata %s must be a string", key)
	}
	h.Set(header, v)
	return nil
}

// runCall runs call through the skill's handler, the one POST /v1/<skill>
// is served by, as a request from the client of r.
func (a *Agent) runCall(r *http.Request, call a2aCall, hdr http.Header) *capture {
	req, _ := http.NewRequestWithContext(r.Context(), http.MethodPost, "/v1/"+call.skill, bytes.NewReader(call.input))
	req.RemoteAddr, req.Host, req.Header = r.RemoteAddr, r.Host, hdr
	req.Header.Set("Content-Type", "application/json")
	rec := &capture{header: http.Header{}, status: http.StatusOK}
	a.handlers[call.skill].ServeHTTP(rec, req)
	return rec
}

// settle writes the answer of a call into its task: 2xx completes it with
// the answer as artifact; 402 leaves it awaiting payment; any other answer
// rejects it (4xx) or fails it (5xx). The status message carries the
// answer's text and {detail, code} (a data part), its HTTP status and X-*
// headers (mesh.http), and the x402 extension's keys.
func (a *Agent) settle(t *a2aTask, call a2aCall, rec *capture, sub submission) {
	meta := map[string]any{MetaHTTP: httpMeta(rec)}
	body := bytes.TrimSpace(rec.body.Bytes())
	var answer struct {
		Detail string `json:"detail"`
		Code   string `json:"code"`
	}
	json.Unmarshal(body, &answer)
	text := answer.Detail
	switch {
	case rec.status < 300:
		t.Status.State, text = stateCompleted, "completed"
		t.Artifacts = []a2aArtifact{{ArtifactID: "answer", Name: "answer", Parts: []a2aPart{answerPart(body)}}}
	case rec.status == http.StatusPaymentRequired:
		t.Status.State = stateInputRequired
	case rec.status >= 500:
		t.Status.State = stateFailed
	default:
		t.Status.State = stateRejected
	}
	a.x402Meta(meta, t, call, rec, answer.Code, answer.Detail, sub)
	msg := a.agentMessage(t, text, meta)
	if rec.status >= 300 && json.Valid(body) && len(body) > 0 && body[0] == '{' {
		msg.Parts = append(msg.Parts, a2aPart{Kind: "data", Data: body})
	}
	t.Status.Message = msg
}

// agentMessage is a status message of the agent for t, stamped now.
func (a *Agent) agentMessage(t *a2aTask, text string, meta map[string]any) *a2aMessage {
	msg := &a2aMessage{Kind: "message", MessageID: randomToken("msg_", 16), Role: "agent", TaskID: t.ID, ContextID: t.ContextID,
		Parts: []a2aPart{{Kind: "text", Text: &text}}, Metadata: map[string]json.RawMessage{}}
	for k, v := range meta {
		msg.Metadata[k], _ = json.Marshal(v)
	}
	t.Status.Timestamp = a.now().UTC().Format(time.RFC3339)
	return msg
}

// answerPart is a skill's answer as an artifact part: a data part when it
// is a JSON object, else a text part holding its JSON.
func answerPart(body []byte) a2aPart {
	if len(body) > 0 && body[0] == '{' {
		return a2aPart{Kind: "data", Data: body}
	}
	s := string(body)
	return a2aPart{Kind: "text", Text: &s}
}

// httpMeta is the mesh.http metadata of an answer: its status, its X-*
// headers (payment, receipt, balance, post-pay) and x402 v2's
// PAYMENT-REQUIRED and PAYMENT-RESPONSE.
func httpMeta(rec *capture) map[string]any {
	hs := map[string]string{}
	for k := range rec.header {
		if strings.HasPrefix(k, "X-") || k == HeaderPaymentRequired || k == HeaderPaymentResponse {
			hs[k] = rec.header.Get(k)
		}
	}
	return map[string]any{"status": rec.status, "headers": hs}
}

// meshHeaders are the HTTP headers a message's mesh.* metadata stands
// for: Mesh-Sig and X-Api-Key.
func meshHeaders(meta map[string]json.RawMessage) (http.Header, *rpcError) {
	h := http.Header{}
	if e := metaString(meta, MetaSig, h, identity.SigHeaderName); e != nil {
		return nil, e
	}
	if e := metaString(meta, MetaAPIKey, h, HeaderAPIKey); e != nil {
		return nil, e
	}
	return h, nil
}
