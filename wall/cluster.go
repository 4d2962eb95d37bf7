package wall

import (
	"crypto/cipher"
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/crypto/chacha20poly1305"

	"github.com/agentmesh/mesh/internal/httpx"
)

// Credential prefixes (spec 2.1).
const (
	idPrefix    = "c_"
	tokenPrefix = "ck_"
	adminPrefix = "ak_"
)

// Visibility of a cluster.
const (
	Private = "private"
	Public  = "public"
)

// Protocol names the wall's frame protocol in create responses.
const Protocol = "mesh-wall/1"

var idEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// newSecret returns a fresh credential: prefix + 32 random bytes, base64url.
func newSecret(prefix string) string {
	b := make([]byte, 32)
	rand.Read(b)
	return prefix + base64.RawURLEncoding.EncodeToString(b)
}

// derive expands a credential into a key for one purpose.
func derive(secret, salt, purpose string, n int) []byte {
	k, err := hkdf.Key(sha256.New, []byte(secret), []byte(salt), "mesh wall v1 "+purpose, n)
	if err != nil {
		panic(err) // only for n beyond 255*32 bytes
	}
	return k
}

// adminKey is the Ed25519 key an admin token stands for.
func adminKey(adminToken string) ed25519.PrivateKey {
	return ed25519.NewKeyFromSeed(derive(adminToken, "", "admin key", ed25519.SeedSize))
}

// clusterID derives a cluster's id from its admin public key, so that the
// id names the only key that may sign for the cluster.
func clusterID(admin ed25519.PublicKey) string {
	sum := sha256.Sum256(append([]byte("mesh cluster id\n"), admin...))
	return idPrefix + strings.ToLower(idEncoding.EncodeToString(sum[:15]))
}

// memberKey is the Ed25519 key the member token (ck_) of cluster id stands
// for. Its public half is the record's verifier: any node checks a
// presented token against it, and the directory checks a token holder's
// signature (history.go) without ever seeing the token; neither can derive
// the wire key from it.
func memberKey(id, token string) ed25519.PrivateKey {
	return ed25519.NewKeyFromSeed(derive(token, id, "member key", ed25519.SeedSize))
}

// tokenVerifier is what a v2 record stores to check a member token: the
// hex public member key.
func tokenVerifier(id, token string) string {
	return hex.EncodeToString(memberKey(id, token).Public().(ed25519.PublicKey))
}

// v1Verifier is what a v1 record stores to check a member token: an HKDF
// digest of it, which checks a presented token but no signature.
func v1Verifier(id, token string) string {
	return hex.EncodeToString(derive(token, id, "token verifier", 32))
}

// memberPub is the public member key of the record's token: nil for the
// lobby, which has no token, and for a v1 record, which names no member
// key.
func (r *Record) memberPub() ed25519.PublicKey {
	if r.V != recordVersion {
		return nil
	}
	pub, err := hex.DecodeString(r.Verifier)
	if err != nil || len(pub) != ed25519.PublicKeySize {
		return nil
	}
	return pub
}

// checkToken reports whether token is the member token of record r.
func (r *Record) checkToken(token string) bool {
	if !strings.HasPrefix(token, tokenPrefix) || r.Verifier == "" {
		return false
	}
	want := tokenVerifier
	if r.V == recordV1 {
		want = v1Verifier
	}
	return subtle.ConstantTimeCompare([]byte(want(r.ID, token)), []byte(r.Verifier)) == 1
}

// memberToken returns the member token that credential stands for: the
// token itself, or the one the admin token unwraps. It fails for anything
// else.
func (r *Record) memberToken(credential string) (string, bool) {
	if r.checkToken(credential) {
		return credential, true
	}
	if r.TokenWrap == "" || !isAdminOf(credential, r.ID) {
		return "", false
	}
	wrapped, err := base64.StdEncoding.DecodeString(r.TokenWrap)
	if err != nil {
		return "", false
	}
	tok, err := newSealer(r.ID, credential).open("token wrap", wrapped)
	if err != nil || !r.checkToken(string(tok)) {
		return "", false
	}
	return string(tok), true
}

// Versions of cluster records. New clusters get recordVersion, whose
// verifier is the public member key. Version 1 records (verifier: an HKDF
// digest of the token) stay in the logs and catalogs of nodes that ran the
// earlier release, so they remain valid: a node replaying the log applies
// them, their tokens admit as before, and their admin keys delete them.
// Having no member key, they cannot prove a token holder to the directory
// (history.go).
const (
	recordV1      = 1
	recordVersion = 2
)

// Record is a cluster as its admin signed it.
type Record struct {
	V          int    `json:"v"`
	ID         string `json:"id"`
	Admin      string `json:"admin"` // base64 Ed25519 public key; ID derives from it
	Visibility string `json:"visibility"`
	// Meta is a public cluster's metadata; a private cluster's is Sealed
	// with the wire key, so that only members read its name.
	Meta     *Meta  `json:"meta,omitempty"`
	Sealed   string `json:"sealed,omitempty"`
	Verifier string `json:"verifier"` // tokenVerifier (v1: v1Verifier) of the member token
	// TokenWrap is the member token sealed with a key derived from the
	// admin token, so that the admin can act as a member of a private
	// cluster (read its history) without the member token at hand.
	TokenWrap string          `json:"token_wrap"`
	Boards    bool            `json:"boards_enabled"`
	Props     json.RawMessage `json:"props,omitempty"`
	Created   int64           `json:"created"` // Unix ms, as the creator's clock read
}

// Meta is what a cluster says about itself.
type Meta struct {
	Name        string `json:"name,omitempty"`
	Topic       string `json:"topic,omitempty"`
	Description string `json:"description,omitempty"`
}

// Signed is a record or action with the admin key's signature over Body,
// which is kept as the exact bytes signed.
type Signed struct {
	Body string `json:"body"`
	Sig  string `json:"sig"`
}

// Signature domains, so that a record can never pass for an action.
const (
	recordTag = "MESHCLUSTER1\n"
	actionTag = "MESHCLUSTERACT1\n"
)

func sign(key ed25519.PrivateKey, tag string, v any) (Signed, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return Signed{}, err
	}
	sig := ed25519.Sign(key, append([]byte(tag), body...))
	return Signed{Body: string(body), Sig: base64.StdEncoding.EncodeToString(sig)}, nil
}

func (s Signed) verify(pub ed25519.PublicKey, tag string) bool {
	sig, err := base64.StdEncoding.DecodeString(s.Sig)
	return err == nil && len(pub) == ed25519.PublicKeySize &&
		ed25519.Verify(pub, append([]byte(tag), s.Body...), sig)
}

// OpenRecord decodes a signed record and checks it: its id derives from
// its admin key, which signed it, and its fields are well formed.
func OpenRecord(s Signed) (*Record, error) {
	var r Record
	if !httpx.ValidText([]byte(s.Body)) {
		return nil, ErrBadRecord.With("cluster record: not valid UTF-8 text")
	}
	if err := json.Unmarshal([]byte(s.Body), &r); err != nil {
		return nil, ErrBadRecord.With("cluster record: %v", err)
	}
	pub, err := base64.StdEncoding.DecodeString(r.Admin)
	if err != nil || len(pub) != ed25519.PublicKeySize {
		return nil, ErrBadRecord.With("cluster record: admin is not a base64 Ed25519 public key")
	}
	switch {
	case r.V != recordV1 && r.V != recordVersion:
		return nil, ErrBadRecord.With("cluster record: unknown version %d", r.V)
	case r.ID != clusterID(pub):
		return nil, ErrBadRecord.With("cluster record: id does not derive from the admin key")
	case !s.verify(pub, recordTag):
		return nil, ErrBadRecord.With("cluster record: signature does not verify")
	case r.Visibility != Public && r.Visibility != Private:
		return nil, ErrBadRecord.With("cluster record: visibility %q", r.Visibility)
	case r.Visibility == Public && r.Meta == nil, r.Visibility == Private && r.Meta != nil:
		return nil, ErrBadRecord.With("cluster record: public clusters carry meta, private ones sealed meta")
	case r.V == recordV1 && len(r.Verifier) != 64, r.V == recordVersion && r.memberPub() == nil:
		return nil, ErrBadRecord.With("cluster record: bad token verifier")
	}
	if r.Meta != nil {
		if err := r.Meta.validate(); err != nil {
			return nil, ErrBadRecord.With("cluster record: %v", err)
		}
	}
	return &r, nil
}

func (r *Record) adminPub() ed25519.PublicKey {
	pub, _ := base64.StdEncoding.DecodeString(r.Admin)
	return pub
}

// Action is an admin action on a cluster, signed by its admin key.
type Action struct {
	V  int    `json:"v"`
	Op string `json:"op"` // ActionDelete
	ID string `json:"id"`
	At int64  `json:"at"` // Unix ms, as the admin's node read its clock
}

// Admin action names.
const ActionDelete = "delete"

// openAction checks a signed action against the record of its cluster.
func openAction(s Signed, r *Record) (*Action, error) {
	var a Action
	if err := json.Unmarshal([]byte(s.Body), &a); err != nil || a.V != 1 {
		return nil, ErrBadAction.With("malformed admin action")
	}
	if a.ID != r.ID || !s.verify(r.adminPub(), actionTag) {
		return nil, ErrBadAction
	}
	return &a, nil
}

// actionTarget reads the cluster an action names, before it is verified.
func actionTarget(s Signed) (string, error) {
	var a Action
	if err := json.Unmarshal([]byte(s.Body), &a); err != nil || !strings.HasPrefix(a.ID, idPrefix) {
		return "", ErrBadAction.With("malformed admin action")
	}
	return a.ID, nil
}

// newCluster makes the credentials and signed record of a new cluster.
func newCluster(vis string, meta Meta, created int64) (rec *Record, signed Signed, token, admin string, err error) {
	admin = newSecret(adminPrefix)
	token = newSecret(tokenPrefix)
	key := adminKey(admin)
	pub := key.Public().(ed25519.PublicKey)
	rec = &Record{V: recordVersion, ID: clusterID(pub), Admin: base64.StdEncoding.EncodeToString(pub),
		Visibility: vis, Created: created}
	rec.Verifier = tokenVerifier(rec.ID, token)
	rec.TokenWrap = wrapToken(rec.ID, admin, token)
	if vis == Public {
		rec.Meta = &meta
	} else {
		rec.Sealed = sealedMeta(newSealer(rec.ID, token), meta)
	}
	signed, err = sign(key, recordTag, rec)
	return rec, signed, token, admin, err
}

// signAction signs op on cluster id with the admin key of adminToken.
func signAction(adminToken, op, id string, at int64) (Signed, error) {
	return sign(adminKey(adminToken), actionTag, Action{V: 1, Op: op, ID: id, At: at})
}

// isAdminOf reports whether adminToken is cluster id's admin token.
func isAdminOf(adminToken, id string) bool {
	return strings.HasPrefix(adminToken, adminPrefix) &&
		clusterID(adminKey(adminToken).Public().(ed25519.PublicKey)) == id
}

// sealer encrypts a private cluster's traffic with a key derived from its
// member token (XChaCha20-Poly1305, random nonces). A nil sealer is the
// public clusters' identity.
type sealer struct {
	id   string
	aead cipher.AEAD
}

func newSealer(id, token string) *sealer {
	aead, err := chacha20poly1305.NewX(derive(token, id, "wire key", chacha20poly1305.KeySize))
	if err != nil {
		panic(err) // the key size is right by construction
	}
	return &sealer{id: id, aead: aead}
}

// sealOverhead is what sealing adds: a nonce and a tag.
const sealOverhead = chacha20poly1305.NonceSizeX + chacha20poly1305.Overhead

var errUnseal = errors.New("wall: cannot open sealed data")

// seal encrypts b for purpose (bound in, with the cluster id, as
// associated data, so that nothing sealed for one use opens for another).
func (s *sealer) seal(purpose string, b []byte) []byte {
	if s == nil {
		return b
	}
	nonce := make([]byte, s.aead.NonceSize())
	rand.Read(nonce)
	return s.sealWith(nonce, purpose, b)
}

// sealWith is seal with nonce: nonce ‖ XChaCha20-Poly1305(b), the cluster
// id, a line feed and purpose as associated data (docs/wire.md, The seal).
func (s *sealer) sealWith(nonce []byte, purpose string, b []byte) []byte {
	out := append(make([]byte, 0, len(nonce)+len(b)+s.aead.Overhead()), nonce...)
	return s.aead.Seal(out, nonce, b, []byte(s.id+"\n"+purpose))
}

func (s *sealer) open(purpose string, b []byte) ([]byte, error) {
	if s == nil {
		return b, nil
	}
	n := s.aead.NonceSize()
	if len(b) < n {
		return nil, errUnseal
	}
	out, err := s.aead.Open(nil, b[:n], b[n:], []byte(s.id+"\n"+purpose))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errUnseal, err)
	}
	return out, nil
}
