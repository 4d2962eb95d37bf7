package quorum

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/cmdlog"
	"github.com/agentmesh/mesh/store"
)

// MembersKind is the cmdlog entry kind of the quorum's signers.
const MembersKind = "quorum"

// Signers: every member signs bearer tokens and DHT attestations with its
// own node key, and the set of members is replicated state, kept by this
// machine on every node (members and replicas alike, as they apply the
// log): when a member joined the set and when it left. A node trusts a
// signature by a member's key made while it was a member, so what a
// member signed keeps verifying everywhere after it was replaced, until
// it expires (tokens after 24 h, records after 48 h), and nothing it signs
// after its removal does. The leader proposes the set whenever Raft's
// configuration and the set differ (Signers.Sync).
//
//	q/m/<did>  signer {peer_id, added, removed} (Unix ns of the entries)
type Signers struct {
	db *store.DB

	mu    sync.RWMutex
	cache map[string]signer // did → signer; nil: not loaded
}

type signer struct {
	PeerID  string `json:"peer_id"`
	Added   int64  `json:"added"`
	Removed int64  `json:"removed,omitempty"` // 0 while a member
}

// SignersOp sets the members: those not in it are removed, new ones
// added. Or it claims the nonce of an admin request (a change of the
// members), single use on every member whichever leads (Nonce).
type SignersOp struct {
	Members []string    `json:"members,omitempty"` // peer ids
	Nonce   *AdminNonce `json:"nonce,omitempty"`
}

// AdminNonce is the Mesh-Sig nonce of an admin request, by the key
// Pubkey (hex).
type AdminNonce struct {
	Pubkey string `json:"pubkey"`
	Nonce  string `json:"nonce"`
}

var signersPrefix = []byte("q/m/")

func signerKey(did string) []byte { return store.Key("q", "m", did) }

var _ cmdlog.Machine = (*Signers)(nil)

// NewSigners returns the signers kept in log's store and registers them.
func NewSigners(log *cmdlog.Log) *Signers {
	s := &Signers{db: log.DB()}
	log.Handle(MembersKind, s)
	return s
}

// DIDOf is the did:key of a peer (its Ed25519 key).
func DIDOf(p peer.ID) (string, error) {
	pub, err := p.ExtractPublicKey()
	if err != nil {
		return "", err
	}
	raw, err := pub.Raw()
	if err != nil || pub.Type() != crypto.Ed25519 {
		return "", fmt.Errorf("quorum: peer %s has no Ed25519 key", p)
	}
	return identity.DIDFromPublicKey(ed25519.PublicKey(raw)), nil
}

// Apply implements cmdlog.Machine.
func (s *Signers) Apply(tx *store.Txn, e *cmdlog.Entry) (any, error) {
	var op SignersOp
	if err := json.Unmarshal(e.Op, &op); err != nil {
		return nil, fmt.Errorf("quorum: decode signers %d: %w", e.Seq, err)
	}
	if n := op.Nonce; n != nil {
		return nil, cmdlog.ClaimNonce(tx, n.Pubkey, n.Nonce, e.At, identity.NonceMemory)
	}
	if len(op.Members) == 0 {
		return nil, errors.New("quorum: a quorum has members")
	}
	want := map[string]string{} // did → peer id
	for _, m := range op.Members {
		id, err := peer.Decode(m)
		if err != nil {
			return nil, fmt.Errorf("quorum: member %q: %w", m, err)
		}
		did, err := DIDOf(id)
		if err != nil {
			return nil, err
		}
		want[did] = m
	}
	cur, err := load(tx)
	if err != nil {
		return nil, err
	}
	for did, sg := range cur {
		if _, keep := want[did]; !keep && sg.Removed == 0 {
			sg.Removed = e.At
			if err := tx.SetJSON(signerKey(did), sg); err != nil {
				return nil, err
			}
		}
	}
	for did, id := range want {
		if sg, ok := cur[did]; ok && sg.Removed == 0 {
			continue
		}
		if err := tx.SetJSON(signerKey(did), signer{PeerID: id, Added: e.At}); err != nil {
			return nil, err
		}
	}
	return nil, nil
}

func load(tx *store.Txn) (map[string]signer, error) {
	out := map[string]signer{}
	err := tx.Scan(signersPrefix, nil, func(k, v []byte) (bool, error) {
		var sg signer
		if err := json.Unmarshal(v, &sg); err != nil {
			return false, err
		}
		out[string(k[len(signersPrefix):])] = sg
		return true, nil
	})
	return out, err
}

// Committed implements cmdlog.Machine.
func (s *Signers) Committed(*cmdlog.Entry, any) { s.Restored() }

// State implements cmdlog.Machine.
func (s *Signers) State() [][]byte { return [][]byte{signersPrefix} }

// Restored implements cmdlog.Machine.
func (s *Signers) Restored() {
	s.mu.Lock()
	s.cache = nil
	s.mu.Unlock()
}

func (s *Signers) all() map[string]signer {
	s.mu.RLock()
	c := s.cache
	s.mu.RUnlock()
	if c != nil {
		return c
	}
	s.db.View(func(tx *store.Txn) error {
		var err error
		c, err = load(tx)
		return err
	})
	if c == nil {
		c = map[string]signer{}
	}
	s.mu.Lock()
	s.cache = c
	s.mu.Unlock()
	return c
}

// Known reports whether the log has named any signer (a quorum's log
// has, once its first leader synced; a lone directory's has not).
func (s *Signers) Known() bool { return len(s.all()) > 0 }

// Trusted reports whether did signed at the given time as a member: it is
// a member, or was one until after then.
func (s *Signers) Trusted(did string, at time.Time) bool {
	sg, ok := s.all()[did]
	return ok && (sg.Removed == 0 || at.UnixNano() < sg.Removed)
}

// Removed reports whether did was a member and is no more.
func (s *Signers) Removed(did string) bool {
	sg, ok := s.all()[did]
	return ok && sg.Removed != 0
}

// Current are the peer ids of the members, sorted.
func (s *Signers) Current() []string {
	var out []string
	for _, sg := range s.all() {
		if sg.Removed == 0 {
			out = append(out, sg.PeerID)
		}
	}
	slices.Sort(out)
	return out
}
