package p2p

import (
	"context"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/agentmesh/mesh/internal/testkit"
)

var quicLoopback = []string{"/ip4/127.0.0.1/tcp/0", "/ip4/127.0.0.1/udp/0/quic-v1"}

// udpPort is the UDP port of multiaddr s, "" for none.
func udpPort(s string) string {
	a, err := ma.NewMultiaddr(s)
	if err != nil {
		return ""
	}
	p, _ := a.ValueForProtocol(ma.P_UDP)
	return p
}

// TestBrowserTransportsShareQUICPort: with Browsers, a host listening on
// QUIC listens on WebTransport and WebRTC-direct on the same UDP port, and
// gives browsers those addresses with their certificate hashes and its
// peer id: WebTransport's (two hashes) first.
func TestBrowserTransportsShareQUICPort(t *testing.T) {
	h := startHost(t, Config{Browsers: true, Listen: quicLoopback})
	var quic string
	for _, a := range h.ListenAddrs() {
		if strings.HasSuffix(a, "/quic-v1") {
			quic = a
		}
	}
	got := h.BrowserAddrs()
	if len(got) != 2 || quic == "" {
		t.Fatalf("browser addresses %v (listening on %v), want one WebTransport and one WebRTC-direct", got, h.ListenAddrs())
	}
	for i, kind := range []string{"/quic-v1/webtransport/certhash/", "/webrtc-direct/certhash/"} {
		if !strings.Contains(got[i], kind) || udpPort(got[i]) != udpPort(quic) || !strings.HasSuffix(got[i], "/p2p/"+h.ID().String()) {
			t.Fatalf("browser address %d %s: want %s on QUIC's port (%s), ending in the peer id", i, got[i], kind, quic)
		}
	}
	if n := strings.Count(got[0], "/certhash/"); n != 2 {
		t.Fatalf("WebTransport address %s has %d certificate hashes, want the current and the next", got[0], n)
	}
	if !slices.Equal(h.RendezvousBrowserAddrs(), []string(nil)) {
		t.Fatalf("a host that is no rendezvous node, without bootstrap peers, names rendezvous addresses %v", h.RendezvousBrowserAddrs())
	}
}

// TestBrowserListenAsGiven: Listen naming a browser address listens on
// exactly those; without Browsers, one is refused and none is derived.
func TestBrowserListenAsGiven(t *testing.T) {
	h := startHost(t, Config{Browsers: true, Listen: append(slices.Clone(quicLoopback), "/ip4/127.0.0.1/udp/0/webrtc-direct")})
	if got := h.BrowserAddrs(); len(got) != 1 || !strings.Contains(got[0], "/webrtc-direct/") {
		t.Fatalf("browser addresses %v, want the WebRTC-direct one asked for alone", got)
	}
	if _, err := New(Config{Key: h.cfg.Key, Listen: []string{"/ip4/127.0.0.1/udp/0/quic-v1/webtransport"}}); err == nil ||
		!strings.Contains(err.Error(), "for browsers") {
		t.Fatalf("a browser address without Browsers: %v, want refused", err)
	}
	off := startHost(t, Config{Listen: quicLoopback})
	if got := off.BrowserAddrs(); len(got) != 0 || slices.ContainsFunc(off.ListenAddrs(), IsBrowserAddr) {
		t.Fatalf("without Browsers: browser addresses %v, listening on %v", got, off.ListenAddrs())
	}
}

// browserAddr is node's browser address of kind (webtransport or
// webrtc-direct) as an AddrInfo.
func browserAddr(t *testing.T, node *Host, kind string) peer.AddrInfo {
	t.Helper()
	for _, s := range node.BrowserAddrs() {
		if strings.Contains(s, "/"+kind+"/") {
			infos, err := ParseAddrs([]string{s})
			if err != nil {
				t.Fatal(err)
			}
			return infos[0]
		}
	}
	t.Fatalf("%s has no %s address: %v", node.ID(), kind, node.BrowserAddrs())
	return peer.AddrInfo{}
}

// dialAs connects a new host to node at info (a go-libp2p dialer of the
// browser transports stands for a page).
func dialAs(t *testing.T, info peer.AddrInfo) (*Host, error) {
	t.Helper()
	h := startHost(t, Config{Browsers: true})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	return h, h.Connect(ctx, info)
}

// TestBrowserPeers: a peer dialling in over WebTransport or WebRTC-direct
// is a browser peer of the node until its last such connection closes,
// which OnBrowserGone tells; a peer on TCP is none.
func TestBrowserPeers(t *testing.T) {
	for _, kind := range []string{"webtransport", "webrtc-direct"} {
		t.Run(kind, func(t *testing.T) {
			node := startHost(t, Config{Browsers: true, Listen: quicLoopback})
			gone := make(chan peer.ID, 4)
			node.OnBrowserGone(func(p peer.ID) { gone <- p })
			page, err := dialAs(t, browserAddr(t, node, kind))
			if err != nil {
				t.Fatalf("dial over %s: %v", kind, err)
			}
			testkit.Eventually(t, 10*time.Second, func() bool { return node.IsBrowser(page.ID()) }, "the node to take the peer for a browser")
			if page.IsBrowser(node.ID()) {
				t.Fatal("the dialler takes the node it dialled for a browser")
			}
			other := startHost(t, Config{})
			connect(t, other, node)
			if node.IsBrowser(other.ID()) {
				t.Fatal("a peer on TCP is taken for a browser")
			}
			page.Close()
			select {
			case p := <-gone:
				if p != page.ID() {
					t.Fatalf("OnBrowserGone told %s, want %s", p, page.ID())
				}
			case <-time.After(10 * time.Second):
				t.Fatal("OnBrowserGone said nothing of the closed peer")
			}
			if node.IsBrowser(page.ID()) {
				t.Fatal("a gone peer is still a browser peer")
			}
		})
	}
}

// TestBrowserConnsLimit: past BrowserLimits.Conns the node refuses browser
// connections, and still takes others.
func TestBrowserConnsLimit(t *testing.T) {
	node := startHost(t, Config{Browsers: true, Listen: quicLoopback, BrowserLimits: BrowserLimits{Conns: 1}})
	info := browserAddr(t, node, "webtransport")
	if _, err := dialAs(t, info); err != nil {
		t.Fatalf("the first browser peer: %v", err)
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return node.browsers.count() == 1 }, "the node to count the browser connection")
	if _, err := dialAs(t, info); err == nil {
		t.Fatal("a second browser connection was taken past the limit of one")
	}
	connect(t, startHost(t, Config{}), node)
}

// TestBrowserPeerStreams: a browser peer may open BrowserLimits.PeerStreams
// / 2 inbound streams at once, where another peer opens more.
func TestBrowserPeerStreams(t *testing.T) {
	const limit = 8
	node := startHost(t, Config{Browsers: true, Listen: quicLoopback, BrowserLimits: BrowserLimits{PeerStreams: 2 * limit}})
	hold := make(chan struct{})
	defer close(hold)
	node.Libp2p().SetStreamHandler("/test/hold", func(s network.Stream) {
		s.Write([]byte{1})
		<-hold
		s.Reset()
	})
	open := func(from *Host) int {
		n := 0
		for range limit + 4 {
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			s, err := from.Libp2p().NewStream(ctx, node.ID(), "/test/hold")
			cancel()
			if err != nil {
				break
			}
			s.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.ReadFull(s, make([]byte, 1)); err != nil {
				break
			}
			n++
		}
		return n
	}
	page, err := dialAs(t, browserAddr(t, node, "webtransport"))
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return node.IsBrowser(page.ID()) }, "a browser peer")
	// Identify holds a stream of the peer's at times: the limit, or one
	// less.
	if got := open(page); got != limit && got != limit-1 {
		t.Fatalf("a browser peer opened %d streams at once, want %d", got, limit)
	}
	other := startHost(t, Config{})
	connect(t, other, node)
	if got := open(other); got != limit+4 {
		t.Fatalf("a peer on TCP opened %d streams, want all %d", got, limit+4)
	}
}

// TestMixAddrs: the rendezvous gives at most 8 addresses of a peer,
// each transport's in turn, so a browser finds those it can dial.
func TestMixAddrs(t *testing.T) {
	var addrs []ma.Multiaddr
	for i := range 4 {
		for _, s := range []string{"/ip4/10.0.0.%d/tcp/1", "/ip4/10.0.0.%d/udp/1/quic-v1", "/ip4/10.0.0.%d/udp/1/quic-v1/webtransport", "/ip4/10.0.0.%d/udp/1/webrtc-direct"} {
			addrs = append(addrs, ma.StringCast(strings.Replace(s, "%d", string(rune('1'+i)), 1)))
		}
	}
	got := mixAddrs(addrs, maxAddrsPerPeer)
	kinds := map[int]int{}
	for _, a := range got {
		for _, code := range []int{ma.P_WEBTRANSPORT, ma.P_WEBRTC_DIRECT, ma.P_QUIC_V1, ma.P_TCP} {
			if _, err := a.ValueForProtocol(code); err == nil {
				kinds[code]++
				break
			}
		}
	}
	if len(got) != maxAddrsPerPeer || kinds[ma.P_WEBTRANSPORT] != 2 || kinds[ma.P_WEBRTC_DIRECT] != 2 {
		t.Fatalf("picked %v (%v by kind), want 8 with two of each", got, kinds)
	}
	if got := mixAddrs(addrs[:3], maxAddrsPerPeer); len(got) != 3 {
		t.Fatalf("picked %v of 3 addresses", got)
	}
}
