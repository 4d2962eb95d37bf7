package wall

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/libp2p/go-libp2p/core/peer"
)

// What crosses between nodes. On a cluster's topic: messages, presence
// deltas (join, leave), beats (a node is alive and holds the roster of a
// digest) and goodbyes; on the roster stream: full rosters; on the receipt
// stream: receipts. A private cluster's topic messages and rosters are
// sealed with its wire key.
//
// Full rosters never go on the topic: a node's roster grows with its
// members (thousands of them, 350 bytes each at most) while a topic
// message is bounded (maxWire). A beat stays small whatever the roster,
// and a node whose view of another's roster differs from the digest that
// one beats fetches it over the roster stream.
const (
	wireMessage = "msg"
	wireJoin    = "join"
	wireLeave   = "leave"
	wireBeat    = "beat"
	wireBye     = "bye"
)

// Sealing purposes (bound into the associated data, after the cluster
// id). A topic message binds its origin too, and a roster exchange both
// nodes and the asker's challenge, so that what a node sealed for one use
// opens for no other: not under another origin's key, not from another
// asker, not as an answer to another request.
const (
	sealTopic      = "topic"
	sealRosterReq  = "roster request"
	sealRosterResp = "roster response"
)

// topicAD is the purpose a topic message from origin is sealed for.
func topicAD(origin peer.ID) string { return sealTopic + "\n" + origin.String() }

// rosterReqAD is the purpose of a roster request from asker to answerer
// with challenge; rosterRespAD that of the answer.
func rosterReqAD(asker, answerer peer.ID, challenge string) string {
	return sealRosterReq + "\n" + asker.String() + "\n" + answerer.String() + "\n" + challenge
}

func rosterRespAD(answerer, asker peer.ID, challenge string) string {
	return sealRosterResp + "\n" + answerer.String() + "\n" + asker.String() + "\n" + challenge
}

// maxWire bounds a topic message: a full payload, the handles of sender
// and recipients (JSON escapes may double a handle), a did, the rest of
// the envelope and sealing.
const maxWire = MaxFrame + (maxRecipients+1)*(2*maxHandleLen+3) + maxDIDLen + 1024

// maxRoster bounds the members one node reports.
const maxRoster = 10_000

// The size of a roster on the roster stream (docs/wire.md 7.2), which a
// node reads whole from any peer that asks: bounded by the largest roster
// a node of this release makes. A member of it is at most maxMemberJSON
// bytes of JSON (a comma included): the keys and punctuation, a handle
// whose every byte JSON escapes (a quote or backslash takes two), and a
// did likewise. A member that proved its did has a did:key (56 bytes),
// its proof as this node re-encodes it (proof.go: at most 413 bytes, a
// nonce of 128 escaped bytes included) and this node's challenge (32):
// less than an escaped did. The answer is the roster, sealed; the request
// carries it as base64 in its JSON.
const (
	maxMemberJSON = len(`{"agent":"","did":"","vis":"private","proof":"","challenge":""},`) + 2*maxHandleLen + 2*maxDIDLen
	// maxRosterJSON: maxRoster members, and epoch, rev and seq of 20
	// digits each.
	maxRosterJSON = maxRoster*maxMemberJSON + 128
	maxRosterResp = maxRosterJSON + sealOverhead
	maxRosterReq  = 4*((maxRosterResp+2)/3) + 256 // base64, and the request's other fields
)

type wireMsg struct {
	T string `json:"t"`

	// message
	ID      string `json:"id,omitempty"`
	From    string `json:"from,omitempty"`
	FromDID string `json:"from_did,omitempty"`
	// Verified: the sending socket proved FromDID (taken from a known
	// node whose roster shows the member so proved).
	Verified bool            `json:"verified,omitempty"`
	To       []string        `json:"to,omitempty"` // nil: broadcast
	TS       int64           `json:"ts,omitempty"`
	Payload  json.RawMessage `json:"payload,omitempty"`
	// Board and Ref are the hashtags the sending node resolved (a board's
	// slug, a post's id).
	Board string `json:"board,omitempty"`
	Ref   string `json:"ref,omitempty"`

	// join, leave
	Member *member `json:"member,omitempty"`

	// the sending room's epoch (a bye from the earlier release has none);
	// a message's number in the room's sequence, or for a leave or bye the
	// last message the room sent before (order.go); the rev of the room's
	// roster a delta made, or a beat reports (roster.go)
	Epoch uint64 `json:"epoch,omitempty"`
	Seq   uint64 `json:"seq,omitempty"`
	Rev   uint64 `json:"rev,omitempty"`
	// beat: the digest of the roster
	Digest string `json:"digest,omitempty"`

	// At is when the room published it (Unix ms, the sending node's
	// clock) and N its number among everything the room of Epoch
	// published (from 1): with the origin, a sealed message's identity,
	// which a node takes once (replay.go).
	At int64  `json:"at,omitempty"`
	N  uint64 `json:"n,omitempty"`
}

// member is a non-ghost member as other nodes see it.
type member struct {
	Agent string `json:"agent"`
	DID   string `json:"did,omitempty"`
	Vis   string `json:"vis,omitempty"` // public or private
	// Proof is the did's proof of key (proof.go), checked again by every
	// node that takes the member; "" when the did is only claimed.
	Proof string `json:"proof,omitempty"`
	// Challenge is the challenge of the node it connected to, which the
	// proof signed.
	Challenge string `json:"challenge,omitempty"`
}

// check validates a member of cluster's roster on another node; a proof
// of key is checked against the node's proofs.
func (m member) check(cluster string, proofs *proofMemory) error {
	if err := validHandle(m.Agent); err != nil {
		return err
	}
	if m.Vis != VisPublic && m.Vis != VisPrivate {
		return fmt.Errorf("member visibility %q", m.Vis)
	}
	if m.DID == "" {
		if m.Proof != "" {
			return errors.New("a proof of key without a did")
		}
		return nil
	}
	if err := validDID(m.DID); err != nil {
		return err
	}
	if m.Proof != "" {
		if _, err := proofs.check(m.Proof, m.Challenge, cluster, m.Agent, m.DID); err != nil {
			return fmt.Errorf("member %q: proof of key: %w", m.Agent, err)
		}
	}
	return nil
}

// verified reports whether the member proved its did.
func (m member) verified() bool { return m.Proof != "" }

// check validates a message from another node on cluster's topic: its
// shape, sizes and handles, so that nothing malformed reaches a socket.
func (w *wireMsg) check(cluster string, proofs *proofMemory) error {
	if w.Seq > maxCount || w.Rev > maxCount || w.N > maxCount {
		return errors.New("seq or rev out of range")
	}
	switch w.T {
	case wireMessage:
		if w.ID == "" || len(w.ID) > 32 || w.TS <= 0 || w.Epoch == 0 || w.Seq == 0 || len(w.Payload) > MaxFrame ||
			!utf8.Valid(w.Payload) || !json.Valid(w.Payload) {
			return errors.New("malformed message") // a socket must only ever get valid UTF-8 text
		}
		if len(w.To) > maxRecipients {
			return errors.New("too many recipients")
		}
		if w.FromDID != "" {
			if err := validDID(w.FromDID); err != nil {
				return err
			}
		}
		for _, h := range append([]string{w.From}, w.To...) {
			if err := validHandle(h); err != nil {
				return err
			}
		}
		return nil
	case wireJoin, wireLeave:
		if w.Member == nil || w.Epoch == 0 || w.Rev == 0 {
			return errors.New("presence delta without member, epoch or rev")
		}
		return w.Member.check(cluster, proofs)
	case wireBeat:
		if w.Epoch == 0 || len(w.Digest) != 2*digestSize {
			return errors.New("malformed beat")
		}
		return nil
	case wireBye:
		return nil
	}
	return fmt.Errorf("unknown wire message %q", w.T)
}

// maxCount bounds the counters a node announces (a room's message seq and
// roster rev): a room sending a million messages a second takes centuries
// to reach it, and counters from a peer stay far from overflowing when
// the receiver adds to them.
const maxCount = 1 << 53

// check bounds a roster of cluster from another node.
func (r *roster) check(cluster string, proofs *proofMemory) error {
	if r.Seq > maxCount || r.Rev > maxCount {
		return errors.New("roster seq or rev out of range")
	}
	return checkMembers(r.Members, cluster, proofs)
}

func checkMembers(ms []member, cluster string, proofs *proofMemory) error {
	if len(ms) > maxRoster {
		return errors.New("roster too large")
	}
	for _, m := range ms {
		if err := m.check(cluster, proofs); err != nil {
			return err
		}
	}
	return nil
}

// encodeWire seals (for a private cluster) and encodes v.
func encodeWire(s *sealer, purpose string, v any) []byte {
	b, err := marshal(v)
	if err != nil {
		panic(fmt.Sprintf("wall: wire value does not encode: %v", err))
	}
	return s.seal(purpose, b)
}

// decodeWire opens and decodes data into v.
func decodeWire(s *sealer, purpose string, data []byte, v any) error {
	b, err := s.open(purpose, data)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// rosterRequest asks a node for its roster of a cluster and tells it the
// asking node's own. Body is sealed for a private cluster, bound to both
// nodes and to Challenge, which proves the asker holds the cluster's
// token (a request sent back to its asker, or by another peer, does not
// open); the answer is sealed bound to Challenge, which proves the
// answering node holds it now.
type rosterRequest struct {
	Cluster string `json:"cluster"`
	Body    []byte `json:"body"` // encodes a roster
	// Peek asks for the roster only: the asker does not serve the cluster.
	Peek bool `json:"peek,omitempty"`
	// Challenge is fresh for each request of a private cluster's roster:
	// base64url of challengeSize random bytes.
	Challenge string `json:"challenge,omitempty"`
}

// newRosterRequest is the request of node asker to node asked for its
// roster of cluster id (sealed with seal, for a private cluster), telling
// it mine; and its encoding.
func newRosterRequest(asker, asked peer.ID, id string, seal *sealer, mine roster, peek bool) (rosterRequest, []byte) {
	q := rosterRequest{Cluster: id, Peek: peek}
	if seal != nil {
		q.Challenge = newRosterChallenge()
	}
	q.Body = encodeWire(seal, rosterReqAD(asker, asked, q.Challenge), mine)
	return q, encodeWire(nil, "", q)
}

// challengeSize is the size of a roster request's challenge, in bytes.
const challengeSize = 16

// newRosterChallenge returns a fresh challenge for a roster request.
func newRosterChallenge() string {
	b := make([]byte, challengeSize)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// checkRosterChallenge fails unless c is a roster request's challenge.
func checkRosterChallenge(c string) error {
	if b, err := base64.RawURLEncoding.DecodeString(c); err != nil || len(b) != challengeSize {
		return errors.New("wall: a private cluster's roster request without a challenge")
	}
	return nil
}

// receipt tells a message's origin node how many of its sockets received it.
type receipt struct {
	Cluster   string `json:"cluster"`
	ID        string `json:"id"`
	Delivered int    `json:"delivered"`
}
