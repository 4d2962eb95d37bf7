package registryapi

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/cmdlog"
	"github.com/agentmesh/mesh/internal/httpx"
)

// Agent records in the DHT.
//
// A record is the agent's own signed register request (its Mesh-Sig binds
// agent id, endpoint and capabilities to the key named by the did), plus a
// sequence number and an expiry attested by the directory. Validators accept
// a record only if the request's signature is by the did's key and the
// attestation is by a trusted directory, so neither a forged nor a mutated
// record passes, and a record nobody republishes dies at its expiry.
//
// The seq is the directory log's: the entry that registered the agent with
// this request. When an agent is deleted, or its did is unbound from it, the
// directory publishes a tombstone with the seq of that entry: a record
// signed by the directory alone that says "nothing here since seq". Among
// valid records the highest seq wins, so a deleted agent's old record, or a
// former owner's record of an id registered again, never wins over what
// the directory did since.
const (
	// RecordNS is the DHT namespace of records keyed by did:key.
	RecordNS = "mesh-agent"
	// IDIndexNS is the namespace of the same records keyed by agent id.
	IDIndexNS = "mesh-aid"
	// RecordTTL is how long a published record stays valid. The directory
	// keeps publishing a tombstone this long after the deletion, by when
	// every record it attested before has expired.
	RecordTTL = 48 * time.Hour
	// RepublishInterval is how often the directory republishes records.
	RepublishInterval = 12 * time.Hour
	// maxRecordSize bounds a record (a register body is at most 64 KiB).
	maxRecordSize = DefaultMaxBody + 4<<10
	recordVersion = 2
	recordTag     = "MESHREC2"
	deletedTag    = "deleted"
)

// RecordKeys returns the DHT keys of a record: by did and by agent id.
func RecordKeys(did, agentID string) []string {
	return []string{DIDRecordKey(did), IDRecordKey(agentID)}
}

// DIDRecordKey is the DHT key of the record of the agent holding did.
func DIDRecordKey(did string) string { return "/" + RecordNS + "/" + did }

// IDRecordKey is the DHT key of the record of agent id.
func IDRecordKey(agentID string) string { return "/" + IDIndexNS + "/" + agentID }

// AgentRecord is the value stored in the DHT: an agent's record, or a
// tombstone (Deleted, without Request).
type AgentRecord struct {
	V         int     `json:"v"`
	DID       string  `json:"did"`
	AgentID   string  `json:"agent_id"`
	Seq       uint64  `json:"seq"`               // the directory log entry it reflects
	Deleted   bool    `json:"deleted,omitempty"` // a tombstone
	Request   *Signed `json:"request,omitempty"` // the agent's signed register request
	Expires   int64   `json:"expires"`           // unix seconds, attested by Directory
	Directory string  `json:"directory"`         // did:key of the attesting directory
	DirSig    string  `json:"dir_sig"`           // base64 signature over attestation()

	pub      ed25519.PublicKey
	body     registerRequest
	signedAt int64 // the ts of the agent's Mesh-Sig
}

// attestation is what the directory signs: which did and agent id, at
// which seq, the agent's signature header (which covers the whole request)
// or the tombstone mark, and the expiry.
func (r *AgentRecord) attestation() []byte {
	what := deletedTag
	if r.Request != nil {
		what = r.Request.MeshSig
	}
	return []byte(strings.Join([]string{recordTag, r.DID, r.AgentID,
		strconv.FormatUint(r.Seq, 10), what, strconv.FormatInt(r.Expires, 10)}, "\n"))
}

// NewRecord builds the DHT record of a signed register request that the
// directory log committed at seq, attested by the directory key until
// now+RecordTTL. The request's signature was verified when it was
// committed, and the request checked; the DHT checks both again before
// storing the record. NewRecord reads of the request only its key and agent
// id, not the card it carries.
func NewRecord(req Signed, seq uint64, dirKey ed25519.PrivateKey, now time.Time) (*AgentRecord, []byte, error) {
	h, err := identity.ParseSigHeader(req.MeshSig)
	if err != nil {
		return nil, nil, fmt.Errorf("record: %w", err)
	}
	var body struct {
		AgentID string `json:"agent_id"`
	}
	if err := json.Unmarshal([]byte(req.Body), &body); err != nil {
		return nil, nil, fmt.Errorf("record: %w", err)
	}
	r := &AgentRecord{Request: &req, Seq: seq, DID: identity.DIDFromPublicKey(h.Pubkey), AgentID: body.AgentID}
	return r.attest(dirKey, now)
}

// NewTombstone builds the tombstone of did and agent id: the directory log
// entry seq deleted the agent or unbound the did from it.
func NewTombstone(did, agentID string, seq uint64, dirKey ed25519.PrivateKey, now time.Time) (*AgentRecord, []byte, error) {
	return (&AgentRecord{DID: did, AgentID: agentID, Seq: seq, Deleted: true}).attest(dirKey, now)
}

func (r *AgentRecord) attest(dirKey ed25519.PrivateKey, now time.Time) (*AgentRecord, []byte, error) {
	r.V, r.Expires = recordVersion, now.Add(RecordTTL).Unix()
	r.Directory = identity.DIDFromPublicKey(dirKey.Public().(ed25519.PublicKey))
	r.DirSig = base64.StdEncoding.EncodeToString(ed25519.Sign(dirKey, r.attestation()))
	b, err := json.Marshal(r)
	return r, b, err
}

// decodeRequest decodes the agent's register request and its signature
// header, and checks that they agree; verifySignatures checks the
// signature.
func (r *AgentRecord) decodeRequest() (identity.SigHeader, error) {
	q := r.Request
	path, _, _ := strings.Cut(q.Path, "?")
	if q.Method != "POST" || (path != "/v1/agents/register" && path != "/agents/register") {
		return identity.SigHeader{}, errors.New("record: not a register request")
	}
	h, err := identity.ParseSigHeader(q.MeshSig)
	if err != nil {
		return h, fmt.Errorf("record: %w", err)
	}
	var body registerRequest
	if err := httpx.DecodeJSON([]byte(q.Body), &body); err != nil {
		return h, fmt.Errorf("record: %w", err)
	}
	if err := body.validate(); err != nil {
		return h, fmt.Errorf("record: %w", err)
	}
	if body.Pubkey != "" && body.Pubkey != identity.EncodePublicKey(h.Pubkey) {
		return h, errors.New("record: request binds another key than it is signed with")
	}
	r.pub, r.body, r.signedAt = h.Pubkey, body, h.TS
	return h, nil
}

// verifySignatures checks the agent's signature over its request (not its
// freshness: a record outlives the 120 s window) and the directory's over
// the attestation.
func (r *AgentRecord) verifySignatures(h identity.SigHeader) error {
	if q := r.Request; q != nil &&
		!ed25519.Verify(h.Pubkey, identity.SigningString(q.Method, q.Path, []byte(q.Body), h.TS, h.Nonce), h.Sig) {
		return errors.New("record: request signature does not verify")
	}
	dirPub, err := identity.PublicKeyFromDID(r.Directory)
	if err != nil {
		return fmt.Errorf("record: %w", err)
	}
	sig, err := base64.StdEncoding.DecodeString(r.DirSig)
	if err != nil || !ed25519.Verify(dirPub, r.attestation(), sig) {
		return errors.New("record: directory attestation does not verify")
	}
	return nil
}

// PublishedAgents returns the agents whose DHT values entry e may change:
// a registration with a request the agent signed (a record), or a
// deletion or expiry (a tombstone).
func PublishedAgents(e *cmdlog.Entry) []string {
	if e.Kind != Kind {
		return nil
	}
	var cmd Command
	if json.Unmarshal(e.Op, &cmd) != nil {
		return nil
	}
	switch {
	case cmd.Register != nil && cmd.Register.Signed != nil, cmd.Delete != nil, cmd.Expire != nil:
		return cmd.agentIDs()
	}
	return nil
}

// RecordValidator checks agent records for the DHT (it satisfies
// go-libp2p-record's Validator).
type RecordValidator struct {
	// Trusted reports whether did is a directory whose attestations count.
	Trusted func(did string) bool
	// TrustedAt, if set, decides instead of Trusted, knowing when the
	// record was attested (its expiry less RecordTTL): a directory key
	// retired since (a quorum member removed) still vouches for what it
	// attested before.
	TrustedAt func(did string, attested time.Time) bool
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	verified *verifiedValues // nil: verify every time
}

// NewRecordValidator returns a RecordValidator that trusts the directories
// Trusted names and remembers the values whose signatures it verified: the
// DHT checks a value several times (kad-dht validates a put, its store
// validates it again and re-reads the stored value to select), and each
// check would otherwise cost two Ed25519 verifications, and decoding the
// request and the card it carries (Validate and Select check a value
// verified before from its head: check).
func NewRecordValidator(trusted func(did string) bool) RecordValidator {
	return RecordValidator{Trusted: trusted, verified: newVerifiedValues(verifiedValuesKept)}
}

// NewRecordValidatorAt is NewRecordValidator with a TrustedAt.
func NewRecordValidatorAt(trustedAt func(did string, attested time.Time) bool) RecordValidator {
	v := NewRecordValidator(nil)
	v.TrustedAt = trustedAt
	return v
}

func (v RecordValidator) trusts(r *AgentRecord) bool {
	if v.TrustedAt != nil {
		return v.TrustedAt(r.Directory, time.Unix(r.Expires, 0).Add(-RecordTTL))
	}
	return v.Trusted != nil && v.Trusted(r.Directory)
}

// Parse decodes and fully checks a record stored under key.
func (v RecordValidator) Parse(key string, value []byte) (*AgentRecord, error) {
	if len(value) > maxRecordSize {
		return nil, errors.New("record: too large")
	}
	return v.parse(key, value, v.verified.has(value))
}

// parse is Parse of a value of at most maxRecordSize; verified says its
// signatures verified before.
func (v RecordValidator) parse(key string, value []byte, verified bool) (*AgentRecord, error) {
	var r AgentRecord
	if err := json.Unmarshal(value, &r); err != nil {
		return nil, fmt.Errorf("record: %w", err)
	}
	if r.V != recordVersion {
		return nil, fmt.Errorf("record: unknown version %d", r.V)
	}
	h, err := r.checkSubject()
	if err != nil {
		return nil, err
	}
	if r.Seq == 0 {
		return nil, errors.New("record: no seq")
	}
	if err := v.admits(key, &r); err != nil {
		return nil, err
	}
	if !verified {
		if err := r.verifySignatures(h); err != nil {
			return nil, err
		}
		v.verified.add(value)
	}
	if err := v.live(&r); err != nil {
		return nil, err
	}
	return &r, nil
}

// admits checks what of a record depends on where it is and whom this
// node trusts: the key it is stored under, and its attesting directory.
func (v RecordValidator) admits(key string, r *AgentRecord) error {
	if key != DIDRecordKey(r.DID) && key != IDRecordKey(r.AgentID) {
		return errors.New("record: stored under a key it does not name")
	}
	if !v.trusts(r) {
		return errors.New("record: not attested by a trusted directory")
	}
	return nil
}

// live checks that r has not expired.
func (v RecordValidator) live(r *AgentRecord) error {
	now := time.Now
	if v.Now != nil {
		now = v.Now
	}
	if now().Unix() >= r.Expires {
		return errors.New("record: expired")
	}
	return nil
}

// recordHead is what of a record admits, live and beats read: a value
// that passed Parse once (its own bytes checked: version, subject, seq,
// signatures) is checked again from these alone, without decoding its
// request and the card it carries again (the DHT checks a value several
// times per put: some 250 KB of garbage each for a 30 KB card).
type recordHead struct {
	DID       string `json:"did"`
	AgentID   string `json:"agent_id"`
	Seq       uint64 `json:"seq"`
	Deleted   bool   `json:"deleted,omitempty"`
	Expires   int64  `json:"expires"`
	Directory string `json:"directory"`
}

// check is Parse for Validate and Select, which read no more of a
// record than its head: a value verified before is checked from its head.
func (v RecordValidator) check(key string, value []byte) (*AgentRecord, error) {
	if len(value) > maxRecordSize {
		return nil, errors.New("record: too large")
	}
	if !v.verified.has(value) {
		return v.parse(key, value, false)
	}
	var h recordHead
	if err := json.Unmarshal(value, &h); err != nil {
		return nil, fmt.Errorf("record: %w", err)
	}
	r := &AgentRecord{V: recordVersion, DID: h.DID, AgentID: h.AgentID, Seq: h.Seq, Deleted: h.Deleted, Expires: h.Expires, Directory: h.Directory}
	if err := v.admits(key, r); err != nil {
		return nil, err
	}
	if err := v.live(r); err != nil {
		return nil, err
	}
	return r, nil
}

// checkSubject checks what the record is about: the agent's own signed
// request, which must name the same did and agent id, or for a tombstone
// a well-formed did and agent id.
func (r *AgentRecord) checkSubject() (identity.SigHeader, error) {
	if r.Deleted {
		if r.Request != nil {
			return identity.SigHeader{}, errors.New("record: a tombstone carries no request")
		}
		if _, err := identity.PublicKeyFromDID(r.DID); err != nil {
			return identity.SigHeader{}, fmt.Errorf("record: %w", err)
		}
		if ValidateID(r.AgentID) != nil {
			return identity.SigHeader{}, errors.New("record: bad agent_id")
		}
		return identity.SigHeader{}, nil
	}
	if r.Request == nil {
		return identity.SigHeader{}, errors.New("record: neither a request nor a tombstone")
	}
	h, err := r.decodeRequest()
	if err != nil {
		return h, err
	}
	if r.DID != identity.DIDFromPublicKey(r.pub) || r.AgentID != r.body.AgentID {
		return h, errors.New("record: did or agent_id do not match the signed request")
	}
	return h, nil
}

// Validate implements record.Validator.
func (v RecordValidator) Validate(key string, value []byte) error {
	_, err := v.check(key, value)
	return err
}

// Select implements record.Validator: the valid record with the highest
// seq wins; at equal seq a tombstone, then the latest expiry, then the
// first.
func (v RecordValidator) Select(key string, values [][]byte) (int, error) {
	best := -1
	var b *AgentRecord
	for i, val := range values {
		r, err := v.check(key, val)
		if err != nil {
			continue
		}
		if best < 0 || r.beats(b) {
			best, b = i, r
		}
	}
	if best < 0 {
		return 0, errors.New("record: no valid record")
	}
	return best, nil
}

func (r *AgentRecord) beats(o *AgentRecord) bool {
	if r.Seq != o.Seq {
		return r.Seq > o.Seq
	}
	if r.Deleted != o.Deleted {
		return r.Deleted
	}
	return r.Expires > o.Expires
}

// Agent returns the directory view a live record supports: id, key,
// endpoint and capabilities as the agent last signed them. Presence is
// unknown. A tombstone supports none: ErrAgentNotFound.
func (r *AgentRecord) Agent() (*Agent, error) {
	if r.Deleted {
		return nil, fmt.Errorf("%w: deleted at directory seq %d", ErrAgentNotFound, r.Seq)
	}
	at := time.Unix(r.signedAt, 0).UTC()
	return &Agent{
		ID: r.AgentID, Reg: 1, Capabilities: r.body.Capabilities, Endpoint: r.body.Endpoint,
		Pubkey: identity.EncodePublicKey(r.pub), DID: r.DID, RegisteredAt: at, UpdatedAt: at,
	}, nil
}
