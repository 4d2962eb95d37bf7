package p2p

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/connmgr"
	"github.com/libp2p/go-libp2p/core/control"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"
	libp2pwebrtc "github.com/libp2p/go-libp2p/p2p/transport/webrtc"
	webtransport "github.com/libp2p/go-libp2p/p2p/transport/webtransport"
	ma "github.com/multiformats/go-multiaddr"
)

// Browser peers: web pages that dial the node with js-libp2p. A page can
// open neither TCP nor raw QUIC; it has WebTransport (HTTP/3 over QUIC,
// pages on https or localhost) and WebRTC-direct (any page). Both
// authenticate the node by a certificate hash in its address
// (/certhash/…): WebRTC-direct's certificate derives from the host key, so
// its hash is stable; WebTransport's certificates rotate (about every two
// weeks, two hashes advertised), so pages fetch the node's current
// addresses (BrowserAddrs: /health and the cluster pages) instead of
// keeping them.
//
// With Config.Browsers, the node listens on both beside each QUIC address,
// on the same UDP port (WebTransport shares QUIC's listener, WebRTC-direct
// its socket), unless Listen names browser addresses itself. Browser
// connections have limits of their own (BrowserLimits): how many the node
// accepts at once, enforced by a gater, and what each browser peer may
// hold, as the resource manager's limits of that peer.

// BrowserLimits bound what browser peers hold on the node.
type BrowserLimits struct {
	// Conns is how many browser connections (inbound WebTransport and
	// WebRTC-direct) the node holds at once; past it new ones are refused.
	Conns int
	// PeerStreams is how many streams one browser peer may have open at
	// once, both ways together (half of them inbound at most).
	PeerStreams int
	// PeerMemory is how many bytes one browser peer's connections and
	// streams may reserve: at least DefaultBrowserPeerMemory's share a
	// WebRTC-direct connection reserves (MinBrowserPeerMemory).
	PeerMemory int64
}

// Defaults of BrowserLimits. A page needs one connection (two while it
// reconnects) and a few streams: gossipsub's two, identify's, and one for
// each roster or receipt exchange under way.
const (
	DefaultBrowserConns       = 256
	DefaultBrowserPeerStreams = 64
	DefaultBrowserPeerMemory  = 8 << 20
	// MinBrowserPeerMemory is what a WebRTC-direct connection reserves for
	// its receive buffer (10 messages of 257 KiB) and some more: with less,
	// no WebRTC-direct connection is accepted.
	MinBrowserPeerMemory = 4 << 20
	// browserPeerConns is how many connections one browser peer may hold.
	browserPeerConns = 4
)

func (l *BrowserLimits) fill() error {
	if l.Conns == 0 {
		l.Conns = DefaultBrowserConns
	}
	if l.PeerStreams == 0 {
		l.PeerStreams = DefaultBrowserPeerStreams
	}
	if l.PeerMemory == 0 {
		l.PeerMemory = DefaultBrowserPeerMemory
	}
	switch {
	case l.Conns < 0:
		return fmt.Errorf("p2p: browser connections %d: want at least 1", l.Conns)
	case l.PeerStreams < 4:
		return fmt.Errorf("p2p: browser peer streams %d: want at least 4", l.PeerStreams)
	case l.PeerMemory < MinBrowserPeerMemory:
		return fmt.Errorf("p2p: browser peer memory %d: want at least %d bytes", l.PeerMemory, MinBrowserPeerMemory)
	}
	return nil
}

// peerLimit is the resource manager's limit of one browser peer.
func (l BrowserLimits) peerLimit() rcmgr.BaseLimit {
	return rcmgr.BaseLimit{Conns: browserPeerConns, ConnsInbound: browserPeerConns, ConnsOutbound: browserPeerConns,
		FD: browserPeerConns, Streams: l.PeerStreams, StreamsInbound: l.PeerStreams / 2, StreamsOutbound: l.PeerStreams / 2,
		Memory: l.PeerMemory}
}

// isBrowserAddr reports whether a is a WebTransport or WebRTC-direct
// address.
func isBrowserAddr(a ma.Multiaddr) bool {
	for _, c := range a {
		if code := c.Code(); code == ma.P_WEBTRANSPORT || code == ma.P_WEBRTC_DIRECT {
			return true
		}
	}
	return false
}

// IsBrowserAddr reports whether multiaddr s is a WebTransport or
// WebRTC-direct one.
func IsBrowserAddr(s string) bool {
	a, err := ma.NewMultiaddr(s)
	return err == nil && isBrowserAddr(a)
}

// browserOptions are the browser transports, when the node has them.
func (h *Host) browserOptions() []libp2p.Option {
	if !h.cfg.Browsers {
		return nil
	}
	return []libp2p.Option{libp2p.Transport(webtransport.New), libp2p.Transport(libp2pwebrtc.New)}
}

// browserListen is what the node listens on for browsers beside Listen:
// WebTransport and WebRTC-direct on the port of each QUIC address bound,
// unless Listen names a browser address itself (then exactly those).
func (h *Host) browserListen() []ma.Multiaddr {
	if !h.cfg.Browsers || slices.ContainsFunc(h.cfg.Listen, IsBrowserAddr) {
		return nil
	}
	var out []ma.Multiaddr
	for _, a := range h.h.Network().ListenAddresses() {
		if isBrowserAddr(a) {
			continue
		}
		base, last := ma.SplitLast(a)
		if last == nil || last.Code() != ma.P_QUIC_V1 {
			continue
		}
		for _, suffix := range []string{"/quic-v1/webtransport", "/webrtc-direct"} {
			if b, err := ma.NewMultiaddr(base.String() + suffix); err == nil {
				out = append(out, b)
			}
		}
	}
	return out
}

// listenBrowsers starts listening for browsers (browserListen).
func (h *Host) listenBrowsers() error {
	addrs := h.browserListen()
	if len(addrs) == 0 {
		return nil
	}
	if err := h.h.Network().Listen(addrs...); err != nil {
		return fmt.Errorf("p2p: listen for browsers on %v: %w", addrs, err)
	}
	return nil
}

// BrowserAddrs are the node's addresses a browser can dial, each with its
// current certificate hashes and ending in /p2p/<peer id>: WebTransport's
// first, then WebRTC-direct's. Empty without browser transports.
func (h *Host) BrowserAddrs() []string { return browserAddrsOf(h.h.ID(), h.h.Addrs()) }

// RendezvousBrowserAddrs are the browser addresses of the rendezvous
// nodes, where a page registers the topics it serves: this node's if it is
// one, then those the bootstrap peers announced.
func (h *Host) RendezvousBrowserAddrs() []string {
	var out []string
	if h.rendezvous != nil {
		out = h.BrowserAddrs()
	}
	for _, b := range h.otherBootstrapPeers() {
		out = append(out, browserAddrsOf(b.ID, h.h.Peerstore().Addrs(b.ID))...)
	}
	return out
}

// browserAddrsOf are the addresses of addrs a browser can dial (with a
// certificate hash), as full addresses of peer id: WebTransport's first.
func browserAddrsOf(id peer.ID, addrs []ma.Multiaddr) []string {
	var wt, rtc []string
	for _, a := range addrs {
		if _, err := a.ValueForProtocol(ma.P_CERTHASH); err != nil {
			continue
		}
		s := a.String() + "/p2p/" + id.String()
		if _, err := a.ValueForProtocol(ma.P_WEBTRANSPORT); err == nil {
			wt = append(wt, s)
		} else if _, err := a.ValueForProtocol(ma.P_WEBRTC_DIRECT); err == nil {
			rtc = append(rtc, s)
		}
	}
	slices.Sort(wt)
	slices.Sort(rtc)
	return append(wt, rtc...)
}

// IsBrowser reports whether p is connected as a browser peer: over an
// inbound WebTransport or WebRTC-direct connection.
func (h *Host) IsBrowser(p peer.ID) bool { return h.browsers.has(p) }

// browserPeers tracks the browser connections: how many are open, and
// which peers hold them. It gates new ones (Config.BrowserLimits.Conns)
// and tells the resource manager which peers get a browser's limits.
type browserPeers struct {
	max   int
	inner connmgr.ConnectionGater // the configured gater, if any

	mu    sync.Mutex
	conns int             // open browser connections
	peers map[peer.ID]int // open browser connections, by peer
	// secured are the peers whose browser connection was secured (its
	// handshake done) lately, by when: marked before the resource manager
	// scopes the peer, for handshakeWindow (a connection that fails
	// after its handshake says nothing).
	secured map[peer.ID]time.Time
}

// handshakeWindow is how long a peer counts as a browser peer after the
// handshake of its browser connection, connected or not: the connection
// is set up well within it.
const handshakeWindow = time.Minute

func newBrowserPeers(max int, inner connmgr.ConnectionGater) *browserPeers {
	return &browserPeers{max: max, inner: inner, peers: map[peer.ID]int{}, secured: map[peer.ID]time.Time{}}
}

func (b *browserPeers) has(p peer.ID) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	at, ok := b.secured[p]
	return b.peers[p] > 0 || ok && time.Since(at) < handshakeWindow
}

// count reports the open browser connections.
func (b *browserPeers) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.conns
}

var _ connmgr.ConnectionGater = (*browserPeers)(nil)

func (b *browserPeers) InterceptPeerDial(p peer.ID) bool {
	return b.inner == nil || b.inner.InterceptPeerDial(p)
}

func (b *browserPeers) InterceptAddrDial(p peer.ID, a ma.Multiaddr) bool {
	return b.inner == nil || b.inner.InterceptAddrDial(p, a)
}

// InterceptAccept refuses a browser connection past the limit (those
// being set up are not counted: WebRTC-direct sets up at most 128 at
// once, WebTransport as many as QUIC handshakes).
func (b *browserPeers) InterceptAccept(c network.ConnMultiaddrs) bool {
	if isBrowserAddr(c.LocalMultiaddr()) {
		b.mu.Lock()
		full := b.conns >= b.max
		b.mu.Unlock()
		if full {
			return false
		}
	}
	return b.inner == nil || b.inner.InterceptAccept(c)
}

// InterceptSecured marks the peer of an inbound browser connection before
// the resource manager scopes it (the transports ask the gater first).
func (b *browserPeers) InterceptSecured(d network.Direction, p peer.ID, c network.ConnMultiaddrs) bool {
	if b.inner != nil && !b.inner.InterceptSecured(d, p, c) {
		return false
	}
	if d == network.DirInbound && isBrowserAddr(c.LocalMultiaddr()) {
		now := time.Now()
		b.mu.Lock()
		for q, at := range b.secured {
			if now.Sub(at) >= handshakeWindow {
				delete(b.secured, q)
			}
		}
		b.secured[p] = now
		b.mu.Unlock()
	}
	return true
}

func (b *browserPeers) InterceptUpgraded(c network.Conn) (bool, control.DisconnectReason) {
	if b.inner == nil {
		return true, 0
	}
	return b.inner.InterceptUpgraded(c)
}

// browserConn reports whether c is an inbound browser connection.
func browserConn(c network.Conn) bool {
	return c.Stat().Direction == network.DirInbound && isBrowserAddr(c.LocalMultiaddr())
}

// connected and disconnected follow the browser connections (a
// network.Notifiee's).
func (b *browserPeers) connected(c network.Conn) {
	if !browserConn(c) {
		return
	}
	p := c.RemotePeer()
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.secured, p)
	b.peers[p]++
	b.conns++
}

// disconnected reports whether c was its peer's last browser connection.
func (b *browserPeers) disconnected(c network.Conn) (gone bool) {
	if !browserConn(c) {
		return false
	}
	p := c.RemotePeer()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.peers[p] == 0 {
		return false // connected before the host watched its connections
	}
	b.conns--
	if b.peers[p]--; b.peers[p] > 0 {
		return false
	}
	delete(b.peers, p)
	return true
}

// OnBrowserGone registers fn to learn (it must not block) of every browser
// peer whose last browser connection closed: a page that stopped, or lost
// its way to the node.
func (h *Host) OnBrowserGone(fn func(peer.ID)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.onBrowserGone = append(h.onBrowserGone, fn)
}

func (h *Host) browserDisconnected(c network.Conn) {
	if !h.browsers.disconnected(c) {
		return
	}
	h.mu.Lock()
	fns := slices.Clone(h.onBrowserGone)
	h.mu.Unlock()
	for _, fn := range fns {
		fn(c.RemotePeer())
	}
}

// browserLimiter gives browser peers the limits of BrowserLimits, every
// other peer the limiter's own.
type browserLimiter struct {
	rcmgr.Limiter
	browsers *browserPeers
	peer     rcmgr.BaseLimit
}

func (l browserLimiter) GetPeerLimits(p peer.ID) rcmgr.Limit {
	if l.browsers.has(p) {
		return l.peer
	}
	return l.Limiter.GetPeerLimits(p)
}
