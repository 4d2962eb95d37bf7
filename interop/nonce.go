package interop

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"strings"
	"time"

	"github.com/agentmesh/mesh/identity"
)

// x402 nonces are self-verifying: a nonce carries its expiry and price and
// a MAC, under a key kept in the store, over those, the network, the wallet
// and the request it was issued to. Issuing one writes nothing, so a flood
// of unpaid calls costs the provider no storage; the store learns a nonce
// only when a transaction pays it (x/n/<nonce>, the single-use mark).
//
// The request binding is what makes a payment useless to anyone but its
// payer: the signature and memo are public on chain, so the nonce must only
// serve the request it was issued to, meaning the same skill and body, and,
// when the challenged request carried a Mesh-Sig, the same signing key.

const (
	x402Prefix   = "x4_"
	nonceVersion = 1
	nonceMACLen  = 16
	// version, flags, expiry (unix s), lamports, salt, MAC
	nonceLen   = 1 + 1 + 8 + 8 + 8 + nonceMACLen
	flagKeyed  = 1
	macKeySize = 32
	nonceKeyDB = "x/m/noncekey"
)

// binding is what an x402 nonce is bound to: the hash of the skill and the
// request body, and the caller's Mesh-Sig key when the request was signed.
type binding struct {
	body [sha256.Size]byte
	key  ed25519.PublicKey // nil: unsigned request
}

// bindingOf is the binding of a call of skill with body by c.
func bindingOf(skill string, body []byte, c Caller) binding {
	h := sha256.New()
	h.Write([]byte(skill))
	h.Write([]byte{0})
	h.Write(body)
	var b binding
	h.Sum(b.body[:0])
	if c.Pubkey != nil {
		b.key = c.Pubkey
	}
	return b
}

// bodyHex and keyText are the stored forms of a binding (in a claim).
func (b binding) bodyHex() string { return hex.EncodeToString(b.body[:]) }
func (b binding) keyText() string {
	if b.key == nil {
		return ""
	}
	return identity.EncodePublicKey(b.key)
}

// nonceTerms are what a nonce carries.
type nonceTerms struct {
	Expires  time.Time
	Lamports uint64
	Keyed    bool
}

// newNonce issues a nonce for a call bound to b.
func newNonce(macKey []byte, network, wallet string, t nonceTerms, b binding) string {
	raw := make([]byte, nonceLen)
	raw[0] = nonceVersion
	if b.key != nil {
		raw[1] = flagKeyed
	}
	binary.BigEndian.PutUint64(raw[2:], uint64(t.Expires.Unix()))
	binary.BigEndian.PutUint64(raw[10:], t.Lamports)
	rand.Read(raw[18:26])
	copy(raw[26:], nonceMAC(macKey, raw[:26], network, wallet, b))
	return x402Prefix + base64.RawURLEncoding.EncodeToString(raw)
}

// parseNonce reads a nonce's terms without checking its MAC; ok is false
// when it is not a well-formed x402 nonce of this implementation.
func parseNonce(nonce string) (raw []byte, t nonceTerms, ok bool) {
	s, found := strings.CutPrefix(nonce, x402Prefix)
	if !found || base64.RawURLEncoding.DecodedLen(len(s)) != nonceLen {
		return nil, t, false
	}
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(raw) != nonceLen || raw[0] != nonceVersion || raw[1]&^flagKeyed != 0 {
		return nil, t, false
	}
	t.Keyed = raw[1]&flagKeyed != 0
	t.Expires = time.Unix(int64(binary.BigEndian.Uint64(raw[2:])), 0)
	t.Lamports = binary.BigEndian.Uint64(raw[10:])
	return raw, t, true
}

// openNonce checks that nonce was issued by this provider (macKey, network,
// wallet) to a request with binding b, and returns its terms. It does not
// judge expiry or single use.
func openNonce(macKey []byte, network, wallet, nonce string, b binding) (nonceTerms, error) {
	raw, t, ok := parseNonce(nonce)
	if !ok {
		return t, ErrNonceUnknown
	}
	if t.Keyed && b.key == nil {
		return t, ErrPaymentBinding.With("the challenge was issued to a signed request: the retry must carry a Mesh-Sig by the same key")
	}
	if !t.Keyed {
		b.key = nil // an unsigned challenge binds the body only
	}
	if !hmac.Equal(raw[26:], nonceMAC(macKey, raw[:26], network, wallet, b)) {
		return t, ErrPaymentBinding
	}
	return t, nil
}

func nonceMAC(macKey, head []byte, network, wallet string, b binding) []byte {
	m := hmac.New(sha256.New, macKey)
	m.Write([]byte("mesh x402 nonce\x00"))
	m.Write(head)
	for _, s := range []string{network, wallet} {
		m.Write([]byte(s))
		m.Write([]byte{0})
	}
	m.Write(b.body[:])
	m.Write(b.key)
	return m.Sum(nil)[:nonceMACLen]
}
