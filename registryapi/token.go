package registryapi

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"strings"
	"time"

	"github.com/agentmesh/mesh/identity"
)

// TokenTTL is the lifetime of a bearer token (spec section 8).
const TokenTTL = 24 * time.Hour

// TokenClockSkew is how far ahead of this node's clock a token's iat may
// be: the clocks of two directory nodes differ a little, never by more
// than a Mesh-Sig may (identity.ClockTolerance).
const TokenClockSkew = identity.ClockTolerance

// tokenPrefix versions the token format: "mt1.<claims>.<signature>", both
// parts unpadded base64url, the signature an Ed25519 signature by the
// issuing directory over "mt1.<claims>".
const tokenPrefix = "mt1."

const maxTokenLen = 1024

// TokenClaims is what a bearer token asserts.
type TokenClaims struct {
	Sub string `json:"sub"` // agent id
	Reg uint64 `json:"reg"` // registration the token belongs to
	Iat int64  `json:"iat"` // unix seconds
	Exp int64  `json:"exp"` // unix seconds
	Iss string `json:"iss"` // did:key of the issuing directory
}

// Tokens issues and verifies bearer tokens. Verification needs no lookup:
// a token is valid when signed by a trusted directory key and unexpired.
// There is no revocation (spec 5.1); a token names its registration, so it
// stops acting once that registration is gone.
type Tokens struct {
	key     ed25519.PrivateKey // nil on nodes that cannot issue
	iss     string
	trusted map[string]ed25519.PublicKey
	// trusts, if set, decides which issuers (did:key) are trusted
	// directories instead of the map, knowing when a token was issued: the
	// set changes as the members of a quorum do, and a member removed
	// still vouches for the tokens it issued before.
	trusts func(did string, issued time.Time) bool
}

// NewTokens returns Tokens that issue with key (may be nil) and trust the
// given directory keys in addition to key's own.
func NewTokens(key ed25519.PrivateKey, trusted ...ed25519.PublicKey) *Tokens {
	t := &Tokens{key: key, trusted: map[string]ed25519.PublicKey{}}
	if key != nil {
		pub := key.Public().(ed25519.PublicKey)
		t.iss = identity.DIDFromPublicKey(pub)
		t.trusted[t.iss] = pub
	}
	for _, p := range trusted {
		t.trusted[identity.DIDFromPublicKey(p)] = p
	}
	return t
}

// NewTokensTrusting returns Tokens that issue with key (may be nil) and
// trust the issuers that trusted accepts. An issuer is a did:key, so the
// key that verifies its tokens comes from its name.
func NewTokensTrusting(key ed25519.PrivateKey, trusted func(did string, issued time.Time) bool) *Tokens {
	t := NewTokens(key)
	t.trusts = trusted
	return t
}

// trustedKey is the key of iss, if iss is a trusted directory for a token
// issued at iat.
func (t *Tokens) trustedKey(iss string, iat int64) (ed25519.PublicKey, bool) {
	if t.trusts == nil {
		pub, ok := t.trusted[iss]
		return pub, ok
	}
	if !t.trusts(iss, time.Unix(iat, 0)) {
		return nil, false
	}
	pub, err := identity.PublicKeyFromDID(iss)
	return pub, err == nil
}

// Issue returns a token for registration reg of agent id, valid TokenTTL.
func (t *Tokens) Issue(id string, reg uint64, now time.Time) (string, time.Time) {
	exp := now.Add(TokenTTL)
	c, _ := json.Marshal(TokenClaims{Sub: id, Reg: reg, Iat: now.Unix(), Exp: exp.Unix(), Iss: t.iss})
	signed := tokenPrefix + base64.RawURLEncoding.EncodeToString(c)
	sig := ed25519.Sign(t.key, []byte(signed))
	return signed + "." + base64.RawURLEncoding.EncodeToString(sig), exp
}

// CanIssue reports whether this node holds a directory key.
func (t *Tokens) CanIssue() bool { return t.key != nil }

// Verify checks a token and returns its claims.
func (t *Tokens) Verify(tok string, now time.Time) (TokenClaims, error) {
	var c TokenClaims
	if len(tok) > maxTokenLen || !strings.HasPrefix(tok, tokenPrefix) {
		return c, ErrBadToken.With("bearer token is not a mesh token")
	}
	dot := strings.LastIndexByte(tok, '.')
	if dot <= len(tokenPrefix) {
		return c, ErrBadToken.With("bearer token is not a mesh token")
	}
	signed, sigPart := tok[:dot], tok[dot+1:]
	sig, err := base64.RawURLEncoding.DecodeString(sigPart)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return c, ErrBadToken.With("bearer token signature is malformed")
	}
	raw, err := base64.RawURLEncoding.DecodeString(signed[len(tokenPrefix):])
	if err != nil || json.Unmarshal(raw, &c) != nil || c.Sub == "" || c.Reg == 0 {
		return c, ErrBadToken.With("bearer token claims are malformed")
	}
	pub, ok := t.trustedKey(c.Iss, c.Iat)
	if !ok {
		return c, ErrBadToken.With("bearer token issuer is not a trusted directory")
	}
	if !ed25519.Verify(pub, []byte(signed), sig) {
		return c, ErrBadToken
	}
	// A trusted key signed it, but the node never issues a token dated
	// ahead of its clock or living longer than TokenTTL: such a token
	// comes from a leaked or misused key, or a clock gone wrong.
	if c.Iat > now.Add(TokenClockSkew).Unix() {
		return c, ErrBadToken.With("bearer token is issued in the future")
	}
	if life := c.Exp - c.Iat; life <= 0 || life > int64(TokenTTL/time.Second) {
		return c, ErrBadToken.With("bearer token lives longer than the %s a directory issues", TokenTTL)
	}
	if now.Unix() >= c.Exp {
		return c, ErrTokenExpired
	}
	return c, nil
}
