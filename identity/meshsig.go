package identity

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

const (
	// SigHeaderName is the HTTP header that carries a signed request.
	SigHeaderName = "Mesh-Sig"
	// SigVersion is the scheme tag that opens the header value.
	SigVersion = "v1"
	// sigTag opens the signed string.
	sigTag = "MESH1"
	// ClockTolerance is the largest accepted |now - ts| (spec section 8).
	ClockTolerance = 120 * time.Second
	// NonceMemory is how long a verifier must remember a nonce: twice the
	// tolerance, so a nonce cannot be replayed from either side of the window.
	NonceMemory = 2 * ClockTolerance
	// maxNonceLen bounds the nonce so that stored nonces stay small.
	maxNonceLen = 128
	// maxSigHeaderLen bounds the header before any parsing work.
	maxSigHeaderLen = 512
)

// SigHeader is a parsed Mesh-Sig header: "v1 <pubkey_b64> <ts> <nonce> <sig_b64>".
type SigHeader struct {
	Pubkey ed25519.PublicKey
	TS     int64 // unix seconds
	Nonce  string
	Sig    []byte
}

// String renders the header value.
func (h SigHeader) String() string {
	return SigVersion + " " + EncodePublicKey(h.Pubkey) + " " + strconv.FormatInt(h.TS, 10) + " " +
		h.Nonce + " " + base64.StdEncoding.EncodeToString(h.Sig)
}

// ParseSigHeader parses a Mesh-Sig header value. It checks the shape only;
// Verify checks time and signature.
func ParseSigHeader(v string) (SigHeader, error) {
	var h SigHeader
	if len(v) > maxSigHeaderLen {
		return h, fmt.Errorf("%w: longer than %d bytes", ErrBadSigHeader, maxSigHeaderLen)
	}
	f := strings.Fields(v)
	if len(f) != 5 {
		return h, fmt.Errorf("%w: want \"v1 <pubkey_b64> <ts> <nonce> <sig_b64>\"", ErrBadSigHeader)
	}
	if f[0] != SigVersion {
		return h, fmt.Errorf("%w: unsupported version %q", ErrBadSigHeader, f[0])
	}
	pub, err := DecodePublicKey(f[1])
	if err != nil {
		return h, fmt.Errorf("%w: %w", ErrBadSigHeader, err)
	}
	ts, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil || ts <= 0 {
		return h, fmt.Errorf("%w: ts must be positive integer unix seconds", ErrBadSigHeader)
	}
	if err := checkNonce(f[3]); err != nil {
		return h, err
	}
	sig, err := decodeBase64(f[4])
	if err != nil || len(sig) != ed25519.SignatureSize {
		return h, fmt.Errorf("%w: signature must be %d bytes of base64", ErrBadSigHeader, ed25519.SignatureSize)
	}
	return SigHeader{Pubkey: pub, TS: ts, Nonce: f[3], Sig: sig}, nil
}

func checkNonce(n string) error {
	if len(n) == 0 || len(n) > maxNonceLen {
		return fmt.Errorf("%w: nonce must be 1..%d characters", ErrBadSigHeader, maxNonceLen)
	}
	for i := 0; i < len(n); i++ {
		if n[i] <= ' ' || n[i] > '~' {
			return fmt.Errorf("%w: nonce must be printable ASCII", ErrBadSigHeader)
		}
	}
	return nil
}

// SigningString builds the bytes that are signed: MESH1, METHOD, path,
// lowercase hex SHA-256 of the raw body, ts and nonce, joined by line feeds.
func SigningString(method, path string, body []byte, ts int64, nonce string) []byte {
	sum := sha256.Sum256(body)
	var hexsum [2 * sha256.Size]byte
	hex.Encode(hexsum[:], sum[:])
	b := make([]byte, 0, len(sigTag)+len(method)+len(path)+len(hexsum)+len(nonce)+32)
	b = append(b, sigTag...)
	b = append(b, '\n')
	b = append(b, method...)
	b = append(b, '\n')
	b = append(b, path...)
	b = append(b, '\n')
	b = append(b, hexsum[:]...)
	b = append(b, '\n')
	b = strconv.AppendInt(b, ts, 10)
	b = append(b, '\n')
	b = append(b, nonce...)
	return b
}

// Sign returns a Mesh-Sig header value for a request, with a fresh random nonce.
func Sign(key ed25519.PrivateKey, method, path string, body []byte, now time.Time) string {
	var nb [16]byte
	rand.Read(nb[:])
	nonce := hex.EncodeToString(nb[:])
	ts := now.Unix()
	sig := ed25519.Sign(key, SigningString(method, path, body, ts, nonce))
	return SigHeader{Pubkey: key.Public().(ed25519.PublicKey), TS: ts, Nonce: nonce, Sig: sig}.String()
}

// Verify parses a Mesh-Sig header value and checks its timestamp against now
// (within ClockTolerance) and its signature over method, path and body. It
// does not check the nonce for reuse: the caller owns replay protection.
func Verify(header, method, path string, body []byte, now time.Time) (SigHeader, error) {
	h, err := ParseSigHeader(header)
	if err != nil {
		return h, err
	}
	if d := now.Unix() - h.TS; d > int64(ClockTolerance/time.Second) || d < -int64(ClockTolerance/time.Second) {
		return h, fmt.Errorf("%w: ts is %ds away from the server clock (limit %ds)", ErrStaleSig, d, int64(ClockTolerance/time.Second))
	}
	if !ed25519.Verify(h.Pubkey, SigningString(method, path, body, h.TS, h.Nonce), h.Sig) {
		return h, ErrBadSignature
	}
	return h, nil
}

// RequestPath is the path a Mesh-Sig covers for an HTTP request: the escaped
// path plus, when present, "?" and the raw query string, exactly as sent.
func RequestPath(u *url.URL) string { return u.RequestURI() }

// SigOf returns the request's Mesh-Sig header value, "" when there is
// none. Two or more headers are refused (ErrAmbiguousSig), never resolved
// by taking the first.
func SigOf(h http.Header) (string, error) {
	v := h.Values(SigHeaderName)
	switch len(v) {
	case 0:
		return "", nil
	case 1:
		return v[0], nil
	}
	return "", fmt.Errorf("%w: the request carries %d; send exactly one", ErrAmbiguousSig, len(v))
}

// SignRequest sets the Mesh-Sig header on an outgoing request whose body is body.
func SignRequest(r *http.Request, key ed25519.PrivateKey, body []byte, now time.Time) {
	r.Header.Set(SigHeaderName, Sign(key, r.Method, RequestPath(r.URL), body, now))
}
