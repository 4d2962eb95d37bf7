package node

import (
	"bytes"
	"crypto/ed25519"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/testkit"
	"github.com/agentmesh/mesh/p2p"
)

// signedAdd is a signed request to add the member at addr, by key.
func (q *quorumMesh) signedAdd(key ed25519.PrivateKey, addr string) (body, sig string) {
	body = `{"addr":"` + addr + `"}`
	return body, identity.Sign(key, "POST", "/v1/admin/quorum/members", []byte(body), q.clock.Now())
}

// TestAReplayedAdminRequestIsRefusedByTheNextLeader: a signed change of
// the quorum, taken once, is refused when replayed, also by a leader
// elected after it was taken.
func TestAReplayedAdminRequestIsRefusedByTheNextLeader(t *testing.T) { // not parallel: its Raft elections run in real time
	q := newQuorumMesh(t, 3, nil)
	cfg := testConfig(t, t.TempDir())
	cfg.Role, cfg.Quorum, cfg.Now = RoleBootstrap, q.addrs, q.clock.Now
	joiner := startNode(t, cfg)
	leader := q.leader()
	q.members = append(q.members, joiner) // a voter once added: it may lead next
	body, sig := q.signedAdd(leader.key, joiner.P2PAddrs()[0])
	if st, v := call(t, q.follower(), "POST", "/v1/admin/quorum/members", body, identity.SigHeaderName, sig); st != http.StatusOK {
		t.Fatalf("adding a member: %d %v", st, v)
	}
	leader.Close()
	for i, m := range q.members {
		if m == leader {
			q.members[i] = nil
		}
	}
	next := q.leader() // 3 of the 4 voters are up
	if st, v := call(t, next, "POST", "/v1/admin/quorum/members", body, identity.SigHeaderName, sig); st != http.StatusUnauthorized || v["code"] != "nonce_reused" {
		t.Fatalf("the request replayed to the next leader: %d %v", st, v)
	}
}

// TestARemovalSentAgainIsAnsweredAsTheFirst: a node that lost the answer
// to a removal (its leader lost the lead after the change committed)
// sends the same write again: the member is gone, and the attempt is
// answered as the first was, not 404; a new request to remove it is 404.
func TestARemovalSentAgainIsAnsweredAsTheFirst(t *testing.T) { // not parallel: its Raft elections run in real time
	q := newQuorumMesh(t, 3, nil)
	ord := q.join(0, 1, 2)
	gone := q.follower()
	path := "/v1/admin/quorum/members/" + gone.PeerID().String()
	sig := identity.Sign(q.leader().key, "DELETE", path, nil, q.clock.Now())
	secret := bytes.Repeat([]byte{7}, 32)
	for attempt := range 2 {
		st, v := forwardAttempt(t, ord, q, secret, "DELETE", path, "", identity.SigHeaderName, sig)
		if ms, _ := v["members"].([]any); st != http.StatusOK || len(ms) != 2 {
			t.Fatalf("attempt %d of the removal: %d %v", attempt, st, v)
		}
	}
	again := identity.Sign(q.leader().key, "DELETE", path, nil, q.clock.Now())
	st, v := forwardAttempt(t, ord, q, bytes.Repeat([]byte{8}, 32), "DELETE", path, "", identity.SigHeaderName, again)
	if st != http.StatusNotFound || v["code"] != "not_a_member" {
		t.Fatalf("a new request to remove it: %d %v", st, v)
	}
}

// TestOneChangeOfTheQuorumAtATime: while a member is being added (here,
// one that never answers), another change is refused with 409
// quorum_change_in_progress, and the member it names does not enter the
// leader's peerstore; the one being added does, once the quorum took it
// in.
func TestOneChangeOfTheQuorumAtATime(t *testing.T) { // not parallel: its Raft elections run in real time
	q := newQuorumMesh(t, 3, nil)
	leader := q.leader()
	absent := func() (peer.ID, []string) {
		id, _ := p2p.PeerID(identity.GenerateKey().Public().(ed25519.PublicKey))
		addr := "/ip4/127.0.0.1/tcp/" + strconv.Itoa(testkit.Port(t))
		return id, []string{addr, addr + "/p2p/" + id.String()}
	}
	slowID, slow := absent()
	body, sig := q.signedAdd(leader.key, slow[1])
	first := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest("POST", leader.URL()+"/v1/admin/quorum/members", strings.NewReader(body))
		req.Header.Set(identity.SigHeaderName, sig)
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req) // it gives up waiting
		if err == nil {
			resp.Body.Close()
			first <- resp.StatusCode
			return
		}
		first <- 0
	}()
	testkit.Eventually(t, 5*time.Second, func() bool { return len(leader.quorum.Members()) == 4 }, "the first member was not taken in as a nonvoter")
	holds := func(id peer.ID, addr string) bool {
		return slices.ContainsFunc(leader.host.Libp2p().Peerstore().Addrs(id), func(a ma.Multiaddr) bool { return a.String() == addr })
	}
	// The address goes in once AddNonvoter returned, a moment after the
	// configuration that lists the member.
	testkit.Eventually(t, 5*time.Second, func() bool { return holds(slowID, slow[0]) },
		"the peerstore of the leader lacks the address of the member taken in")
	otherID, other := absent()
	body2, sig2 := q.signedAdd(leader.key, other[1])
	st, v := call(t, leader, "POST", "/v1/admin/quorum/members", body2, identity.SigHeaderName, sig2)
	if st != http.StatusConflict || v["code"] != "quorum_change_in_progress" {
		t.Fatalf("a second change meanwhile: %d %v", st, v)
	}
	if holds(otherID, other[0]) {
		t.Fatalf("the refused member's address entered the peerstore")
	}
	<-first
}
