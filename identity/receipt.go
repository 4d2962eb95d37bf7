package identity

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// ReceiptHeaderName is the response header that carries a payment receipt.
const ReceiptHeaderName = "X-Mesh-Receipt"

// receiptTag opens the bytes an agent signs for a receipt, so that a
// receipt can never pass for a Mesh-Sig or a token, nor those for it.
const receiptTag = "MESHRECEIPT1\n"

// MaxReceiptLen bounds a receipt before any decoding.
const MaxReceiptLen = 1024

// Receipt is an agent's signed statement that a caller paid it for a call:
// what a reputation report cites to weigh as a paying customer's. It is
// the agent's own statement, signed by the key the agent registered.
type Receipt struct {
	V int `json:"v"`
	// Agent is the id of the agent that was paid.
	Agent string `json:"agent"`
	// Payer is the base64 Mesh-Sig key of the caller that paid; for an
	// unsigned call paid by x402 v2, the base64 key of the token account's
	// owner that signed the transfer (a Solana address is an Ed25519 key).
	Payer string `json:"payer"`
	// By is how: "x402" (Ref is the transaction signature, which anyone
	// can look up on chain) or "balance" (a debit of a prepaid balance;
	// Ref is the agent's own id of the debit).
	By  string `json:"by"`
	Ref string `json:"ref"`
	// Lamports is what the call cost, when paid in lamports.
	Lamports uint64 `json:"lamports"`
	// Asset and Amount are what a call paid in an SPL token (x402 v2)
	// cost: the mint and the amount in its smallest unit.
	Asset  string `json:"asset,omitempty"`
	Amount uint64 `json:"amount,omitempty"`
	// At is when it was paid, Unix seconds.
	At int64 `json:"at"`
}

// SignReceipt renders r signed by key: base64url(JSON) "." base64url(signature).
func SignReceipt(key ed25519.PrivateKey, r Receipt) string {
	r.V = 1
	body, _ := json.Marshal(r)
	sig := ed25519.Sign(key, append([]byte(receiptTag), body...))
	return base64.RawURLEncoding.EncodeToString(body) + "." + base64.RawURLEncoding.EncodeToString(sig)
}

// OpenReceipt checks that s is a receipt signed by pub and returns it.
func OpenReceipt(s string, pub ed25519.PublicKey) (Receipt, error) {
	var r Receipt
	if len(s) > MaxReceiptLen {
		return r, fmt.Errorf("%w: longer than %d bytes", ErrBadReceipt, MaxReceiptLen)
	}
	b64, sig64, ok := strings.Cut(s, ".")
	strict := base64.RawURLEncoding.Strict() // one spelling per receipt
	body, err1 := strict.DecodeString(b64)
	sig, err2 := strict.DecodeString(sig64)
	if !ok || err1 != nil || err2 != nil || len(sig) != ed25519.SignatureSize || json.Unmarshal(body, &r) != nil || r.V != 1 {
		return r, fmt.Errorf("%w: not <base64url JSON>.<base64url signature>", ErrBadReceipt)
	}
	if len(pub) != ed25519.PublicKeySize || !ed25519.Verify(pub, append([]byte(receiptTag), body...), sig) {
		return r, fmt.Errorf("%w: not signed by the agent's registered key", ErrBadReceipt)
	}
	if r.Ref == "" || r.Payer == "" || r.Agent == "" {
		return r, fmt.Errorf("%w: agent, payer and ref are required", ErrBadReceipt)
	}
	return r, nil
}

// Time is when the receipt says the call was paid.
func (r Receipt) Time() time.Time { return time.Unix(r.At, 0) }
