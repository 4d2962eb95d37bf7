package identity

import "errors"

// Sentinel errors. Callers match them with errors.Is; the wrapped message
// says what exactly was wrong and is safe to show to the client.
var (
	// ErrBadDID is returned for a string that is not an Ed25519 did:key.
	ErrBadDID = errors.New("invalid did:key")
	// ErrBadPubkey is returned for a public key that is not 32 bytes of base64.
	ErrBadPubkey = errors.New("invalid public key")
	// ErrBadSigHeader is returned for a Mesh-Sig header that cannot be parsed.
	ErrBadSigHeader = errors.New("malformed Mesh-Sig header")
	// ErrAmbiguousSig is returned for a request that carries more than one
	// Mesh-Sig header: which one the verifier read would be a guess, and a
	// proxy or a forwarding node could read another.
	ErrAmbiguousSig = errors.New("more than one Mesh-Sig header")
	// ErrStaleSig is returned when the Mesh-Sig timestamp is outside the clock tolerance.
	ErrStaleSig = errors.New("Mesh-Sig timestamp outside tolerance")
	// ErrBadSignature is returned when the signature does not verify.
	ErrBadSignature = errors.New("Mesh-Sig signature does not verify")
	// ErrBadReceipt is returned for a payment receipt that is malformed or
	// not signed by the agent's key.
	ErrBadReceipt = errors.New("invalid payment receipt")
	// ErrBadKeyFile is returned for a key file that is not an Ed25519 private key.
	ErrBadKeyFile = errors.New("invalid key file")
)
