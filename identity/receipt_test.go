package identity

import (
	"crypto/ed25519"
	"testing"
)

// FuzzOpenReceipt: receipts arrive in reports from anyone. No input
// panics, and only what the agent's key signed opens.
func FuzzOpenReceipt(f *testing.F) {
	key := GenerateKey()
	pub := key.Public().(ed25519.PublicKey)
	good := SignReceipt(key, Receipt{Agent: "a1", Payer: "cGF5ZXI=", By: "x402", Ref: "tx", Lamports: 5, At: 1})
	foreign := SignReceipt(GenerateKey(), Receipt{Agent: "a1", Payer: "cGF5ZXI=", By: "x402", Ref: "tx", Lamports: 5, At: 1})
	for _, s := range []string{good, foreign, "", ".", "e30.", good + "x", good[:len(good)-2]} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := OpenReceipt(s, pub)
		if err != nil {
			return
		}
		if s != good || r.Agent != "a1" || r.Ref != "tx" || r.Lamports != 5 {
			t.Fatalf("opened %q as %+v: the agent never signed it", s, r)
		}
	})
}
