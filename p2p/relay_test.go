package p2p

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/client"
	pbv2 "github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/pb"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/testkit"
	"github.com/agentmesh/mesh/p2p/p2ptest"
)

// TestRelayedPeersFindEachOtherAndGossip: two nodes behind NATs that refuse
// direct connections between them find each other through provider
// records, connect through the bootstrap's relay, and exchange gossip and
// requests over that connection.
func TestRelayedPeersFindEachOtherAndGossip(t *testing.T) {
	t.Parallel()
	relay := startHost(t, Config{DHTServer: true, RelayService: true, Rendezvous: true, Reachability: ReachPublic})
	boot := []peer.AddrInfo{addrInfo(relay)}
	keyA, keyB := identity.GenerateKey(), identity.GenerateKey()
	idA, idB := mustPeerID(t, keyA), mustPeerID(t, keyB)
	a := startHost(t, Config{Key: keyA, Bootstrap: boot, Reachability: ReachPrivate, Gater: p2ptest.NewNAT(idB)})
	b := startHost(t, Config{Key: keyB, Bootstrap: boot, Reachability: ReachPrivate, Gater: p2ptest.NewNAT(idA)})

	for _, h := range []*Host{a, b} {
		testkit.Eventually(t, 10*time.Second, func() bool { return h.Connected(relay.ID()) }, "connected to the relay")
	}
	var inbox inbox
	ta, err := a.Join("chat", TopicConfig{Deliver: inbox.deliver})
	if err != nil {
		t.Fatal(err)
	}
	tb, err := b.Join("chat", TopicConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if found, err := a.Rendezvous(ctx, "chat", true); err != nil || len(found) != 0 {
		t.Fatalf("first registration: %v, %v", found, err)
	}
	found, err := b.Rendezvous(ctx, "chat", true)
	if err != nil || len(found) != 1 || found[0].ID != a.ID() {
		t.Fatalf("Rendezvous = %v, %v; want A", found, err)
	}
	// A's reservation on the relay may still be on its way.
	testkit.Eventually(t, 20*time.Second, func() bool {
		return b.Connect(ctx, found[0]) == nil
	}, "a connection through the relay")

	for _, c := range b.Libp2p().Network().ConnsToPeer(a.ID()) {
		if !p2ptest.IsRelayed(c.RemoteMultiaddr()) || c.Stat().Limited {
			t.Fatalf("connection %s (limited %v): want an unlimited relayed one", c.RemoteMultiaddr(), c.Stat().Limited)
		}
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return slices.Contains(tb.Peers(), a.ID()) }, "B sees A on the topic")
	publish(t, tb, "through the relay")
	testkit.Eventually(t, 10*time.Second, func() bool { return inbox.has("through the relay") }, "gossip over the relayed connection")
	_ = ta

	a.HandleRequests("/mesh/test/echo", 1024, func(_ context.Context, _ peer.ID, req []byte) ([]byte, error) { return req, nil })
	resp, err := b.Request(ctx, a.ID(), "/mesh/test/echo", []byte("ping"), 1024)
	if err != nil || string(resp) != "ping" {
		t.Fatalf("request over the relay: %q, %v", resp, err)
	}
}

// TestRelayOnlyForMembers: the bootstrap's relay grants reservations to
// mesh nodes and refuses a libp2p peer that is not one.
func TestRelayOnlyForMembers(t *testing.T) {
	t.Parallel()
	relay := startHost(t, Config{RelayService: true, Reachability: ReachPublic})
	member := startHost(t, Config{})
	outsider, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"))
	if err != nil {
		t.Fatal(err)
	}
	defer outsider.Close()
	reserve := func(h host.Host) error {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		_, err := client.Reserve(ctx, h, addrInfo(relay))
		return err
	}
	// The relay service starts once the host knows it is public.
	testkit.Eventually(t, 10*time.Second, func() bool { return reserve(member.Libp2p()) == nil }, "a reservation for a member")
	err = reserve(outsider)
	var refused client.ReservationError
	if !errors.As(err, &refused) || refused.Status != pbv2.Status_PERMISSION_DENIED {
		t.Fatalf("reservation for an outsider: %v, want permission denied", err)
	}
}

// TestRelayLimitsAgree: the resource manager admits as many connections
// from one address as the relay admits peers behind it.
func TestRelayLimitsAgree(t *testing.T) {
	ipv4, ipv6 := connLimitsPerSubnet()
	rc := relayResources()
	if ipv4[0].PrefixLength != 32 || ipv4[0].ConnCount < rc.MaxReservationsPerIP || ipv6[0].ConnCount < rc.MaxReservationsPerIP {
		t.Fatalf("connections per address %+v %+v, reservations per IP %d", ipv4, ipv6, rc.MaxReservationsPerIP)
	}
	if rc.Limit != nil {
		t.Fatal("a limited relay carries no gossip")
	}
}

func TestRendezvousRegistry(t *testing.T) {
	r := newRegistry()
	now := time.Now()
	reg := func(p peer.ID, at time.Time) []peer.ID {
		return r.others(p, rendezvousRequest{NS: "t", Register: true}, at)
	}
	if got := reg("a", now); len(got) != 0 {
		t.Fatalf("first registrant sees %v", got)
	}
	if got := reg("b", now); !slices.Equal(got, []peer.ID{"a"}) {
		t.Fatalf("b sees %v, want [a]", got)
	}
	// A lookup does not register; a renewal keeps a alive past b's expiry.
	if got := r.others("c", rendezvousRequest{NS: "t"}, now); len(got) != 2 {
		t.Fatalf("lookup sees %v", got)
	}
	reg("a", now.Add(RendezvousTTL/2))
	if got := r.others("c", rendezvousRequest{NS: "t"}, now.Add(RendezvousTTL+time.Second)); !slices.Equal(got, []peer.ID{"a"}) {
		t.Fatalf("after b's registration lapsed: %v", got)
	}
	// b lapsed and a withdrew: neither is found, both served lately.
	end := now.Add(RendezvousTTL + 2*time.Second)
	r.others("a", rendezvousRequest{NS: "t", Unregister: true}, end)
	if got := r.others("c", rendezvousRequest{NS: "t"}, end); len(got) != 0 {
		t.Fatalf("after a withdrew: %v", got)
	}
	if !r.served("t", "a", end) || !r.served("t", "b", end) || r.served("t", "c", end) {
		t.Fatal("served: want a and b (lately), not c (never)")
	}
	later := end.Add(servedGrace + time.Second)
	if r.served("t", "a", later) || r.served("t", "b", later) {
		t.Fatal("served long after the registrations ended")
	}
	r.others("c", rendezvousRequest{NS: "t"}, later)
	if len(r.reg) != 0 {
		t.Fatalf("empty namespaces are dropped: %v", r.reg)
	}
}

// TestRendezvousCapCountsLiveRegistrations: a namespace full of
// registrations that ended (in their grace period) still takes a new
// live one, in place of the one that ended first; a namespace full of live
// ones takes no more.
func TestRendezvousCapCountsLiveRegistrations(t *testing.T) {
	r := newRegistry()
	now := time.Now()
	for i := range maxRendezvousPeers {
		r.others(peer.ID(fmt.Sprint("old-", i)), rendezvousRequest{NS: "t", Register: true}, now.Add(time.Duration(i)*time.Millisecond))
	}
	later := now.Add(RendezvousTTL + 2*time.Second) // all ended, all in their grace period
	if got := r.others("new", rendezvousRequest{NS: "t", Register: true}, later); len(got) != 0 {
		t.Fatalf("ended registrations returned: %d", len(got))
	}
	if got := r.others("c", rendezvousRequest{NS: "t"}, later); !slices.Equal(got, []peer.ID{"new"}) {
		t.Fatalf("a live registration refused while the namespace held only ended ones: %v", got)
	}
	if r.served("t", "old-0", later) || !r.served("t", "old-1", later) {
		t.Fatal("want the registration that ended first forgotten, the others kept")
	}
	for i := range maxRendezvousPeers {
		r.others(peer.ID(fmt.Sprint("live-", i)), rendezvousRequest{NS: "t", Register: true}, later)
	}
	if got := r.others("c", rendezvousRequest{NS: "t"}, later); len(got) != maxRendezvousPeers {
		t.Fatalf("%d live registrations, want %d", len(got), maxRendezvousPeers)
	}
}

// TestRendezvousSweep: namespaces whose registrations all ended long ago
// are dropped even when nobody asks about them again.
func TestRendezvousSweep(t *testing.T) {
	r := newRegistry()
	now := time.Now()
	for i := range 5 {
		ns := fmt.Sprint("t", i)
		r.others("a", rendezvousRequest{NS: ns, Register: true}, now)
		r.others("a", rendezvousRequest{NS: ns, Unregister: true}, now)
	}
	r.others("b", rendezvousRequest{NS: "live", Register: true}, now.Add(servedGrace))
	r.sweep(now.Add(servedGrace + time.Second))
	if len(r.reg) != 1 || r.reg["live"] == nil {
		t.Fatalf("after the sweep: %v, want only the live namespace", r.reg)
	}
}

// TestRendezvousBoundsEachPeerAndAll: one peer keeps at most
// maxRendezvousPerPeer registrations, all peers together
// maxRendezvousEntries; renewals are always kept, and a registration
// forgotten frees its place; a new registration is fresh, a renewal not.
func TestRendezvousBoundsEachPeerAndAll(t *testing.T) {
	r := newRegistry()
	now := time.Now()
	register := func(p peer.ID, ns string, at time.Time) bool {
		_, fresh := r.apply(p, rendezvousRequest{NS: ns, Register: true}, at)
		return fresh
	}
	for i := range maxRendezvousPerPeer {
		if !register("greedy", fmt.Sprint("ns-", i), now) {
			t.Fatalf("registration %d is not fresh", i)
		}
	}
	if register("greedy", "one-more", now) || r.served("one-more", "greedy", now) {
		t.Fatal("a peer holds more than maxRendezvousPerPeer registrations")
	}
	if register("greedy", "ns-0", now.Add(time.Second)) || !r.served("ns-0", "greedy", now) {
		t.Fatal("a renewal was refused, or taken for a new registration")
	}
	if !register("modest", "one-more", now) {
		t.Fatal("another peer was refused")
	}
	for p := 0; r.total < maxRendezvousEntries; p++ {
		for i := range maxRendezvousPerPeer {
			register(peer.ID(fmt.Sprint("filler-", p)), fmt.Sprint("f-", i), now)
		}
	}
	if register("late", "x", now) {
		t.Fatal("a registration past maxRendezvousEntries was kept")
	}
	r.sweep(now.Add(RendezvousTTL + servedGrace + 2*time.Second))
	if r.total != 0 || len(r.perPeer) != 0 || len(r.reg) != 0 {
		t.Fatalf("after every registration ended: %d kept, %d peers counted, %d namespaces", r.total, len(r.perPeer), len(r.reg))
	}
	if !register("late", "x", now.Add(RendezvousTTL+servedGrace+3*time.Second)) {
		t.Fatal("a registration refused once the others were forgotten")
	}
}

// others is apply without its fresh flag.
func (r *registry) others(from peer.ID, q rendezvousRequest, now time.Time) []peer.ID {
	o, _ := r.apply(from, q, now)
	return o
}
