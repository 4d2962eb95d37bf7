package identity

import (
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"strings"
)

// EncodePublicKey renders a public key as standard, padded base64: the
// canonical form on the wire and in storage.
func EncodePublicKey(pub ed25519.PublicKey) string { return base64.StdEncoding.EncodeToString(pub) }

// DecodePublicKey decodes a base64 Ed25519 public key (32 raw bytes).
// Standard and URL-safe alphabets are accepted, padded or not.
func DecodePublicKey(s string) (ed25519.PublicKey, error) {
	if len(s) > 64 {
		return nil, fmt.Errorf("%w: must be %d bytes of base64", ErrBadPubkey, ed25519.PublicKeySize)
	}
	raw, err := decodeBase64(s)
	if err != nil {
		return nil, fmt.Errorf("%w: not base64", ErrBadPubkey)
	}
	if len(raw) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("%w: decodes to %d bytes, want %d", ErrBadPubkey, len(raw), ed25519.PublicKeySize)
	}
	return ed25519.PublicKey(raw), nil
}

// decodeBase64 accepts RFC 4648 base64 in either alphabet, with or without padding.
func decodeBase64(s string) ([]byte, error) {
	enc := base64.StdEncoding
	if strings.ContainsAny(s, "-_") {
		enc = base64.URLEncoding
	}
	if !strings.HasSuffix(s, "=") && len(s)%4 != 0 {
		enc = enc.WithPadding(base64.NoPadding)
	}
	return enc.Strict().DecodeString(s)
}
