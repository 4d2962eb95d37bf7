package identity

import (
	"crypto/ed25519"
	"fmt"
	"strings"

	"github.com/mr-tron/base58"
)

// didKeyPrefix is "did:key:" followed by the multibase prefix 'z' (base58btc).
const didKeyPrefix = "did:key:z"

// ed25519Multicodec is the unsigned-varint encoding of multicodec 0xed
// (ed25519-pub), which prefixes the raw key inside a did:key.
var ed25519Multicodec = [2]byte{0xed, 0x01}

// DIDFromPublicKey returns the did:key of an Ed25519 public key:
// "did:key:z" + base58btc(0xed 0x01 || key).
func DIDFromPublicKey(pub ed25519.PublicKey) string {
	buf := make([]byte, 0, 2+ed25519.PublicKeySize)
	buf = append(buf, ed25519Multicodec[:]...)
	buf = append(buf, pub...)
	return didKeyPrefix + base58.Encode(buf)
}

// PublicKeyFromDID decodes an Ed25519 did:key. A DID URL fragment
// ("#z6Mk...") is tolerated and ignored.
func PublicKeyFromDID(did string) (ed25519.PublicKey, error) {
	did, _, _ = strings.Cut(did, "#")
	rest, ok := strings.CutPrefix(did, didKeyPrefix)
	if !ok {
		return nil, fmt.Errorf("%w: must start with %q", ErrBadDID, didKeyPrefix)
	}
	// 34 bytes of base58 is at most 47 characters; refuse long input before decoding.
	if len(rest) == 0 || len(rest) > 60 {
		return nil, fmt.Errorf("%w: wrong length", ErrBadDID)
	}
	raw, err := base58.Decode(rest)
	if err != nil {
		return nil, fmt.Errorf("%w: not base58btc", ErrBadDID)
	}
	if len(raw) != 2+ed25519.PublicKeySize || raw[0] != ed25519Multicodec[0] || raw[1] != ed25519Multicodec[1] {
		return nil, fmt.Errorf("%w: not an Ed25519 key (multicodec 0xed01, 32 bytes)", ErrBadDID)
	}
	return ed25519.PublicKey(raw[2:]), nil
}
