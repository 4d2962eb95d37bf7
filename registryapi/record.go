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
// agent id, endpoint and capabilities to the key named by the did), plus an
// expiry attested by the directory. Validators accept a record only if the
// request's signature is by the did's key and the attestation is by a
// trusted directory, so neither a forged nor a mutated record passes, and a
// record nobody republishes dies at its expiry. Among valid records the
// highest seq (the agent's signing time) wins.
const (
	// RecordNS is the DHT namespace of records keyed by did:key.
	RecordNS = "mesh-agent"
	// IDIndexNS is the namespace of the same records keyed by agent id.
	IDIndexNS = "mesh-aid"
	// RecordTTL is how long a published record stays valid.
	RecordTTL = 48 * time.Hour
	// RepublishInterval is how often the directory republishes records.
	RepublishInterval = 12 * time.Hour
	// maxRecordSize bounds a record (a register body is at most 64 KiB).
	maxRecordSize = DefaultMaxBody + 4<<10
	recordTag     = "MESHREC1"
)

// RecordKeys returns the DHT keys of a record: by did and by agent id.
func RecordKeys(did, agentID string) []string {
	return []string{"/" + RecordNS + "/" + did, "/" + IDIndexNS + "/" + agentID}
}

// IDRecordKey is the DHT key of the record of agent id.
func IDRecordKey(agentID string) string { return "/" + IDIndexNS + "/" + agentID }

// AgentRecord is the value stored in the DHT.
type AgentRecord struct {
	V         int    `json:"v"`
	DID       string `json:"did"`
	AgentID   string `json:"agent_id"`
	Seq       int64  `json:"seq"`       // the ts of the agent's Mesh-Sig
	Request   Signed `json:"request"`   // the agent's signed register request
	Expires   int64  `json:"expires"`   // unix seconds, attested by Directory
	Directory string `json:"directory"` // did:key of the attesting directory
	DirSig    string `json:"dir_sig"`   // base64 signature over attestation()

	pub  ed25519.PublicKey
	body registerRequest
}

// attestation is what the directory signs: the agent's signature header
// (which covers the whole request) and the expiry.
func (r *AgentRecord) attestation() []byte {
	return []byte(recordTag + "\n" + r.Request.MeshSig + "\n" + strconv.FormatInt(r.Expires, 10))
}

// NewRecord builds the DHT record of a signed register request, attested by
// the directory key until now+RecordTTL.
func NewRecord(req Signed, dirKey ed25519.PrivateKey, now time.Time) (*AgentRecord, []byte, error) {
	r := &AgentRecord{V: 1, Request: req, Expires: now.Add(RecordTTL).Unix(),
		Directory: identity.DIDFromPublicKey(dirKey.Public().(ed25519.PublicKey))}
	if err := r.checkRequest(); err != nil {
		return nil, nil, err
	}
	r.DID, r.AgentID = identity.DIDFromPublicKey(r.pub), r.body.AgentID
	r.DirSig = base64.StdEncoding.EncodeToString(ed25519.Sign(dirKey, r.attestation()))
	b, err := json.Marshal(r)
	return r, b, err
}

// checkRequest verifies the agent's signature over its register request
// (not its freshness: a record outlives the 120 s window) and decodes it.
func (r *AgentRecord) checkRequest() error {
	q := r.Request
	path, _, _ := strings.Cut(q.Path, "?")
	if q.Method != "POST" || (path != "/v1/agents/register" && path != "/agents/register") {
		return errors.New("record: not a register request")
	}
	h, err := identity.ParseSigHeader(q.MeshSig)
	if err != nil {
		return fmt.Errorf("record: %w", err)
	}
	if !ed25519.Verify(h.Pubkey, identity.SigningString(q.Method, q.Path, []byte(q.Body), h.TS, h.Nonce), h.Sig) {
		return errors.New("record: request signature does not verify")
	}
	var body registerRequest
	if err := httpx.DecodeJSON([]byte(q.Body), &body); err != nil {
		return fmt.Errorf("record: %w", err)
	}
	if err := body.validate(); err != nil {
		return fmt.Errorf("record: %w", err)
	}
	if body.Pubkey != "" && body.Pubkey != identity.EncodePublicKey(h.Pubkey) {
		return errors.New("record: request binds another key than it is signed with")
	}
	r.pub, r.body, r.Seq = h.Pubkey, body, h.TS
	return nil
}

// SignedRegistration reports whether e registers an agent with a request
// the agent signed, and which: such an agent has a DHT record to publish.
func SignedRegistration(e *cmdlog.Entry) (agentID string, ok bool) {
	if e.Kind != Kind {
		return "", false
	}
	var cmd Command
	if json.Unmarshal(e.Op, &cmd) != nil || cmd.Register == nil || cmd.Register.Signed == nil {
		return "", false
	}
	return cmd.Register.AgentID, true
}

// RecordValidator checks agent records for the DHT (it satisfies
// go-libp2p-record's Validator).
type RecordValidator struct {
	// Trusted reports whether did is a directory whose attestations count.
	Trusted func(did string) bool
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Parse decodes and fully checks a record stored under key.
func (v RecordValidator) Parse(key string, value []byte) (*AgentRecord, error) {
	if len(value) > maxRecordSize {
		return nil, errors.New("record: too large")
	}
	var r AgentRecord
	if err := json.Unmarshal(value, &r); err != nil {
		return nil, fmt.Errorf("record: %w", err)
	}
	if r.V != 1 {
		return nil, fmt.Errorf("record: unknown version %d", r.V)
	}
	if err := r.checkRequest(); err != nil {
		return nil, err
	}
	if r.DID != identity.DIDFromPublicKey(r.pub) || r.AgentID != r.body.AgentID {
		return nil, errors.New("record: did or agent_id do not match the signed request")
	}
	if key != "/"+RecordNS+"/"+r.DID && key != IDRecordKey(r.AgentID) {
		return nil, errors.New("record: stored under a key it does not name")
	}
	if v.Trusted == nil || !v.Trusted(r.Directory) {
		return nil, errors.New("record: not attested by a trusted directory")
	}
	dirPub, err := identity.PublicKeyFromDID(r.Directory)
	if err != nil {
		return nil, fmt.Errorf("record: %w", err)
	}
	sig, err := base64.StdEncoding.DecodeString(r.DirSig)
	if err != nil || !ed25519.Verify(dirPub, r.attestation(), sig) {
		return nil, errors.New("record: directory attestation does not verify")
	}
	now := time.Now
	if v.Now != nil {
		now = v.Now
	}
	if now().Unix() >= r.Expires {
		return nil, errors.New("record: expired")
	}
	return &r, nil
}

// Validate implements record.Validator.
func (v RecordValidator) Validate(key string, value []byte) error {
	_, err := v.Parse(key, value)
	return err
}

// Select implements record.Validator: the valid record with the highest
// seq wins, then the latest expiry, then the first.
func (v RecordValidator) Select(key string, values [][]byte) (int, error) {
	best := -1
	var bs, be int64
	for i, val := range values {
		r, err := v.Parse(key, val)
		if err != nil {
			continue
		}
		if best < 0 || r.Seq > bs || (r.Seq == bs && r.Expires > be) {
			best, bs, be = i, r.Seq, r.Expires
		}
	}
	if best < 0 {
		return 0, errors.New("record: no valid record")
	}
	return best, nil
}

// Agent returns the directory view a record supports: id, key, endpoint and
// capabilities as the agent last signed them. Presence is unknown.
func (r *AgentRecord) Agent() *Agent {
	return &Agent{
		ID: r.AgentID, Reg: 1, Capabilities: r.body.Capabilities, Endpoint: r.body.Endpoint,
		Pubkey: identity.EncodePublicKey(r.pub), DID: r.DID,
		RegisteredAt: time.Unix(r.Seq, 0).UTC(), UpdatedAt: time.Unix(r.Seq, 0).UTC(),
	}
}
