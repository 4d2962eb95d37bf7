package interop

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/agentmesh/mesh/identity"
)

// Message metadata of the A2A binding. The x402.* keys are x402's A2A
// transport; the mesh.* keys carry what HTTP headers carry over HTTP.
const (
	MetaPaymentStatus   = "x402.payment.status"
	MetaPaymentRequired = "x402.payment.required"
	MetaPaymentPayload  = "x402.payment.payload"
	MetaPaymentReceipts = "x402.payment.receipts"
	MetaPaymentError    = "x402.payment.error"
	// MetaSig is the Mesh-Sig header value of the call: a signature of
	// POST /v1/<skill> with the skill's input as the body.
	MetaSig = "mesh.sig"
	// MetaAPIKey is the X-Api-Key of a prepaid balance.
	MetaAPIKey = "mesh.api_key"
	// MetaHTTP is, on the agent's messages, the answer the same call gets
	// over HTTP: {"status": <code>, "headers": {<X-* header>: <value>}}.
	MetaHTTP = "mesh.http"
)

// x402 payment statuses of the A2A transport.
const (
	PaymentStatusRequired  = "payment-required"
	PaymentStatusSubmitted = "payment-submitted"
	PaymentStatusCompleted = "payment-completed"
	PaymentStatusFailed    = "payment-failed"
)

// x402Payload is the x402.payment.payload of a submission: this project's
// proof, the transaction signature and the challenge nonce.
type x402Payload struct {
	X402Version int    `json:"x402Version"`
	Scheme      string `json:"scheme"`
	Network     string `json:"network"`
	Payload     struct {
		Signature string `json:"signature"`
		Nonce     string `json:"nonce"`
	} `json:"payload"`
}

// a2aSend serves message/send: a new task for the call the message names,
// or the next step of a task awaiting payment (its call, with the
// message's metadata).
func (a *Agent) a2aSend(r *http.Request, params json.RawMessage) (any, *rpcError) {
	var p struct {
		Message *a2aMessage `json:"message"`
	}
	if e := decodeParams(params, &p); e != nil {
		return nil, e
	}
	m := p.Message
	switch {
	case m == nil:
		return nil, rpcErr(rpcInvalidParams, "params.message is required")
	case m.Role != "user":
		return nil, rpcErr(rpcInvalidParams, `message.role must be "user"`)
	case m.MessageID == "":
		return nil, rpcErr(rpcInvalidParams, "message.messageId is required")
	}
	hdr, submitted, e := callHeaders(m.Metadata)
	if e != nil {
		return nil, e
	}
	var t a2aTask
	var call a2aCall
	if m.TaskID != "" {
		var ok bool
		if t, call, ok = a.tasks.get(m.TaskID); !ok {
			return nil, rpcErr(rpcTaskNotFound, "task %s not found (tasks are kept %s); send the message again without taskId", m.TaskID, a.cfg.A2A.TaskTTL)
		}
		if t.terminal() {
			return nil, rpcErr(rpcInvalidRequest, "task %s is %s and takes no more messages", t.ID, t.Status.State)
		}
	} else {
		if call, e = a.callOf(m.Parts); e != nil {
			return nil, e
		}
		t = a2aTask{Kind: "task", ID: randomToken("task_", 16), ContextID: m.ContextID}
		if t.ContextID == "" {
			t.ContextID = randomToken("ctx_", 16)
		}
	}
	rec := a.runCall(r, call, hdr)
	a.settle(&t, rec, submitted)
	a.tasks.put(t, call)
	return t, nil
}

func (a *Agent) a2aGet(params json.RawMessage) (any, *rpcError) {
	id, e := taskIDParam(params)
	if e != nil {
		return nil, e
	}
	t, _, ok := a.tasks.get(id)
	if !ok {
		return nil, rpcErr(rpcTaskNotFound, "task %s not found", id)
	}
	return t, nil
}

func (a *Agent) a2aCancel(params json.RawMessage) (any, *rpcError) {
	id, e := taskIDParam(params)
	if e != nil {
		return nil, e
	}
	t, e := a.tasks.cancel(id, a.now())
	if e != nil {
		return nil, e
	}
	return t, nil
}

// taskIDParam reads the params {"id": <task id>} of tasks/get and
// tasks/cancel.
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

// callHeaders are the HTTP headers a message's metadata stands for:
// Mesh-Sig, X-Api-Key, and with a payment submission X-Payment-Proof and
// X-Payment-Nonce.
func callHeaders(meta map[string]json.RawMessage) (http.Header, bool, *rpcError) {
	h := http.Header{}
	str := func(key, header string) *rpcError {
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
	if e := str(MetaSig, identity.SigHeaderName); e != nil {
		return nil, false, e
	}
	if e := str(MetaAPIKey, HeaderAPIKey); e != nil {
		return nil, false, e
	}
	var status string
	if raw, ok := meta[MetaPaymentStatus]; ok && json.Unmarshal(raw, &status) != nil {
		return nil, false, rpcErr(rpcInvalidParams, "metadata %s must be a string", MetaPaymentStatus)
	}
	if status != PaymentStatusSubmitted {
		return h, false, nil
	}
	var p x402Payload
	if json.Unmarshal(meta[MetaPaymentPayload], &p) != nil || p.Payload.Signature == "" {
		return nil, false, rpcErr(rpcInvalidParams,
			`a payment submission needs metadata %s {"x402Version": 1, "scheme": "exact", "network", "payload": {"signature", "nonce"}}`, MetaPaymentPayload)
	}
	h.Set(HeaderPaymentProof, p.Payload.Signature)
	if p.Payload.Nonce != "" {
		h.Set(HeaderPaymentNonce, p.Payload.Nonce)
	}
	return h, true, nil
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
// the answer as artifact; 402 leaves it awaiting payment with the
// challenge in x402.payment.required; any other answer rejects it (4xx) or
// fails it (5xx) with the answer's {detail, code}.
func (a *Agent) settle(t *a2aTask, rec *capture, submitted bool) {
	meta := map[string]any{MetaHTTP: httpMeta(rec)}
	body := bytes.TrimSpace(rec.body.Bytes())
	var answer struct {
		Detail  string          `json:"detail"`
		Code    string          `json:"code"`
		Accepts json.RawMessage `json:"accepts"`
	}
	json.Unmarshal(body, &answer)
	text := answer.Detail
	switch {
	case rec.status < 300:
		t.Status.State, text = stateCompleted, "completed"
		t.Artifacts = []a2aArtifact{{ArtifactID: "answer", Name: "answer", Parts: []a2aPart{answerPart(body)}}}
		if sig := rec.header.Get(HeaderPaymentProof); sig != "" {
			meta[MetaPaymentStatus] = PaymentStatusCompleted
			meta[MetaPaymentReceipts] = []map[string]any{{"success": true, "transaction": sig, "network": a.paymentNetwork()}}
		}
	case rec.status == http.StatusPaymentRequired:
		t.Status.State = stateInputRequired
		if len(answer.Accepts) > 0 {
			meta[MetaPaymentStatus] = PaymentStatusRequired
			meta[MetaPaymentRequired] = json.RawMessage(body)
		}
		if submitted {
			meta[MetaPaymentError] = answer.Code
		}
	default:
		t.Status.State = stateRejected
		if rec.status >= 500 {
			t.Status.State = stateFailed
		}
		if submitted {
			meta[MetaPaymentStatus], meta[MetaPaymentError] = PaymentStatusFailed, answer.Code
		}
	}
	msg := &a2aMessage{Kind: "message", MessageID: randomToken("msg_", 16), Role: "agent", TaskID: t.ID, ContextID: t.ContextID,
		Parts: []a2aPart{{Kind: "text", Text: &text}}, Metadata: map[string]json.RawMessage{}}
	if rec.status >= 300 && json.Valid(body) && len(body) > 0 && body[0] == '{' {
		msg.Parts = append(msg.Parts, a2aPart{Kind: "data", Data: body})
	}
	for k, v := range meta {
		msg.Metadata[k], _ = json.Marshal(v)
	}
	t.Status.Message, t.Status.Timestamp = msg, a.now().UTC().Format(time.RFC3339)
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

// httpMeta is the mesh.http metadata of an answer: its status and its X-*
// headers (payment, receipt, balance, post-pay).
func httpMeta(rec *capture) map[string]any {
	hs := map[string]string{}
	for k := range rec.header {
		if strings.HasPrefix(k, "X-") {
			hs[k] = rec.header.Get(k)
		}
	}
	return map[string]any{"status": rec.status, "headers": hs}
}

func (a *Agent) paymentNetwork() string {
	if a.cfg.Payment == nil {
		return ""
	}
	return a.cfg.Payment.Network
}
