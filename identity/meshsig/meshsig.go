// Package meshsig is the one check of an HTTP request's Mesh-Sig (the
// scheme of package identity) and the errors a client sees from it, with
// their stable codes: signature_required, invalid_signature,
// stale_signature and nonce_reused. The registry, the agent's paywall
// and the quorum's admin API verify with Verify; the wall's proof of key
// answers with the same codes by re-issuing these errors.
//
// Replay protection stays with the caller: where a nonce is remembered
// depends on who applies the request (the directory's log, an agent's
// ledger, the quorum's leader).
package meshsig

import (
	"errors"
	"net/http"
	"time"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/httpx"
)

// Errors a client sees.
var (
	ErrNoSig    = httpx.E(http.StatusUnauthorized, "signature_required", "Mesh-Sig header required")
	ErrBadSig   = httpx.E(http.StatusUnauthorized, "invalid_signature", "Mesh-Sig does not verify")
	ErrStaleSig = httpx.E(http.StatusUnauthorized, "stale_signature", "Mesh-Sig timestamp outside the 120 s tolerance")
	ErrReplay   = httpx.E(http.StatusUnauthorized, "nonce_reused", "Mesh-Sig nonce already used")
)

// Verify checks r's Mesh-Sig over body against now: its one header, its
// timestamp within identity.ClockTolerance, its signature. It returns nil
// and no error when r carries none; a caller that requires one answers
// ErrNoSig. With a nil binding only v1 signatures verify; with one, a
// v1-bound signature must name it (identity.VerifyBound), and h.Bound
// tells which kind verified. The detail of an error says what was wrong
// with the header, which is the client's own.
func Verify(r *http.Request, body []byte, now time.Time, binding *identity.Binding) (*identity.SigHeader, error) {
	hdr, err := identity.SigOf(r.Header)
	if err != nil {
		return nil, ErrBadSig.With("%v", err)
	}
	if hdr == "" {
		return nil, nil
	}
	var h identity.SigHeader
	if binding == nil {
		h, err = identity.Verify(hdr, r.Method, identity.RequestPath(r.URL), body, now)
	} else {
		h, err = identity.VerifyBound(hdr, r.Method, identity.RequestPath(r.URL), body, now, *binding)
	}
	switch {
	case errors.Is(err, identity.ErrStaleSig):
		return nil, ErrStaleSig.With("%v", err)
	case err != nil:
		return nil, ErrBadSig.With("%v", err)
	}
	return &h, nil
}
