package wall

import (
	"crypto/ed25519"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/agentmesh/mesh/identity"
)

// TestProvedHandleElsewhere: node B's member carol has no proof, node A's
// proved her did. This node shows carol as A's member, and passes on a
// message of B's carol without her did, whatever B says of it (B may not
// have heard of the proof yet, or be of the release before); A's keeps it.
func TestProvedHandleElsewhere(t *testing.T) {
	t.Parallel()
	const nodeA, nodeB = peer.ID("node-a"), peer.ID("node-b")
	key := identity.GenerateKey()
	did := identity.DIDFromPublicKey(key.Public().(ed25519.PublicKey))
	unproved := member{Agent: "carol", DID: did, Vis: VisPublic}
	proved := member{Agent: "carol", DID: did, Vis: VisPublic, Proof: SignConnect(key, "c_view", "carol", "ch", time.Now()), Challenge: "ch"}
	r := viewRoom()
	r.setRoster(nodeB, roster{Epoch: 1, Members: []member{unproved, {Agent: "dave", DID: "did:example:dave", Vis: VisPublic}}})
	msg := func(from, fromDID string, verified bool) *wireMsg {
		return &wireMsg{T: wireMessage, From: from, FromDID: fromDID, Verified: verified}
	}
	if w := r.believedLocked(r.remote[nodeB], msg("carol", did, false)); w.FromDID != did {
		t.Fatalf("before the proof, B's carol spoke without her claimed did: %+v", w)
	}
	r.setRoster(nodeA, roster{Epoch: 1, Members: []member{proved}})
	for range 10 { // whatever the order of the views
		if m, on := r.presentLocked("carol"); !on || !m.verified() {
			t.Fatalf("carol is shown as %+v", m)
		}
	}
	if ms := r.members(); len(ms) != 2 || !ms[0].verified() {
		t.Fatalf("the members: %+v", ms)
	}
	for _, tc := range []struct {
		name string
		from peer.ID
		w    *wireMsg
		did  string
		ok   bool
	}{
		{"B's carol", nodeB, msg("carol", did, false), "", false},
		{"B's carol, claiming the proof", nodeB, msg("carol", did, true), "", false},
		{"A's carol", nodeA, msg("carol", did, true), did, true},
		{"B's dave", nodeB, msg("dave", "did:example:dave", false), "did:example:dave", false},
	} {
		if w := r.believedLocked(r.remote[tc.from], tc.w); w.FromDID != tc.did || w.Verified != tc.ok {
			t.Errorf("%s: from_did %q verified %v, want %q %v", tc.name, w.FromDID, w.Verified, tc.did, tc.ok)
		}
	}
}
