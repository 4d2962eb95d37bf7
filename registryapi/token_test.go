package registryapi

import (
	"testing"
	"time"

	"github.com/agentmesh/mesh/identity"
)

// FuzzTokenVerify: bearer tokens arrive from anyone. No input may panic, and
// a token is accepted only when it carries exactly the claims the directory
// signed: neither a mutated nor a foreign token gets through.
func FuzzTokenVerify(f *testing.F) {
	now := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	dir := NewTokens(identity.GenerateKey())
	good, _ := dir.Issue("a1", 7, now)
	expired, _ := dir.Issue("a1", 7, now.Add(-TokenTTL-time.Second))
	foreign, _ := NewTokens(identity.GenerateKey()).Issue("a1", 7, now)
	for _, s := range []string{good, expired, foreign, "", "mt1.", "mt1..", "mt1.e30.AAAA", good + "x", good[:len(good)-1]} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, tok string) {
		c, err := dir.Verify(tok, now)
		if err != nil {
			return
		}
		if c.Sub != "a1" || c.Reg != 7 || c.Exp != now.Add(TokenTTL).Unix() || c.Iss != dir.iss {
			t.Fatalf("accepted %q with claims %+v that the directory never signed", tok, c)
		}
	})
}
