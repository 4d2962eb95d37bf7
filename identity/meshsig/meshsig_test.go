package meshsig

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/mesh/identity"
)

// TestVerify: what each kind of Mesh-Sig answers, with and without a
// binding; the codes are those every surface sends.
func TestVerify(t *testing.T) {
	key, other := identity.GenerateKey(), identity.GenerateKey()
	now := time.Unix(1_800_000_000, 0)
	bd := identity.Binding{Receiver: "https://agent.example", APIKey: "tk_1"}
	body := []byte(`{"x":1}`)
	for _, c := range []struct {
		name    string
		headers []string
		binding *identity.Binding
		want    error // nil: verifies (or none, when no header)
	}{
		{"none", nil, nil, nil},
		{"v1", []string{identity.Sign(key, "POST", "/v1/x?a=1", body, now)}, nil, nil},
		{"v1 where bound ones are taken", []string{identity.Sign(key, "POST", "/v1/x?a=1", body, now)}, &bd, nil},
		{"bound", []string{identity.SignBound(key, "POST", "/v1/x?a=1", body, now, bd)}, &bd, nil},
		{"bound for another receiver", []string{identity.SignBound(key, "POST", "/v1/x?a=1", body, now, identity.Binding{Receiver: "https://other.example"})}, &bd, ErrBadSig},
		{"bound where only v1 is taken", []string{identity.SignBound(key, "POST", "/v1/x?a=1", body, now, bd)}, nil, ErrBadSig},
		{"two headers", []string{identity.Sign(key, "POST", "/v1/x?a=1", body, now), identity.Sign(other, "POST", "/v1/x?a=1", body, now)}, nil, ErrBadSig},
		{"malformed", []string{"v1 nonsense"}, nil, ErrBadSig},
		{"another path", []string{identity.Sign(key, "POST", "/v1/x", body, now)}, nil, ErrBadSig},
		{"another body", []string{identity.Sign(key, "POST", "/v1/x?a=1", []byte(`{"x":2}`), now)}, nil, ErrBadSig},
		{"stale", []string{identity.Sign(key, "POST", "/v1/x?a=1", body, now.Add(-3*time.Minute))}, nil, ErrStaleSig},
		{"from the future", []string{identity.Sign(key, "POST", "/v1/x?a=1", body, now.Add(3*time.Minute))}, nil, ErrStaleSig},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "/v1/x?a=1", strings.NewReader(string(body)))
			for _, h := range c.headers {
				r.Header.Add(identity.SigHeaderName, h)
			}
			h, err := Verify(r, body, now, c.binding)
			switch {
			case c.want != nil:
				if !errors.Is(err, c.want) || h != nil {
					t.Fatalf("Verify = %v, %v; want %v", h, err, c.want)
				}
			case err != nil || (h == nil) != (c.headers == nil):
				t.Fatalf("Verify = %v, %v", h, err)
			case h != nil && (!h.Pubkey.Equal(key.Public()) || h.Bound != strings.HasPrefix(c.headers[0], identity.SigVersionBound+" ")):
				t.Fatalf("verified %+v", h)
			}
		})
	}
}
