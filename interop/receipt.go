package interop

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"net/http"

	"github.com/agentmesh/mesh/identity"
)

// receipts signs the payment receipts of paid calls (identity.Receipt):
// what a caller cites in a reputation report about the agent, so that the
// report weighs as a paying customer's in the registry's weighted view.
type receipts struct {
	agent string             // the agent's registry id
	key   ed25519.PrivateKey // the key the agent registered
}

// attach sets receipt (By, Ref, the price and At filled in) on the answer
// of a call r paid, when the answer is not a 5xx (which charged nothing).
// The payer is the signed caller of r; else receipt.Payer when set (the
// key that signed an x402 v2 transfer); else none is given: a receipt
// names the key that paid.
func (rc *receipts) attach(h http.Header, r *http.Request, status int, receipt identity.Receipt) {
	if c := CallerFrom(r.Context()); c.Pubkey != nil {
		receipt.Payer = identity.EncodePublicKey(c.Pubkey)
	}
	if rc == nil || receipt.Payer == "" || status >= 500 {
		return
	}
	receipt.Agent = rc.agent
	h.Set(identity.ReceiptHeaderName, identity.SignReceipt(rc.key, receipt))
}

// debitRef names one debit of a prepaid balance in its receipt.
func debitRef() string {
	var b [16]byte
	rand.Read(b[:])
	return "d_" + hex.EncodeToString(b[:])
}
