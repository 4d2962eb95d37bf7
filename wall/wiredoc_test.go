package wall

import (
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strconv"
	"testing"

	pb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/testkit"
	"github.com/agentmesh/mesh/p2p"
)

// wireVectors reads the test vectors of docs/wire.md's section heading
// (12. Test vectors).
func wireVectors(t *testing.T, heading string) map[string]string {
	t.Helper()
	return testkit.WireVectors(t, "../docs/wire.md", heading)
}

// vector is the value of name in vectors, which must be there.
var vector = testkit.Vector

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return b
}

// keyOf is the Ed25519 key of a vector's seed, and its peer id.
func keyOf(t *testing.T, seed string) (ed25519.PrivateKey, peer.ID) {
	t.Helper()
	key := ed25519.NewKeyFromSeed(unhex(t, seed))
	id, err := p2p.PeerID(key.Public().(ed25519.PublicKey))
	if err != nil {
		t.Fatal(err)
	}
	return key, id
}

// TestWireVectors: every test vector of docs/wire.md (12. Test vectors) is
// what the code makes, read from the document itself, so that a peer
// written from the document agrees with the nodes.
func TestWireVectors(t *testing.T) {
	t.Parallel()
	t.Run("12.1 message id", func(t *testing.T) {
		v := wireVectors(t, "12.1 Message id")
		key, id := keyOf(t, vector(t, v, "seed"))
		if got := hex.EncodeToString(key.Public().(ed25519.PublicKey)); got != vector(t, v, "public key") {
			t.Errorf("public key %s", got)
		}
		if id.String() != vector(t, v, "peer id") {
			t.Errorf("peer id %s", id)
		}
		m := &pb.Message{From: []byte(id), Seqno: unhex(t, vector(t, v, "seqno"))}
		if got := hex.EncodeToString([]byte(p2p.MessageID(m))); got != vector(t, v, "message id") {
			t.Errorf("message id %s", got)
		}
	})

	seal := wireVectors(t, "12.2 The seal (a topic message)")
	cluster, token := vector(t, seal, "cluster"), vector(t, seal, "token")
	s := newSealer(cluster, token)
	// sealed checks what s seals of plain for purpose with nonce, against
	// the associated data and the sealed bytes ad and want; it returns
	// the sealed bytes.
	sealed := func(t *testing.T, purpose, ad, nonce string, plain []byte, want string) []byte {
		t.Helper()
		if cluster+"\n"+purpose != ad {
			t.Errorf("associated data %q, want %q", cluster+"\n"+purpose, ad)
		}
		b := s.sealWith(unhex(t, nonce), purpose, plain)
		if got := hex.EncodeToString(b); got != want {
			t.Errorf("sealed %s", got)
		}
		if o, err := s.open(purpose, b); err != nil || string(o) != string(plain) {
			t.Errorf("open: %q %v", o, err)
		}
		return b
	}

	t.Run("12.2 the seal", func(t *testing.T) {
		if k := hex.EncodeToString(derive(token, cluster, "wire key", 32)); k != vector(t, seal, "wire key") {
			t.Errorf("wire key %s", k)
		}
		origin, err := peer.Decode(vector(t, seal, "origin"))
		if err != nil {
			t.Fatal(err)
		}
		sealed(t, topicAD(origin), vector(t, seal, "associated data"), vector(t, seal, "nonce"),
			[]byte(vector(t, seal, "plaintext")), vector(t, seal, "sealed"))
	})

	t.Run("12.3 a roster request", func(t *testing.T) {
		v := wireVectors(t, "12.3 A roster request")
		_, asker := keyOf(t, wireVectors(t, "12.1 Message id")["seed"])
		_, asked := keyOf(t, vector(t, v, "asked seed"))
		if asker.String() != vector(t, v, "asker") || asked.String() != vector(t, v, "asked") {
			t.Errorf("asker %s, asked %s", asker, asked)
		}
		ch := vector(t, v, "challenge")
		if err := checkRosterChallenge(ch); err != nil {
			t.Error(err)
		}
		var ro roster
		if err := json.Unmarshal([]byte(vector(t, v, "roster")), &ro); err != nil {
			t.Fatal(err)
		}
		plain, _ := marshal(ro)
		body := sealed(t, rosterReqAD(asker, asked, ch), vector(t, v, "associated data"), vector(t, v, "nonce"), plain, vector(t, v, "body"))
		if req, _ := marshal(rosterRequest{Cluster: cluster, Body: body, Challenge: ch}); string(req) != vector(t, v, "request") {
			t.Errorf("request %s", req)
		}
		if _, err := s.open(rosterReqAD(asked, asker, ch), body); err == nil {
			t.Error("the request opens reflected, as the asked node's")
		}
		if ad := cluster + "\n" + rosterRespAD(asked, asker, ch); ad != vector(t, v, "answer's data") {
			t.Errorf("the answer's associated data %q", ad)
		}
	})

	t.Run("12.4 digest", func(t *testing.T) {
		v := wireVectors(t, "12.4 Digest")
		for _, which := range []string{"a", "b"} {
			var ms []member
			if err := json.Unmarshal([]byte(vector(t, v, "members "+which)), &ms); err != nil {
				t.Fatal(err)
			}
			var d digest
			for _, m := range ms {
				d.flip(m)
			}
			if d.String() != vector(t, v, "digest "+which) {
				t.Errorf("digest %s: %s", which, d)
			}
		}
	})

	t.Run("12.5 a member's proof of key", func(t *testing.T) {
		v := wireVectors(t, "12.5 A member's proof of key")
		key, _ := keyOf(t, wireVectors(t, "12.1 Message id")["seed"])
		did := identity.DIDFromPublicKey(key.Public().(ed25519.PublicKey))
		cl, agent, ch, nonce := vector(t, v, "cluster"), vector(t, v, "agent"), vector(t, v, "challenge"), vector(t, v, "nonce")
		ts, err := strconv.ParseInt(vector(t, v, "ts"), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		if did != vector(t, v, "did") {
			t.Errorf("did %s", did)
		}
		signed := identity.SigningString(http.MethodGet, proofPath(cl), connectBody(agent, ch), ts, nonce)
		if string(signed) != vector(t, v, "signed") {
			t.Errorf("signed %q", signed)
		}
		proof := identity.SigHeader{Pubkey: key.Public().(ed25519.PublicKey), TS: ts, Nonce: nonce, Sig: ed25519.Sign(key, signed)}.String()
		if proof != vector(t, v, "proof") {
			t.Errorf("proof %s", proof)
		}
		m := member{Agent: agent, DID: did, Vis: VisPublic, Proof: proof, Challenge: ch}
		if err := m.check(cl, newProofMemory()); err != nil || !m.verified() {
			t.Errorf("the member does not check: %v", err)
		}
		if b, _ := marshal(m); string(b) != vector(t, v, "member") {
			t.Errorf("member %s", b)
		}
	})
}
