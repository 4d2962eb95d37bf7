package wall

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/agentmesh/mesh/internal/testkit"
	"github.com/agentmesh/mesh/p2p"
)

// A browser peer, in these tests, is a node's wall on a host that dialled
// the rendezvous node over WebTransport (go-libp2p's dialer stands for a
// page's): to that node it is a browser peer (p2p.Host.IsBrowser).

// newBrowserBoot is a rendezvous node that listens for browsers, whose
// members a silent node takes offline only after a minute: sooner is the
// browser peers' doing.
func newBrowserBoot(t *testing.T) *harness {
	t.Helper()
	return newHarnessOn(t, p2p.Config{Rendezvous: true, Browsers: true,
		Listen: []string{"/ip4/127.0.0.1/tcp/0", "/ip4/127.0.0.1/udp/0/quic-v1"}},
		func(c *Config) { c.PresenceTimeout = time.Minute })
}

// joinAsBrowser is a harness whose host reaches boot over WebTransport
// alone.
func joinAsBrowser(t *testing.T, boot *harness) *harness {
	t.Helper()
	var wt string
	for _, a := range boot.host.BrowserAddrs() {
		if strings.Contains(a, "/webtransport/") {
			wt = a
		}
	}
	infos, err := p2p.ParseAddrs([]string{wt})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarnessOn(t, p2p.Config{Browsers: true, Bootstrap: infos}, nil)
	testkit.Eventually(t, 10*time.Second, func() bool { return boot.host.IsBrowser(h.host.ID()) }, "the node never took the peer for a browser")
	return h
}

// TestBrowserPeerGoneIsAGoodbye: a browser peer whose connection closes
// without a goodbye (its tab closed) has its members taken offline by the
// node at once, not when it would have gone silent.
func TestBrowserPeerGoneIsAGoodbye(t *testing.T) {
	t.Parallel()
	boot := newBrowserBoot(t)
	page := joinAsBrowser(t, boot)
	alice := boot.dial(LobbyID, vals("agent", "alice")).listen()
	alice.next(KindWelcome)
	carol := page.dial(LobbyID, vals("agent", "carol")).listen()
	carol.next(KindWelcome)
	if f := alice.next(KindPresence); f["agent"] != "carol" || f["status"] != "online" {
		t.Fatalf("alice got %v, want carol online", f)
	}
	page.host.Close() // no goodbye: the wall on it is not closed
	if f := alice.next(KindPresence); f["agent"] != "carol" || f["status"] != "offline" {
		t.Fatalf("alice got %v, want carol offline", f)
	}
}

// TestBrowserPeerHoldsARoom: a node that does not serve a public cluster,
// asked by a browser peer to exchange rosters for it, serves it while the
// peer stays connected; a private cluster, whose token it lacks, and a
// peer that is no browser peer get no room.
func TestBrowserPeerHoldsARoom(t *testing.T) {
	t.Parallel()
	boot := newBrowserBoot(t)
	page := joinAsBrowser(t, boot)
	other := joinHarness(t, boot, nil)
	pub := LobbyID // in every node's catalog
	priv := boot.create(`{"name":"secret"}`)["cluster_id"].(string)
	ask := func(from *harness, id string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := from.svc.askRoster(ctx, boot.host.ID(), id, nil, roster{Epoch: 1}, false)
		return err
	}
	if err := ask(other, pub); err != errNotServing || boot.svc.room(pub) != nil {
		t.Fatalf("a node's exchange: %v, room %v; want not serving and no room", err, boot.svc.room(pub))
	}
	if err := ask(page, priv); err != errNotServing || boot.svc.room(priv) != nil {
		t.Fatalf("a browser's exchange for a private cluster: %v; want not serving and no room", err)
	}
	// The page registers first, as it does before it asks: the node
	// exchanges only with a peer the rendezvous vouches for.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := page.host.Rendezvous(ctx, topicName(pub), true); err != nil {
		t.Fatal(err)
	}
	if err := ask(page, pub); err != nil {
		t.Fatalf("a browser's exchange: %v", err)
	}
	r := boot.svc.room(pub)
	if r == nil || !r.known(page.host.ID()) {
		t.Fatalf("room %v: want one that knows the browser peer", r)
	}
	page.host.Close()
	testkit.Eventually(t, 10*time.Second, func() bool { return boot.svc.room(pub) == nil }, "the room outlived the browser peer it was held for")
}

// TestBrowserPeerHolds bounds the rooms one browser peer may hold.
func TestBrowserPeerHolds(t *testing.T) {
	t.Parallel()
	boot := newBrowserBoot(t)
	page := joinAsBrowser(t, boot)
	for i := range maxHolds + 1 {
		id := boot.create(`{"visibility":"public"}`)["cluster_id"].(string)
		held := boot.svc.hold(id, page.host.ID())
		if (held != nil) != (i < maxHolds) {
			t.Fatalf("hold %d of at most %d: %v", i+1, maxHolds, held)
		}
	}
	if n := boot.svc.holdsOf(page.host.ID(), ""); n != maxHolds {
		t.Fatalf("%d rooms held, want %d", n, maxHolds)
	}
	var none peer.ID
	if boot.svc.holdsOf(none, "") != 0 {
		t.Fatal("rooms held for nobody")
	}
}
