package wall

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentmesh/mesh/identity"
)

// TestMemberProofChecked: another node's member carrying a proof of key is
// taken only if the proof is the did's signature for that handle in that
// cluster, whatever its age.
func TestMemberProofChecked(t *testing.T) {
	t.Parallel()
	key, other := identity.GenerateKey(), identity.GenerateKey()
	did := identity.DIDFromPublicKey(key.Public().(ed25519.PublicKey))
	long := time.Now().Add(-30 * 24 * time.Hour) // connected a month ago
	const ch = "challenge-of-b"
	good := SignConnect(key, "c_a", "alice", ch, long)
	cases := []struct {
		name string
		m    member
		ok   bool
	}{
		{"valid, however old", member{Agent: "alice", DID: did, Vis: VisPublic, Proof: good, Challenge: ch}, true},
		{"another challenge", member{Agent: "alice", DID: did, Vis: VisPublic, Proof: good, Challenge: "challenge-of-c"}, false},
		{"no challenge", member{Agent: "alice", DID: did, Vis: VisPublic, Proof: good}, false},
		{"no proof", member{Agent: "alice", DID: did, Vis: VisPublic}, true},
		{"another handle", member{Agent: "mallory", DID: did, Vis: VisPublic, Proof: good, Challenge: ch}, false},
		{"another did", member{Agent: "alice", DID: identity.DIDFromPublicKey(other.Public().(ed25519.PublicKey)), Vis: VisPublic, Proof: good, Challenge: ch}, false},
		{"signed by another key", member{Agent: "alice", DID: did, Vis: VisPublic, Proof: SignConnect(other, "c_a", "alice", ch, long), Challenge: ch}, false},
		{"another cluster", member{Agent: "alice", DID: did, Vis: VisPublic, Proof: SignConnect(key, "c_b", "alice", ch, long), Challenge: ch}, false},
		{"a proof without a did", member{Agent: "alice", Vis: VisPublic, Proof: good, Challenge: ch}, false},
		{"garbage", member{Agent: "alice", DID: did, Vis: VisPublic, Proof: "v1 x"}, false},
		{"oversized", member{Agent: "alice", DID: did, Vis: VisPublic, Proof: good + strings.Repeat(" ", maxProof), Challenge: ch}, false},
		{"oversized challenge", member{Agent: "alice", DID: did, Vis: VisPublic, Proof: good, Challenge: strings.Repeat("c", maxChallenge+1)}, false},
	}
	for _, tc := range cases {
		if err := tc.m.check("c_a", newProofMemory()); (err == nil) != tc.ok {
			t.Errorf("%s: check = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
	r := roster{Epoch: 1, Members: []member{cases[0].m, cases[4].m}}
	if r.check("c_a", newProofMemory()) == nil {
		t.Error("a roster with a forged proof passed")
	}
}

// countVerifies counts the signature verifications of pm.
func countVerifies(pm *proofMemory) *atomic.Int64 {
	var n atomic.Int64
	pm.verify = func(pub ed25519.PublicKey, msg, sig []byte) bool {
		n.Add(1)
		return ed25519.Verify(pub, msg, sig)
	}
	return &n
}

// provenMembers are n members of cluster, each with a fresh proof of key.
func provenMembers(n int, cluster string) []member {
	out := make([]member, n)
	for i := range out {
		key := identity.GenerateKey()
		h := fmt.Sprintf("m%d", i)
		out[i] = member{Agent: h, DID: identity.DIDFromPublicKey(key.Public().(ed25519.PublicKey)), Vis: VisPublic,
			Proof: SignConnect(key, cluster, h, "ch", time.Now()), Challenge: "ch"}
	}
	return out
}

// TestRosterProofsVerifiedOnce: a roster taken again (every exchange,
// every stale beat) does not cost its proofs' verifications again; a
// remembered proof still proves nothing for another handle or cluster.
func TestRosterProofsVerifiedOnce(t *testing.T) {
	t.Parallel()
	pm := newProofMemory()
	n := countVerifies(pm)
	r := roster{Epoch: 1, Members: provenMembers(50, "c_a")}
	for range 3 {
		if err := r.check("c_a", pm); err != nil {
			t.Fatal(err)
		}
	}
	if got := n.Load(); got != 50 {
		t.Fatalf("%d verifications for 3 checks of a roster of 50", got)
	}
	stolen := r.Members[0]
	stolen.Agent = "mallory"
	if stolen.check("c_a", pm) == nil || r.Members[0].check("c_b", pm) == nil {
		t.Fatal("a remembered proof passed for another handle or cluster")
	}
}

// TestStrangersRosterNotVerified: a node that peeks, or that the
// rendezvous does not vouch for, has its roster's proofs left unchecked:
// a stranger cannot make a node verify up to maxRoster signatures a
// request.
func TestStrangersRosterNotVerified(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	h.dial(LobbyID, vals("agent", "ann")).listen().next(KindWelcome)
	mallory := rawPeer(t, h)
	ctx := context.Background()
	claim := roster{Epoch: 1, Rev: 1, Members: provenMembers(20, LobbyID)} // valid: each would be remembered once verified
	ask := func(peek bool) error {
		req := encodeWire(nil, "", rosterRequest{Cluster: LobbyID, Body: encodeWire(nil, sealRosterReq, claim), Peek: peek})
		_, err := mallory.Request(ctx, h.host.ID(), rosterProto, req, maxRosterResp)
		return err
	}
	if err := ask(true); err != nil {
		t.Fatalf("a peek was refused: %v", err)
	}
	if ask(false) == nil {
		t.Fatal("an unvouched node's roster exchange was answered")
	}
	h.svc.proofs.mu.Lock()
	verified := len(h.svc.proofs.m)
	h.svc.proofs.mu.Unlock()
	if verified != 0 {
		t.Fatalf("a stranger's rosters cost %d verifications", verified)
	}
}

// TestProofNoncesCrowd: a crowd cannot hold the proofs' nonce memory
// (issue 26: 100 addresses, each sending 1,000 signed GETs, filled it, and
// every signed connect got 503 for four minutes). A plain GET claims no
// nonce; a request that could open a socket claims one, but an address
// holds at most a thousandth of the memory (429 past it, before its
// signature is checked); a signed connect from another address still
// works. A private cluster's challenge is only for token holders.
func TestProofNoncesCrowd(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) { c.ProofNonces = 10_000 }) // 10 an address
	key := identity.GenerateKey()
	mux := h.srv.Config.Handler
	ask := func(from string, upgrade bool) int {
		ch := h.svc.challenges.issue(LobbyID, time.Now())
		q := vals("agent", "ann", "challenge", ch, "sig", SignConnect(key, LobbyID, "ann", ch, time.Now())).Encode()
		req := httptest.NewRequest("GET", "/v1/clusters/"+LobbyID+"/ws?"+q, nil)
		req.RemoteAddr = from + ":4242"
		if upgrade { // a handshake the recorder cannot complete: the nonce is claimed, no socket opens
			setUpgrade(req.Header)
		}
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		return rec.Code
	}
	perClient := proofNoncesPerClient(10_000)
	plain := 2 * perClient // more than a share: had they claimed nonces, upgrades would be refused at once
	for a := range 100 {
		from := fmt.Sprintf("10.0.%d.%d", a/200, a%200+1)
		for i := range 2 * plain { // plain GETs first: they claim nothing
			upgrade := i >= plain
			switch code := ask(from, upgrade); {
			case !upgrade && code != http.StatusUpgradeRequired:
				t.Fatalf("a signed plain GET: %d", code)
			case upgrade && i-plain < perClient && code == http.StatusTooManyRequests:
				t.Fatalf("address %s refused after %d upgrades", from, i-plain)
			case upgrade && i-plain >= perClient && code != http.StatusTooManyRequests:
				t.Fatalf("address %s past its share: %d", from, code)
			}
		}
	}
	if n := h.svc.proofNonces.Len(); n != 100*perClient {
		t.Fatalf("the crowd holds %d nonces, want %d", n, 100*perClient)
	}
	ch := h.svc.challenges.issue(LobbyID, time.Now())
	ann := h.dial(LobbyID, vals("agent", "ann", "challenge", ch, "sig", SignConnect(key, LobbyID, "ann", ch, time.Now()))).listen()
	if w := ann.next(KindWelcome); w["did_verified"] != true {
		t.Fatalf("a signed connect from another address: %v", w)
	}

	cl := h.create(`{"visibility":"private"}`)
	id := cl["cluster_id"].(string)
	status, unknown := h.call("GET", "/v1/clusters/c_"+strings.Repeat("a", 24)+"/challenge", "")
	if st, body := h.call("GET", "/v1/clusters/"+id+"/challenge", ""); st != status || fmt.Sprint(body) != fmt.Sprint(unknown) {
		t.Fatalf("a private cluster's challenge without the token: %d %v, an unknown id's: %d %v", st, body, status, unknown)
	}
	for _, tok := range []string{cl["token"].(string), cl["admin_token"].(string)} {
		if st, body := h.call("GET", "/v1/clusters/"+id+"/challenge?token="+url.QueryEscape(tok), ""); st != 200 || body["challenge"] == "" {
			t.Fatalf("a private cluster's challenge with a token: %d %v", st, body)
		}
	}
}
