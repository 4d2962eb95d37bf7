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

// attach sets a receipt on the answer of a call the signed caller of r
// paid by how (x402: ref is the transaction; balance: a debit), when the
// answer is not a 5xx (which charged nothing). An unsigned caller gets
// none: a receipt names the key that paid.
func (rc *receipts) attach(h http.Header, r *http.Request, status int, how, ref string, lamports uint64, at int64) {
	c := CallerFrom(r.Context())
	if rc == nil || c.Pubkey == nil || status >= 500 {
		return
	}
	h.Set(identity.ReceiptHeaderName, identity.SignReceipt(rc.key, identity.Receipt{
		Agent: rc.agent, Payer: identity.EncodePublicKey(c.Pubkey), By: how, Ref: ref, Lamports: lamports, At: at,
	}))
}

// debitRef names one debit of a prepaid balance in its receipt.
func debitRef() string {
	var b [16]byte
	rand.Read(b[:])
	return "d_" + hex.EncodeToString(b[:])
}
