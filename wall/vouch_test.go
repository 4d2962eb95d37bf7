package wall

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/agentmesh/mesh/internal/testkit"
	"github.com/agentmesh/mesh/p2p"
)

// TestRosterExchangeNeedsARegistration: in a public cluster, a peer that
// is not registered at the rendezvous does not become a known node, on the
// rendezvous node or on a node that looks it up there, whether it asks for
// a roster exchange or is heard on the topic and answers the roster fetch
// that follows: acks do not wait for its receipt, and its view holds none
// of the members it claims. Nodes that register before they ask, as rooms
// do, still sync at once.
func TestRosterExchangeNeedsARegistration(t *testing.T) {
	t.Parallel()
	// An ack waiting for a receipt that never comes would take a minute.
	tweak := func(c *Config) { c.AckWindow = time.Minute }
	boot := newHarness(t, tweak)
	a := joinHarness(t, boot, tweak)
	ann := a.dial(LobbyID, vals("agent", "ann")).listen()
	ann.next(KindWelcome)
	rita := boot.dial(LobbyID, vals("agent", "rita")).listen()
	if w := rita.next(KindWelcome); !slices.Contains(toStrings(w["online"]), "ann") {
		t.Fatalf("the rendezvous node's room did not sync with a's: %v", w)
	}
	nodes := []*harness{boot, a}

	ctx := context.Background()
	mallory := rawPeer(t, boot)
	if err := mallory.Connect(ctx, peer.AddrInfo{ID: a.host.ID(), Addrs: a.host.Libp2p().Addrs()}); err != nil {
		t.Fatal(err)
	}
	claim := roster{Epoch: 1, Rev: 1, Members: []member{{Agent: "mallory", Vis: VisPublic}}}
	var answered []string
	for _, h := range nodes {
		req := encodeWire(nil, "", rosterRequest{Cluster: LobbyID, Body: encodeWire(nil, sealRosterReq, claim)})
		if _, err := mallory.Request(ctx, h.host.ID(), rosterProto, req, maxRosterResp); err == nil {
			answered = append(answered, h.host.ID().String())
		}
	}
	// Heard on the topic, mallory has its roster fetched, and answers it.
	mallory.HandleRequests(rosterProto, maxRosterReq, func(context.Context, peer.ID, []byte) ([]byte, error) {
		return encodeWire(nil, sealRosterResp, claim), nil
	})
	topic, err := mallory.Join(topicName(LobbyID), p2p.TopicConfig{})
	if err != nil {
		t.Fatal(err)
	}
	beat := encodeWire(nil, sealTopic, wireMsg{T: wireBeat, Epoch: claim.Epoch, Rev: claim.Rev, Digest: digest{}.String()})
	view := func(h *harness) (n remoteNode, ok bool) {
		r := h.svc.room(LobbyID)
		r.mu.Lock()
		defer r.mu.Unlock()
		if v := r.remote[mallory.ID()]; v != nil {
			return *v, true
		}
		return remoteNode{}, false
	}
	for _, h := range nodes {
		testkit.Eventually(t, 10*time.Second, func() bool {
			topic.Publish(ctx, beat)
			n, ok := view(h)
			return ok && !n.fetching
		}, "mallory's beats never had its roster fetched")
	}

	b := joinHarness(t, boot, tweak)
	bob := b.dial(LobbyID, vals("agent", "bob")).listen()
	if w := bob.next(KindWelcome); !slices.Contains(toStrings(w["online"]), "ann") || !slices.Contains(toStrings(w["online"]), "rita") {
		t.Fatalf("a node that registered did not sync at once: %v", w)
	}
	ann.send("hi")
	for _, c := range []*client{rita, bob} {
		if f := c.next(KindMessage); f["payload"] != "hi" {
			t.Fatalf("got %v", f)
		}
	}
	if f := ann.next(KindAck); f["delivered"] != 2.0 {
		t.Fatalf("ack: %v", f)
	}

	if len(answered) > 0 {
		t.Errorf("nodes %v answered an exchange with a peer registered nowhere", answered)
	}
	for _, h := range nodes {
		if n, _ := view(h); n.known || len(n.members) != 0 {
			t.Errorf("node %s: mallory known %v, its members %v", h.host.ID(), n.known, n.members)
		}
		if !h.svc.room(LobbyID).known(b.host.ID()) {
			t.Errorf("node %s does not know the node that registered", h.host.ID())
		}
	}
}

// TestRosterRequestReflected: in a private cluster, a peer without the
// token registers at the rendezvous, so a starting room asks it for its
// roster, and sends the room's own sealed request back to it (issue 26:
// the node then took it for a node serving the cluster, and its acks
// waited for its receipts). The request is bound to its asker and the
// node asked: reflected, or replayed to the node, it does not open, and
// the peer stays unknown.
func TestRosterRequestReflected(t *testing.T) {
	t.Parallel()
	boot := newHarness(t, func(c *Config) { c.AckWindow = time.Minute })
	cl := boot.create(`{"visibility":"private"}`)
	id, tok := cl["cluster_id"].(string), cl["token"].(string)
	ctx := context.Background()
	mallory := rawPeer(t, boot)
	captured := make(chan []byte, 1)
	mallory.HandleRequests(rosterProto, maxRosterReq, func(_ context.Context, _ peer.ID, req []byte) ([]byte, error) {
		var q rosterRequest
		if json.Unmarshal(req, &q) == nil && !q.Peek { // the node peeks first, checking the handle
			select {
			case captured <- req:
			default:
			}
		}
		return []byte{}, nil
	})
	ns := privatePrefix + id
	if _, err := mallory.Rendezvous(ctx, ns, true); err != nil {
		t.Fatal(err)
	}
	alice := boot.dial(id, vals("agent", "alice", "token", tok)).listen()
	alice.next(KindWelcome)
	var req []byte
	select {
	case req = <-captured:
	case <-time.After(10 * time.Second):
		t.Fatal("the starting room never asked the peer registered at the rendezvous")
	}
	var q rosterRequest
	if err := json.Unmarshal(req, &q); err != nil || q.Peek || q.Challenge == "" {
		t.Fatalf("captured request %s (%v)", req, err)
	}
	if _, err := mallory.Request(ctx, boot.host.ID(), rosterProto, req, maxRosterResp); err == nil {
		t.Error("the node answered its own roster request, sent back to it")
	}
	if boot.svc.room(id).known(mallory.ID()) {
		t.Error("the peer without the token became a known node")
	}
	alice.send("anyone?")
	if a := alice.next(KindAck); a["delivered"] != 0.0 {
		t.Fatalf("ack: %v", a)
	}
}
