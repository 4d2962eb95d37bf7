package interop

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// x402 version 2 (the x402 project's @x402/core types and HTTP headers):
// a paid skill's 402 carries a PaymentRequired in PAYMENT-REQUIRED beside
// the seed's body; a client pays with a PaymentPayload in
// PAYMENT-SIGNATURE (v1's X-PAYMENT is taken too) and the answer carries
// the SettleResponse in PAYMENT-RESPONSE. Every header value is base64
// (standard alphabet, padded) of the JSON.

// X402Version2 is the x402 version of PAYMENT-REQUIRED.
const X402Version2 = 2

// Headers of x402 v2 and v1's payment header.
const (
	HeaderPaymentRequired  = "Payment-Required"
	HeaderPaymentSignature = "Payment-Signature"
	HeaderPaymentResponse  = "Payment-Response"
	// HeaderXPayment and HeaderXPaymentResponse are x402 v1's.
	HeaderXPayment         = "X-Payment"
	HeaderXPaymentResponse = "X-Payment-Response"
)

// maxPaymentHeader bounds a payment header before it is decoded: a
// transaction is at most 1232 bytes, the rest is the echoed requirements.
const maxPaymentHeader = 16 << 10

// ResourceInfo names what is paid for.
type ResourceInfo struct {
	URL         string `json:"url"`
	Description string `json:"description,omitempty"`
	MimeType    string `json:"mimeType,omitempty"`
}

// PaymentRequirements is one way to pay (an entry of accepts).
type PaymentRequirements struct {
	Scheme            string            `json:"scheme"`
	Network           string            `json:"network"`
	Amount            string            `json:"amount"`
	Asset             string            `json:"asset"`
	PayTo             string            `json:"payTo"`
	MaxTimeoutSeconds int               `json:"maxTimeoutSeconds"`
	Extra             RequirementsExtra `json:"extra"`
}

// PriceText is the row's price in words: PriceText of the known
// currency of its mint, else its amount and mint.
func (r PaymentRequirements) PriceText() string {
	n, _ := strconv.ParseUint(r.Amount, 10, 64)
	return PriceText(Price{Amount: n, Currency: CurrencyOfMint(r.Asset), Asset: r.Asset}) + " to " + r.PayTo
}

// RequirementsExtra is the extra of an "exact" Solana requirement: the fee
// payer that co-signs, and the memo the transaction must carry (this
// agent's challenge nonce).
type RequirementsExtra struct {
	FeePayer string `json:"feePayer"`
	Memo     string `json:"memo,omitempty"`
}

// PaymentRequired is the x402 v2 challenge.
type PaymentRequired struct {
	X402Version int                   `json:"x402Version"`
	Error       string                `json:"error,omitempty"`
	Resource    ResourceInfo          `json:"resource"`
	Accepts     []PaymentRequirements `json:"accepts"`
}

// PaymentPayload is what a client pays with: x402 v2 (accepted names the
// requirements it chose) or v1 (scheme and network at the top).
type PaymentPayload struct {
	X402Version int                  `json:"x402Version"`
	Scheme      string               `json:"scheme,omitempty"`
	Network     string               `json:"network,omitempty"`
	Resource    *ResourceInfo        `json:"resource,omitempty"`
	Accepted    *PaymentRequirements `json:"accepted,omitempty"`
	Payload     struct {
		Transaction string `json:"transaction"`
	} `json:"payload"`
}

// SettleResponse is the settlement receipt (PAYMENT-RESPONSE).
type SettleResponse struct {
	Success     bool   `json:"success"`
	ErrorReason string `json:"errorReason,omitempty"`
	Payer       string `json:"payer,omitempty"`
	Transaction string `json:"transaction"`
	Network     string `json:"network"`
}

// EncodeHeader renders v as an x402 header value: base64 of its JSON.
func EncodeHeader(v any) string {
	b, _ := json.Marshal(v)
	return base64.StdEncoding.EncodeToString(b)
}

// DecodeHeader reads an x402 header value into v.
func DecodeHeader(s string, v any) error {
	if len(s) > maxPaymentHeader {
		return fmt.Errorf("header value longer than %d bytes", maxPaymentHeader)
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return fmt.Errorf("not base64: %w", err)
	}
	return json.Unmarshal(b, v)
}

// schemeAndNetwork are the payload's choice, wherever its version puts it.
func (p *PaymentPayload) schemeAndNetwork() (string, string) {
	if p.X402Version == X402Version2 {
		if p.Accepted == nil {
			return "", ""
		}
		return p.Accepted.Scheme, p.Accepted.Network
	}
	return p.Scheme, p.Network
}

// paymentHeader returns the payment header of r and the x402 version it
// speaks: PAYMENT-SIGNATURE (2), else X-PAYMENT (1); "" when neither.
func paymentHeader(r *http.Request) (string, int) {
	if v := r.Header.Get(HeaderPaymentSignature); v != "" {
		return v, X402Version2
	}
	if v := r.Header.Get(HeaderXPayment); v != "" {
		return v, 1
	}
	return "", 0
}

// decodePayment reads a payment header of version v: an "exact" payload
// on network (a CAIP-2 id; v1 names are taken) whose transaction decodes.
func decodePayment(value string, v int, network string) (*PaymentPayload, *svmTx, error) {
	var p PaymentPayload
	if err := DecodeHeader(value, &p); err != nil {
		return nil, nil, ErrPayloadMalformed.With("the payment header is not base64 JSON of a payment payload: %v", err)
	}
	if p.X402Version != v {
		return nil, nil, ErrPayloadMalformed.With("x402Version %d in the %s header", p.X402Version, headerOfVersion(v))
	}
	scheme, net := p.schemeAndNetwork()
	if c, _ := CAIP2(net); scheme != schemeExact || c != network {
		return nil, nil, ErrSchemeUnsupported.With("the payment is scheme %q on %q; this agent takes %q on %s", scheme, net, schemeExact, network)
	}
	raw, err := base64.StdEncoding.DecodeString(p.Payload.Transaction)
	if err != nil || len(raw) == 0 {
		return nil, nil, ErrPayloadMalformed.With("payload.transaction is not base64")
	}
	t, err := decodeTx(raw)
	if err != nil {
		return nil, nil, ErrPayloadMalformed.With("payload.transaction: %v", err)
	}
	return &p, t, nil
}

func headerOfVersion(v int) string {
	if v == X402Version2 {
		return HeaderPaymentSignature
	}
	return HeaderXPayment
}

// responseHeaderOf is where the settlement receipt goes for version v.
func responseHeaderOf(v int) string {
	if v == X402Version2 {
		return HeaderPaymentResponse
	}
	return HeaderXPaymentResponse
}

// requirementsOf renders the token rows as the accepts of a challenge.
func requirementsOf(rows Prices, network, payTo, feePayer, nonce string, timeoutSeconds int) []PaymentRequirements {
	out := make([]PaymentRequirements, len(rows))
	for i, p := range rows {
		out[i] = PaymentRequirements{Scheme: schemeExact, Network: network, Amount: strconv.FormatUint(p.Amount, 10),
			Asset: p.Asset, PayTo: payTo, MaxTimeoutSeconds: timeoutSeconds, Extra: RequirementsExtra{FeePayer: feePayer, Memo: nonce}}
	}
	return out
}

// ParsePaymentRequired reads the PAYMENT-REQUIRED header of a 402 answer;
// false when it has none or it does not decode.
func ParsePaymentRequired(h http.Header) (PaymentRequired, bool) {
	var pr PaymentRequired
	v := h.Get(HeaderPaymentRequired)
	return pr, v != "" && DecodeHeader(v, &pr) == nil && pr.X402Version == X402Version2
}

// ParseSettleResponse reads the settlement receipt of a paid answer
// (PAYMENT-RESPONSE, else X-PAYMENT-RESPONSE); false when it has none.
func ParseSettleResponse(h http.Header) (SettleResponse, bool) {
	var sr SettleResponse
	v := h.Get(HeaderPaymentResponse)
	if v == "" {
		v = h.Get(HeaderXPaymentResponse)
	}
	return sr, v != "" && DecodeHeader(v, &sr) == nil
}

// PaymentHeader returns the request header that carries an x402 payment
// payload (the JSON of a PaymentPayload, v1 or v2) and its value: what a
// transport that carries the payload otherwise (the A2A x402 extension's
// x402.payment.payload) sets on the call it runs through the skill's
// handler, which then verifies and settles it as over HTTP.
func PaymentHeader(payload json.RawMessage) (string, string, error) {
	var p struct {
		X402Version int `json:"x402Version"`
	}
	if json.Unmarshal(payload, &p) != nil || p.X402Version != 1 && p.X402Version != X402Version2 {
		return "", "", ErrPayloadMalformed.With("the payment payload is not JSON with x402Version 1 or 2")
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, payload); err != nil {
		return "", "", ErrPayloadMalformed
	}
	return headerOfVersion(p.X402Version), base64.StdEncoding.EncodeToString(compact.Bytes()), nil
}
