package node

import (
	"crypto/ed25519"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/wall"
)

// TestWallProofOfKey: a socket that signs its connect is marked
// did_verified in its welcome and in the presence frames every node sends
// about it, whether the proof came in the Mesh-Sig header or in ?sig=, and
// whether the other node learnt the member from a delta or a roster; an
// unsigned did stays unverified.
func TestWallProofOfKey(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	b, c := m.join(), m.join()
	id := createCluster(t, b, `{"name":"Proofs","visibility":"public"}`)["cluster_id"].(string)
	alice, carol := identity.GenerateKey(), identity.GenerateKey()

	// alice proves her key in the header, without naming her did.
	chb := challenge(t, b, id)
	hdr := http.Header{identity.SigHeaderName: {wall.SignConnect(alice, id, "alice", chb, time.Now())}}
	ca, resp, err := tryDialWallWith(t, b, id, q("agent", "alice", "challenge", chb), hdr)
	if err != nil {
		t.Fatalf("alice's signed connect: %v (%v)", err, resp)
	}
	if w := ca.next("welcome"); w["you_did"] != didOf(alice) || w["did_verified"] != true {
		t.Fatalf("alice's welcome: %v", w)
	}

	// bob's did is only claimed.
	bob := dialWall(t, c, id, q("agent", "bob", "did", didOf(identity.GenerateKey())))
	if w := bob.next("welcome"); w["did_verified"] != false {
		t.Fatalf("bob's welcome: %v", w)
	}
	if p := ca.next("presence"); p["agent"] != "bob" || p["did_verified"] != false {
		t.Fatalf("alice saw %v", p)
	}

	// carol proves hers in the query, on the other node: alice's node
	// checks the proof again when the delta arrives.
	chc := challenge(t, c, id)
	cc := dialWall(t, c, id, q("agent", "carol", "did", didOf(carol), "challenge", chc, "sig", wall.SignConnect(carol, id, "carol", chc, time.Now())))
	if w := cc.next("welcome"); w["did_verified"] != true {
		t.Fatalf("carol's welcome: %v", w)
	}
	for _, rx := range []*wsClient{ca, bob} {
		if p := rx.next("presence"); p["agent"] != "carol" || p["did"] != didOf(carol) || p["did_verified"] != true {
			t.Fatalf("carol's presence: %v", p)
		}
	}

	// A third node learns alice from b's roster when its first socket
	// comes; it tells of her going offline as verified.
	d := m.join()
	dave := enterWall(t, d, id, q("agent", "dave"))
	ca.conn.CloseNow()
	for {
		p := dave.next("presence")
		if p["agent"] != "alice" {
			continue
		}
		if p["status"] != "offline" || p["did"] != didOf(alice) || p["did_verified"] != true {
			t.Fatalf("dave saw %v", p)
		}
		break
	}
}

// TestWallProofRefused: forged, misdirected, stale and replayed proofs are
// refused before the upgrade, each with its code; so is a proof presented
// to another node than the one whose challenge it signed, although that
// node saw it, valid, in the member's record.
func TestWallProofRefused(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	b, c := m.join(), m.join()
	id := createCluster(t, b, `{"visibility":"public"}`)["cluster_id"].(string)
	other := createCluster(t, b, `{"visibility":"public"}`)["cluster_id"].(string)
	alice, mallory := identity.GenerateKey(), identity.GenerateKey()
	now := time.Now()
	ch := challenge(t, b, id)
	sign := func(key ed25519.PrivateKey, cluster, handle, ch string, at time.Time) string {
		return wall.SignConnect(key, cluster, handle, ch, at)
	}
	replayed := sign(alice, id, "alice", ch, now)
	watcher := enterWall(t, c, id, q("agent", "watcher"))
	enterWall(t, b, id, q("agent", "alice", "challenge", ch, "sig", replayed))
	if p := watcher.next("presence"); p["agent"] != "alice" || p["did_verified"] != true {
		t.Fatalf("node c's view of alice: %v", p)
	}
	cases := []struct {
		name   string
		node   *Node
		query  []string
		header string
		status int
		code   string
	}{
		{"signed by another key than the did's", b, []string{"agent", "alice", "did", didOf(alice), "challenge", ch, "sig", sign(mallory, id, "alice", ch, now)}, "", 401, "did_mismatch"},
		{"signed for another handle", b, []string{"agent", "mallory", "did", didOf(alice), "challenge", ch, "sig", sign(alice, id, "alice", ch, now)}, "", 401, "invalid_signature"},
		{"signed for another cluster", b, []string{"agent", "alice", "challenge", ch, "sig", sign(alice, other, "alice", ch, now)}, "", 401, "invalid_signature"},
		{"signed for another challenge", b, []string{"agent", "alice", "challenge", ch, "sig", sign(alice, id, "alice", challenge(t, b, other), now)}, "", 401, "invalid_signature"},
		{"without its challenge", b, []string{"agent", "alice", "sig", sign(alice, id, "alice", ch, now)}, "", 401, "invalid_challenge"},
		{"another cluster's challenge", b, []string{"agent", "alice", "challenge", challenge(t, b, other), "sig", sign(alice, id, "alice", challenge(t, b, other), now)}, "", 401, "invalid_challenge"},
		{"stale", b, []string{"agent", "alice", "challenge", ch, "sig", sign(alice, id, "alice", ch, now.Add(-5*time.Minute))}, "", 401, "stale_signature"},
		{"replayed", b, []string{"agent", "alice", "challenge", ch, "sig", replayed}, "", 401, "nonce_reused"},
		{"replayed in the header", b, []string{"agent", "alice", "challenge", ch}, replayed, 401, "nonce_reused"},
		{"replayed to another node", c, []string{"agent", "alice", "challenge", ch, "sig", replayed}, "", 401, "invalid_challenge"},
		{"header and query both", b, []string{"agent", "alice", "challenge", ch, "sig", sign(alice, id, "alice", ch, now)}, sign(alice, id, "alice", ch, now), 401, "invalid_signature"},
		{"garbage", b, []string{"agent", "alice", "challenge", ch, "sig", "v1 nope"}, "", 401, "invalid_signature"},
		{"a bound signature", b, []string{"agent", "alice", "challenge", ch, "sig", identity.SignBound(alice, "GET", "/v1/clusters/"+id+"/ws", []byte("alice\n"+ch), now, identity.Binding{})}, "", 401, "invalid_signature"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var h http.Header
			if tc.header != "" {
				h = http.Header{identity.SigHeaderName: {tc.header}}
			}
			ws, resp, err := tryDialWallWith(t, tc.node, id, q(tc.query...), h)
			if err == nil {
				t.Fatalf("socket opened: %v", ws.next("welcome"))
			}
			if resp == nil || resp.StatusCode != tc.status {
				t.Fatalf("status %v, want %d", resp, tc.status)
			}
			if b, _ := io.ReadAll(resp.Body); errorCode(b) != tc.code {
				t.Fatalf("answer %s, want code %q", b, tc.code)
			}
		})
	}
}

// challenge fetches a connect challenge for cluster id from n.
func challenge(t *testing.T, n *Node, id string) string {
	t.Helper()
	st, v := call(t, n, "GET", "/v1/clusters/"+id+"/challenge", "")
	ch, _ := v["challenge"].(string)
	if st != 200 || ch == "" || v["cluster_id"] != id {
		t.Fatalf("challenge of %s: %d %v", id, st, v)
	}
	return ch
}

func didOf(key ed25519.PrivateKey) string {
	return identity.DIDFromPublicKey(key.Public().(ed25519.PublicKey))
}
