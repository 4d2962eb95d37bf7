package wall

import (
	"crypto/ed25519"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/p2p"
)

// TestRosterSizeBound: the largest roster a node makes fits the roster
// stream's limits (docs/wire.md 7.2), in a private cluster's sealed
// request and answer: maxRoster members of the largest kind, a handle and
// a did whose every byte JSON escapes, or a proved did:key with the
// largest proof this node keeps (its nonce escaped too) and its
// challenge.
func TestRosterSizeBound(t *testing.T) {
	t.Parallel()
	key := identity.GenerateKey()
	escaped := func(n int) string { return strings.Repeat(`"`, n) }
	proof := identity.SigHeader{Pubkey: key.Public().(ed25519.PublicKey), TS: math.MaxInt64, Nonce: escaped(128), Sig: make([]byte, ed25519.SignatureSize)}
	unproved := member{Agent: escaped(maxHandleLen), DID: "did:" + escaped(maxDIDLen-4), Vis: VisPrivate}
	proved := member{Agent: escaped(maxHandleLen), DID: identity.DIDFromPublicKey(proof.Pubkey), Vis: VisPrivate,
		Proof: proof.String(), Challenge: newChallenger().issue("c_"+strings.Repeat("a", 24), time.Now())}
	if _, err := identity.ParseSigHeader(proof.String()); err != nil {
		t.Fatalf("the largest proof does not parse: %v", err)
	}
	largest := unproved
	for _, m := range []member{unproved, proved} {
		b, _ := marshal(m)
		if len(b)+1 > maxMemberJSON {
			t.Fatalf("a member of %d bytes of JSON, over maxMemberJSON (%d): %s", len(b)+1, maxMemberJSON, b)
		}
		if c, _ := marshal(largest); len(b) > len(c) {
			largest = m
		}
	}
	ro := roster{Epoch: math.MaxUint64, Rev: math.MaxUint64, Seq: math.MaxUint64, Members: make([]member, maxRoster)}
	for i := range ro.Members {
		ro.Members[i] = largest
	}
	asker, asked := newPeerID(t), newPeerID(t)
	cluster := "c_" + strings.Repeat("a", 24)
	seal := newSealer(cluster, "ck_token")
	q, req := newRosterRequest(asker, asked, cluster, seal, ro, false)
	if len(req) > maxRosterReq {
		t.Errorf("the largest roster request is %d bytes, over maxRosterReq (%d)", len(req), maxRosterReq)
	}
	if answer := encodeWire(seal, rosterRespAD(asked, asker, q.Challenge), ro); len(answer) > maxRosterResp {
		t.Errorf("the largest roster answer is %d bytes, over maxRosterResp (%d)", len(answer), maxRosterResp)
	}
	t.Logf("the largest roster: a request of %d bytes (limit %d)", len(req), maxRosterReq)
}

// newPeerID is the peer id of a fresh key.
func newPeerID(t *testing.T) peer.ID {
	id, err := p2p.PeerID(identity.GenerateKey().Public().(ed25519.PublicKey))
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestProofReencoded: the proof a member carries to other nodes is the
// client's re-encoded, whatever white space the client padded it with.
func TestProofReencoded(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	key := identity.GenerateKey()
	ch := h.svc.challenges.issue(LobbyID, time.Now())
	proof := SignConnect(key, LobbyID, "ann", ch, time.Now())
	padded := "\t" + strings.ReplaceAll(proof, " ", " \v\t ") + " "
	ann := h.dial(LobbyID, vals("agent", "ann", "challenge", ch, "sig", padded)).listen()
	if w := ann.next(KindWelcome); w["did_verified"] != true {
		t.Fatalf("a padded proof: %v", w)
	}
	for _, m := range h.svc.room(LobbyID).members() {
		if m.Agent == "ann" && m.Proof != proof {
			t.Fatalf("the member carries the proof %q, want %q", m.Proof, proof)
		}
	}
}
