package registryapi

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/agentmesh/mesh/identity"
)

// TestTokenClaimsTheNodeNeverIssues: a token signed by a trusted
// directory key is still refused when it is dated ahead of the clock by
// more than TokenClockSkew or lives longer than TokenTTL; one dated a
// little ahead (another directory's clock) is accepted.
func TestTokenClaimsTheNodeNeverIssues(t *testing.T) {
	now := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	key := identity.GenerateKey()
	dir := NewTokens(key)
	forge := func(iat, exp time.Time) string {
		c, _ := json.Marshal(TokenClaims{Sub: "a1", Reg: 7, Iat: iat.Unix(), Exp: exp.Unix(), Iss: dir.iss})
		signed := tokenPrefix + base64.RawURLEncoding.EncodeToString(c)
		return signed + "." + base64.RawURLEncoding.EncodeToString(ed25519.Sign(key, []byte(signed)))
	}
	year := 365 * 24 * time.Hour
	for _, tc := range []struct {
		name     string
		iat, exp time.Time
		ok       bool
	}{
		{"issued now", now, now.Add(TokenTTL), true},
		{"issued by a clock a minute ahead", now.Add(time.Minute), now.Add(time.Minute + TokenTTL), true},
		{"issued a year ahead", now.Add(year), now.Add(year + TokenTTL), false},
		{"issued beyond the skew", now.Add(TokenClockSkew + time.Second), now.Add(TokenClockSkew + time.Second + TokenTTL), false},
		{"ten-year life", now.Add(-time.Hour), now.Add(10 * year), false},
		{"a second longer than TokenTTL", now, now.Add(TokenTTL + time.Second), false},
		{"expiring before issued", now, now.Add(-time.Second), false},
	} {
		_, err := dir.Verify(forge(tc.iat, tc.exp), now)
		if tc.ok != (err == nil) {
			t.Errorf("%s: Verify = %v, want ok %v", tc.name, err, tc.ok)
		}
		if !tc.ok && !errors.Is(err, ErrBadToken) && !errors.Is(err, ErrTokenExpired) {
			t.Errorf("%s: Verify = %v, want ErrBadToken", tc.name, err)
		}
	}
}

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
