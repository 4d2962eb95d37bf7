package interop

import (
	"encoding/json"
	"math"
	"net/http"
	"slices"
	"strconv"
	"time"
)

// The A2A x402 extension (a2a-x402 v0.2, "standalone flow"): a paid call's
// task waits in input-required with the payment requirements in its
// status message's metadata; the client answers on the task with a
// payment payload (or rejects paying), and the final status carries the
// settlement receipts. The payload runs through the very handler HTTP
// clients reach, as the HTTP header its shape belongs to: this project's
// proof as X-Payment-Proof and X-Payment-Nonce, an x402 PaymentPayload as
// x402's own X-PAYMENT (version 1) or PAYMENT-SIGNATURE (version 2).
const (
	MetaPaymentStatus   = "x402.payment.status"
	MetaPaymentRequired = "x402.payment.required"
	MetaPaymentPayload  = "x402.payment.payload"
	MetaPaymentReceipts = "x402.payment.receipts"
	MetaPaymentError    = "x402.payment.error"
)

// x402 payment statuses of the extension.
const (
	PaymentStatusRequired  = "payment-required"
	PaymentStatusSubmitted = "payment-submitted"
	PaymentStatusRejected  = "payment-rejected"
	PaymentStatusCompleted = "payment-completed"
	PaymentStatusFailed    = "payment-failed"
)

// meshPayload is the x402.payment.payload of this project's proof: the
// signature of a transaction that paid the challenge, and its nonce.
type meshPayload struct {
	X402Version int    `json:"x402Version"`
	Scheme      string `json:"scheme"`
	Network     string `json:"network"`
	Payload     struct {
		Signature string `json:"signature"`
		Nonce     string `json:"nonce,omitempty"`
	} `json:"payload"`
}

// submission is what a message's metadata asks of its call: the headers
// of the call (mesh.* and a payment), and whether it pays or refuses to.
type submission struct {
	header    http.Header
	submitted bool
	rejected  bool
	// transaction is the proof's signature, named in a failed receipt.
	transaction string
}

// submissionOf reads a message's metadata: Mesh-Sig, X-Api-Key, and the
// x402 extension's status with its payload.
func (a *Agent) submissionOf(meta map[string]json.RawMessage) (submission, *rpcError) {
	h, e := meshHeaders(meta)
	if e != nil {
		return submission{}, e
	}
	sub := submission{header: h}
	var status string
	if raw, ok := meta[MetaPaymentStatus]; ok && json.Unmarshal(raw, &status) != nil {
		return sub, rpcErr(rpcInvalidParams, "metadata %s must be a string", MetaPaymentStatus)
	}
	switch status {
	case PaymentStatusRejected:
		sub.rejected = true
	case PaymentStatusSubmitted:
		sub.submitted = true
		e = sub.payload(meta[MetaPaymentPayload])
	}
	return sub, e
}

// payload sets the header a payment payload stands for.
func (s *submission) payload(raw json.RawMessage) *rpcError {
	var p struct {
		Payload map[string]json.RawMessage `json:"payload"`
	}
	bad := rpcErr(rpcInvalidParams, `a payment submission needs metadata %s: an x402 PaymentPayload {"x402Version", "scheme", "network", "payload": {"transaction"}} `+
		`or this agent's proof {"x402Version": 1, "scheme": "exact", "network", "payload": {"signature", "nonce"}}`, MetaPaymentPayload)
	if len(raw) == 0 || raw[0] != '{' || json.Unmarshal(raw, &p) != nil || len(p.Payload) == 0 {
		return bad
	}
	if meshShaped(p.Payload) {
		var m meshPayload
		if json.Unmarshal(raw, &m) != nil || m.Payload.Signature == "" {
			return bad
		}
		s.header.Set(HeaderPaymentProof, m.Payload.Signature)
		if m.Payload.Nonce != "" {
			s.header.Set(HeaderPaymentNonce, m.Payload.Nonce)
		}
		s.transaction = m.Payload.Signature
		return nil
	}
	if tx, ok := p.Payload["transaction"]; ok {
		var v string
		if json.Unmarshal(tx, &v) != nil || v == "" {
			return rpcErr(rpcInvalidParams, "%s payload.transaction must be the base64 of a signed transaction", MetaPaymentPayload)
		}
	}
	name, value, err := PaymentHeader(raw)
	if err != nil {
		return rpcErr(rpcInvalidParams, "%s x402Version must be 1 or 2", MetaPaymentPayload)
	}
	s.header.Set(name, value)
	return nil
}

// meshShaped: a payload of this project's proof, a signature and maybe
// its nonce (x402's EVM payload also has a signature, and more).
func meshShaped(payload map[string]json.RawMessage) bool {
	for k := range payload {
		if k != "signature" && k != "nonce" {
			return false
		}
	}
	_, ok := payload["signature"]
	return ok
}

// x402Meta adds the extension's keys for a call's answer to meta: on a
// settled payment its receipt; on a 402 the requirements to pay (fresh
// ones after a refused payment, which also fails: payment-failed with a
// failed receipt, the task still awaiting payment).
func (a *Agent) x402Meta(meta map[string]any, t *a2aTask, call a2aCall, rec *capture, code, detail string, sub submission) {
	if rec.status < 300 {
		if r, ok := settled(rec, a.x402Network()); ok {
			t.receipts = append(slices.Clip(t.receipts), r)
			meta[MetaPaymentStatus], meta[MetaPaymentReceipts] = PaymentStatusCompleted, t.receipts
		}
		return
	}
	if rec.status == http.StatusPaymentRequired {
		if req := a.paymentRequired(call, rec, detail); req != nil {
			meta[MetaPaymentStatus], meta[MetaPaymentRequired] = PaymentStatusRequired, req
		}
	}
	if sub.submitted {
		t.receipts = append(slices.Clip(t.receipts), SettleResponse{ErrorReason: code + ": " + detail, Transaction: sub.transaction, Network: a.x402Network()})
		meta[MetaPaymentStatus], meta[MetaPaymentError], meta[MetaPaymentReceipts] = PaymentStatusFailed, code, t.receipts
	}
}

// settled is the receipt of a call the x402 path was paid for: x402's
// settlement answer when the paywall gave one, else this project's proof.
func settled(rec *capture, network string) (SettleResponse, bool) {
	if sr, ok := ParseSettleResponse(rec.header); ok {
		return sr, true
	}
	if sig := rec.header.Get(HeaderPaymentProof); sig != "" {
		return SettleResponse{Success: true, Transaction: sig, Network: network}, true
	}
	return SettleResponse{}, false
}

// rejectPayment ends a task whose client refused to pay: canceled,
// nothing charged.
func (a *Agent) rejectPayment(t *a2aTask) {
	t.Status.State = stateCanceled
	meta := map[string]any{MetaPaymentStatus: PaymentStatusRejected, MetaPaymentReceipts: t.receiptList()}
	t.Status.Message = a.agentMessage(t, "the client rejected the payment requirements; the skill did not run and nothing was charged", meta)
	t.Artifacts = nil
}

// x402Required is x402's PaymentRequiredResponse (version 1), the
// extension's x402.payment.required.
type x402Required struct {
	X402Version int               `json:"x402Version"`
	Accepts     []x402Requirement `json:"accepts"`
	Error       string            `json:"error"`
}

// x402Requirement is x402's PaymentRequirements (version 1). Extra holds
// what this project's proof needs: the nonce the transaction's memo must
// carry, the card's network tag, the payment link and the expiry.
type x402Requirement struct {
	Scheme            string         `json:"scheme"`
	Network           string         `json:"network"`
	MaxAmountRequired string         `json:"maxAmountRequired"`
	Resource          string         `json:"resource"`
	Description       string         `json:"description"`
	MimeType          string         `json:"mimeType"`
	PayTo             string         `json:"payTo"`
	MaxTimeoutSeconds int64          `json:"maxTimeoutSeconds"`
	Asset             string         `json:"asset"`
	Extra             map[string]any `json:"extra,omitempty"`
}

// paymentRequired is the extension's x402.payment.required for a 402
// answer: its offers as x402 PaymentRequirements, those of the x402 v2
// PAYMENT-REQUIRED header first when the answer has one. Nil when the
// answer offers nothing to pay per call (a prepaid-only agent).
func (a *Agent) paymentRequired(call a2aCall, rec *capture, detail string) *x402Required {
	req := &x402Required{X402Version: 1, Error: detail}
	if pr, ok := ParsePaymentRequired(rec.header); ok {
		for _, r := range pr.Accepts {
			req.Accepts = append(req.Accepts, requirementV1(pr.Resource, r))
		}
	}
	if req.Error == "" {
		req.Error = ErrPaymentRequired.Detail
	}
	if c, err := ParseChallenge(rec.header, rec.body.Bytes()); err == nil {
		for _, o := range c.Offers {
			req.Accepts = append(req.Accepts, a.requirement(call, o))
		}
	}
	if len(req.Accepts) == 0 {
		return nil
	}
	return req
}

// requirement is an offer of this project's challenge as x402
// PaymentRequirements.
func (a *Agent) requirement(call a2aCall, o Offer) x402Requirement {
	ttl := int64(a.cfg.Payment.ChallengeTTL / time.Second)
	extra := map[string]any{"nonce": o.Nonce, "network": o.Network, "chainPayUrl": o.PayURL}
	if !o.ExpiresAt.IsZero() {
		ttl = max(1, int64(math.Ceil(o.ExpiresAt.Sub(a.now()).Seconds())))
		extra["expiresAt"] = o.ExpiresAt.UTC().Format(time.RFC3339)
	}
	asset := o.Asset
	if asset == "" {
		asset = NativeAsset
	}
	resource := a.baseURL() + "/v1/" + call.skill
	return x402Requirement{Scheme: o.Scheme, Network: x402NetworkV1(o.Network), MaxAmountRequired: strconv.FormatUint(o.Lamports, 10),
		Resource: resource, Description: a.skillDescription(call.skill), MimeType: "application/json", PayTo: o.PayTo,
		MaxTimeoutSeconds: ttl, Asset: asset, Extra: extra}
}

// requirementV1 is a row of an x402 v2 PAYMENT-REQUIRED for resource as
// x402 version 1 PaymentRequirements.
func requirementV1(resource ResourceInfo, r PaymentRequirements) x402Requirement {
	extra := map[string]any{"feePayer": r.Extra.FeePayer}
	if r.Extra.Memo != "" {
		extra["memo"] = r.Extra.Memo
	}
	return x402Requirement{Scheme: r.Scheme, Network: x402NetworkV1(r.Network), MaxAmountRequired: r.Amount,
		Resource: resource.URL, Description: resource.Description, MimeType: resource.MimeType, PayTo: r.PayTo,
		MaxTimeoutSeconds: int64(r.MaxTimeoutSeconds), Asset: r.Asset, Extra: extra}
}

// x402NetworkV1 is x402's version 1 name of a network, of this project's
// tags and of x402 v2's CAIP-2 ids; any other name as it is.
func x402NetworkV1(network string) string {
	switch c, _ := CAIP2(network); c {
	case CAIP2Devnet:
		return "solana-devnet"
	case CAIP2Mainnet:
		return "solana"
	}
	return network
}

// x402Network is the x402 name of the agent's payment network.
func (a *Agent) x402Network() string {
	if a.cfg.Payment == nil {
		return ""
	}
	return x402NetworkV1(a.cfg.Payment.Network)
}

// skillDescription says what a payment for skill buys.
func (a *Agent) skillDescription(skill string) string {
	for _, s := range a.cfg.Skills {
		if s.ID == skill && s.Description != "" {
			return s.Description
		}
		if s.ID == skill && s.Name != "" {
			return s.Name
		}
	}
	return "a call of skill " + skill
}
