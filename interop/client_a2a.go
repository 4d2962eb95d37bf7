package interop

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/agentmesh/mesh/identity"
)

// postA2A sends a call over A2A: message/send to endpoint with a data part
// naming skill and input, and hdr as message metadata (Mesh-Sig of
// POST /v1/<skill> with the input as body, X-Api-Key, a payment proof as
// an x402 payment submission). The task it answers is read back as the
// HTTP answer of the same call, so that the client pays and retries as
// over HTTP.
func (c *Client) postA2A(ctx context.Context, card *Card, endpoint, skill string, input []byte, hdr http.Header) (*http.Response, []byte, error) {
	if len(bytes.TrimSpace(input)) == 0 {
		input = []byte("null")
	}
	// The agent reads the input as the bytes of the data part, which JSON
	// encoding compacts: sign those bytes.
	in, err := json.Marshal(json.RawMessage(input))
	if err != nil {
		return nil, nil, fmt.Errorf("%w: the input is not JSON: %v", ErrCall, err)
	}
	data, _ := json.Marshal(map[string]any{"skill": skill, "input": json.RawMessage(in)})
	msg := a2aMessage{Kind: "message", MessageID: randomToken("msg_", 16), Role: "user",
		Parts: []a2aPart{{Kind: "data", Data: data}}, Metadata: c.a2aMeta(card, skill, in, hdr)}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": map[string]any{"message": msg}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http().Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return nil, nil, err
	}
	var answer struct {
		Result *a2aTask  `json:"result"`
		Error  *rpcError `json:"error"`
	}
	if err := json.Unmarshal(b, &answer); err != nil || answer.Result == nil && answer.Error == nil {
		return nil, nil, fmt.Errorf("%w: A2A message/send: %d %s", ErrCall, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	if e := answer.Error; e != nil {
		b, _ := json.Marshal(map[string]string{"detail": e.Message, "code": fmt.Sprintf("a2a_error_%d", -e.Code)})
		return &http.Response{StatusCode: http.StatusBadRequest, Header: http.Header{}}, b, nil
	}
	status, h, out := taskAnswer(answer.Result)
	return &http.Response{StatusCode: status, Header: h}, out, nil
}

// a2aMeta is the message metadata that stands for hdr and the client's
// Mesh-Sig.
func (c *Client) a2aMeta(card *Card, skill string, input []byte, hdr http.Header) map[string]json.RawMessage {
	meta := map[string]any{}
	if k := hdr.Get(HeaderAPIKey); k != "" {
		meta[MetaAPIKey] = k
	}
	if c.Key != nil {
		req, _ := http.NewRequest(http.MethodPost, skillURL(card, skill), nil)
		req.Header.Set(HeaderAPIKey, hdr.Get(HeaderAPIKey))
		c.sign(req, card, input)
		meta[MetaSig] = req.Header.Get(identity.SigHeaderName)
	}
	if proof := hdr.Get(HeaderPaymentProof); proof != "" {
		p := meshPayload{X402Version: X402Version, Scheme: schemeExact}
		if card.Payment != nil {
			p.Network = card.Payment.Network
		}
		p.Payload.Signature, p.Payload.Nonce = proof, hdr.Get(HeaderPaymentNonce)
		meta[MetaPaymentStatus], meta[MetaPaymentPayload] = PaymentStatusSubmitted, p
	}
	out := map[string]json.RawMessage{}
	for k, v := range meta {
		out[k], _ = json.Marshal(v)
	}
	return out
}

// taskAnswer reads a task as the HTTP answer of its call: the status and
// X-* headers of its mesh.http metadata when it has them, else from its
// state; the body is the artifact of a completed task, else the status
// message's data part (the HTTP answer's body: for a task awaiting
// payment, this project's challenge).
func taskAnswer(t *a2aTask) (int, http.Header, []byte) {
	h, status := http.Header{}, 0
	var msg a2aMessage
	if t.Status.Message != nil {
		msg = *t.Status.Message
	}
	var hm struct {
		Status  int               `json:"status"`
		Headers map[string]string `json:"headers"`
	}
	if json.Unmarshal(msg.Metadata[MetaHTTP], &hm) == nil {
		status = hm.Status
		for k, v := range hm.Headers {
			h.Set(k, v)
		}
	}
	var body []byte
	switch t.Status.State {
	case stateCompleted:
		status = orStatus(status, http.StatusOK)
		if len(t.Artifacts) > 0 && len(t.Artifacts[0].Parts) > 0 {
			body = partBytes(t.Artifacts[0].Parts[0])
		}
	case stateInputRequired:
		status = orStatus(status, http.StatusPaymentRequired)
	case stateRejected:
		status = orStatus(status, http.StatusBadRequest)
	default:
		status = orStatus(status, http.StatusBadGateway)
	}
	if body == nil {
		for _, p := range msg.Parts {
			if p.Kind == "data" {
				body = p.Data
			}
		}
	}
	if body == nil {
		body, _ = json.Marshal(map[string]string{"detail": fmt.Sprintf("the A2A task is %s", t.Status.State), "code": "a2a_" + t.Status.State})
	}
	return status, h, body
}

func orStatus(status, def int) int {
	if status == 0 {
		return def
	}
	return status
}

// partBytes is a part's content: a data part's JSON, a text part's text.
func partBytes(p a2aPart) []byte {
	if p.Kind == "data" {
		return p.Data
	}
	if p.Text != nil {
		return []byte(*p.Text)
	}
	return nil
}
