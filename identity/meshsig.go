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
	// SigVersionBound opens the header of a bound signature: v1 whose
	// signed string also names its receiver and X-Api-Key (Binding).
	SigVersionBound = "v1-bound"
	// sigTag opens the signed string; sigTagBound that of a bound one.
	sigTag      = "MESH1"
	sigTagBound = "MESH1-BOUND"
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

// SigHeader is a parsed Mesh-Sig header: "v1 <pubkey_b64> <ts> <nonce> <sig_b64>",
// or the same opened by "v1-bound" for a bound signature.
type SigHeader struct {
	Pubkey ed25519.PublicKey
	TS     int64 // unix seconds
	Nonce  string
	Sig    []byte
	// Bound is set for a v1-bound signature.
	Bound bool
}

// Binding is what a bound signature names beyond v1: who receives the
// request, and the prepaid api_key it spends. A v1 signature names
// neither, so a receiver could replay it to another agent that serves the
// same path, with the caller's api_key there (public in its deposit memo).
type Binding struct {
	// Receiver is the receiving agent's origin (interop.Origin of the url
	// its card declares).
	Receiver string
	// APIKey is the request's X-Api-Key, "" when it carries none.
	APIKey string
}

// String renders the header value.
func (h SigHeader) String() string {
	v := SigVersion
	if h.Bound {
		v = SigVersionBound
	}
	return v + " " + EncodePublicKey(h.Pubkey) + " " + strconv.FormatInt(h.TS, 10) + " " +
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
	if f[0] != SigVersion && f[0] != SigVersionBound {
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
	return SigHeader{Pubkey: pub, TS: ts, Nonce: f[3], Sig: sig, Bound: f[0] == SigVersionBound}, nil
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
	return signingString(sigTag, method, path, body, ts, nonce, 0)
}

// BoundSigningString is the signed string of a bound signature: MESH1-BOUND,
// then what SigningString joins, then the receiver and the api_key (empty
// when none), all joined by line feeds.
func BoundSigningString(method, path string, body []byte, ts int64, nonce string, bd Binding) []byte {
	b := signingString(sigTagBound, method, path, body, ts, nonce, len(bd.Receiver)+len(bd.APIKey)+2)
	b = append(b, '\n')
	b = append(b, bd.Receiver...)
	b = append(b, '\n')
	return append(b, bd.APIKey...)
}

func signingString(tag, method, path string, body []byte, ts int64, nonce string, extra int) []byte {
	sum := sha256.Sum256(body)
	var hexsum [2 * sha256.Size]byte
	hex.Encode(hexsum[:], sum[:])
	b := make([]byte, 0, len(tag)+len(method)+len(path)+len(hexsum)+len(nonce)+32+extra)
	b = append(b, tag...)
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
	return sign(key, now, nil, func(ts int64, nonce string) []byte { return SigningString(method, path, body, ts, nonce) })
}

// SignBound returns a v1-bound Mesh-Sig header value: Sign, with the
// receiver and api_key of bd signed too.
func SignBound(key ed25519.PrivateKey, method, path string, body []byte, now time.Time, bd Binding) string {
	return sign(key, now, &bd, func(ts int64, nonce string) []byte {
		return BoundSigningString(method, path, body, ts, nonce, bd)
	})
}

func sign(key ed25519.PrivateKey, now time.Time, bd *Binding, signing func(ts int64, nonce string) []byte) string {
	var nb [16]byte
	rand.Read(nb[:])
	nonce := hex.EncodeToString(nb[:])
	ts := now.Unix()
	sig := ed25519.Sign(key, signing(ts, nonce))
	return SigHeader{Pubkey: key.Public().(ed25519.PublicKey), TS: ts, Nonce: nonce, Sig: sig, Bound: bd != nil}.String()
}

// Verify parses a v1 Mesh-Sig header value and checks its timestamp against
// now (within ClockTolerance) and its signature over method, path and body.
// It does not check the nonce for reuse: the caller owns replay protection.
// A bound signature is refused: only VerifyBound knows its receiver.
func Verify(header, method, path string, body []byte, now time.Time) (SigHeader, error) {
	return verify(header, method, path, body, now, nil)
}

// VerifyBound is Verify for a receiver that also takes v1-bound
// signatures: one of those must name bd (this receiver, the request's
// api_key). A v1 signature is checked as Verify does; h.Bound tells which.
func VerifyBound(header, method, path string, body []byte, now time.Time, bd Binding) (SigHeader, error) {
	return verify(header, method, path, body, now, &bd)
}

func verify(header, method, path string, body []byte, now time.Time, bd *Binding) (SigHeader, error) {
	h, err := ParseSigHeader(header)
	if err != nil {
		return h, err
	}
	if h.Bound && bd == nil {
		return h, fmt.Errorf("%w: a %s signature is for agents; sign %s here", ErrBadSigHeader, SigVersionBound, SigVersion)
	}
	if d := now.Unix() - h.TS; d > int64(ClockTolerance/time.Second) || d < -int64(ClockTolerance/time.Second) {
		return h, fmt.Errorf("%w: ts is %ds away from the server clock (limit %ds)", ErrStaleSig, d, int64(ClockTolerance/time.Second))
	}
	signed := SigningString(method, path, body, h.TS, h.Nonce)
	if h.Bound {
		signed = BoundSigningString(method, path, body, h.TS, h.Nonce, *bd)
	}
	if !ed25519.Verify(h.Pubkey, signed, h.Sig) {
		if h.Bound {
			return h, fmt.Errorf("%w (a %s signature must name this receiver, %s, and the request's X-Api-Key)", ErrBadSignature, SigVersionBound, bd.Receiver)
		}
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

// SignRequestBound sets a v1-bound Mesh-Sig header on an outgoing request
// whose body is body.
func SignRequestBound(r *http.Request, key ed25519.PrivateKey, body []byte, now time.Time, bd Binding) {
	r.Header.Set(SigHeaderName, SignBound(key, r.Method, RequestPath(r.URL), body, now, bd))
}
