package wall

import (
	"crypto/ed25519"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/mesh/identity"
)

// TestMemberProofChecked: another node's member carrying a proof of key is
// taken only if the proof is the did's signature for that handle in that
// cluster, whatever its age.
func TestMemberProofChecked(t *testing.T) {
	key, other := identity.GenerateKey(), identity.GenerateKey()
	did := identity.DIDFromPublicKey(key.Public().(ed25519.PublicKey))
	long := time.Now().Add(-30 * 24 * time.Hour) // connected a month ago
	good := SignConnect(key, "c_a", "alice", long)
	cases := []struct {
		name string
		m    member
		ok   bool
	}{
		{"valid, however old", member{Agent: "alice", DID: did, Vis: VisPublic, Proof: good}, true},
		{"no proof", member{Agent: "alice", DID: did, Vis: VisPublic}, true},
		{"another handle", member{Agent: "mallory", DID: did, Vis: VisPublic, Proof: good}, false},
		{"another did", member{Agent: "alice", DID: identity.DIDFromPublicKey(other.Public().(ed25519.PublicKey)), Vis: VisPublic, Proof: good}, false},
		{"signed by another key", member{Agent: "alice", DID: did, Vis: VisPublic, Proof: SignConnect(other, "c_a", "alice", long)}, false},
		{"another cluster", member{Agent: "alice", DID: did, Vis: VisPublic, Proof: SignConnect(key, "c_b", "alice", long)}, false},
		{"a proof without a did", member{Agent: "alice", Vis: VisPublic, Proof: good}, false},
		{"garbage", member{Agent: "alice", DID: did, Vis: VisPublic, Proof: "v1 x"}, false},
		{"oversized", member{Agent: "alice", DID: did, Vis: VisPublic, Proof: good + strings.Repeat(" ", maxProof)}, false},
	}
	for _, tc := range cases {
		if err := tc.m.check("c_a"); (err == nil) != tc.ok {
			t.Errorf("%s: check = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
	r := roster{Epoch: 1, Members: []member{cases[0].m, cases[2].m}}
	if r.check("c_a") == nil {
		t.Error("a roster with a forged proof passed")
	}
}
