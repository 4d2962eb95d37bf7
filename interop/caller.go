package interop

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/identity/meshsig"
	"github.com/agentmesh/mesh/internal/httpx"
)

// Caller is who called a skill, as far as the agent could verify.
type Caller struct {
	// Pubkey is the verified Mesh-Sig key; nil for an unsigned call.
	Pubkey ed25519.PublicKey
	// Bound is set when the Mesh-Sig was v1-bound: it named this agent
	// and the request's X-Api-Key, so it cannot be replayed elsewhere.
	Bound bool
	// IP is the address of the client the request came from
	// (httpx.ClientIP: behind a trusted proxy, the client it names).
	IP string
	// PaidBy is how the call was paid: "free", "balance", "x402",
	// "postpay", or "" for a free skill.
	PaidBy string
}

type callerKey struct{}

// CallerFrom returns the caller of the request a skill handler serves.
func CallerFrom(ctx context.Context) Caller {
	c, _ := ctx.Value(callerKey{}).(Caller)
	return c
}

func withCaller(r *http.Request, c Caller) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), callerKey{}, c))
}

func withPaidBy(w http.ResponseWriter, r *http.Request, how string) (http.ResponseWriter, *http.Request) {
	c := CallerFrom(r.Context())
	c.PaidBy = how
	return w, withCaller(r, c)
}

// signed reads the body (at most maxBody), verifies a Mesh-Sig when one is
// present (required when require is set), claims its nonce, and hands next
// a request whose context carries the Caller and whose body can be read
// again. A v1-bound signature must name origin (the agent's own, "" when
// it has none: then only v1 verifies) and the request's X-Api-Key.
func signed(l *ledger, now func() time.Time, origin func() string, maxBody int64, require bool, next httpx.HandlerFunc) httpx.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		body, err := httpx.ReadBody(w, r, maxBody)
		if err != nil {
			return err
		}
		c := Caller{IP: httpx.ClientIP(r)}
		bd := sigBinding(r, origin())
		h, err := meshsig.Verify(r, body, now(), &bd)
		switch {
		case err != nil:
			return err
		case h != nil:
			if err := l.claimMeshNonce(hex.EncodeToString(h.Pubkey), h.Nonce); err != nil {
				return err
			}
			c.Pubkey, c.Bound = h.Pubkey, h.Bound
		case require:
			return meshsig.ErrNoSig
		}
		r = withCaller(r, c)
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		return next(w, r)
	}
}

// sigBinding is what a v1-bound signature of r names when it is sent to
// the agent at origin: the caller signs it, the agent checks it.
func sigBinding(r *http.Request, origin string) identity.Binding {
	return identity.Binding{Receiver: origin, APIKey: r.Header.Get(HeaderAPIKey)}
}

// Origin is the receiver a v1-bound signature names for an agent whose
// card declares url u: "scheme://host[:port]", scheme and host in lower
// case, without the scheme's default port; "" when u is not an absolute
// http(s) URL.
func Origin(u string) string {
	p, err := url.Parse(u)
	if err != nil || p.Host == "" {
		return ""
	}
	scheme, host, port := strings.ToLower(p.Scheme), strings.ToLower(p.Hostname()), p.Port()
	if scheme != "http" && scheme != "https" {
		return ""
	}
	if (scheme == "http" && port == "80") || (scheme == "https" && port == "443") {
		port = ""
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if port != "" {
		host += ":" + port
	}
	return scheme + "://" + host
}

// rereadBody returns the request body, already read and bounded by
// signed, and leaves it in place for the next reader.
func rereadBody(r *http.Request) []byte {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	return body
}
