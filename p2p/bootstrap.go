package p2p

import (
	"context"
	"crypto/ed25519"
	"math/rand/v2"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	"github.com/libp2p/go-libp2p/p2p/net/swarm"
)

// Backoff bounds for dialling bootstrap peers; how long one dial may
// take; how often a bootstrap peer that stays out of reach is warned
// about again.
const (
	minBackoff   = 500 * time.Millisecond
	maxBackoff   = 30 * time.Second
	dialTimeout  = 8 * time.Second
	warnEvery    = time.Minute
	bootstrapTag = "mesh-bootstrap"
)

// keepBootstrapped keeps a connection to every bootstrap peer: one loop per
// peer dials with exponential backoff and jitter until connected, then waits
// for a disconnect and starts again, so a restarted bootstrap node is
// rejoined as soon as it is back.
func (h *Host) keepBootstrapped(ctx context.Context) {
	for _, p := range h.otherBootstrapPeers() {
		h.h.Peerstore().AddAddrs(p.ID, p.Addrs, peerstore.PermanentAddrTTL)
		h.h.ConnManager().Protect(p.ID, bootstrapTag)
		h.goroutine(func() { h.keepConnected(ctx, p) })
	}
}

func (h *Host) keepConnected(ctx context.Context, p peer.AddrInfo) {
	disc := make(chan struct{}, 1)
	notifee := &network.NotifyBundle{DisconnectedF: func(_ network.Network, c network.Conn) {
		if c.RemotePeer() == p.ID {
			select {
			case disc <- struct{}{}:
			default:
			}
		}
	}}
	h.h.Network().Notify(notifee)
	defer h.h.Network().StopNotify(notifee)

	backoff := minBackoff
	var failing time.Time // since when the dials fail; zero while they do not
	var warned time.Time
	for ctx.Err() == nil {
		if h.Connected(p.ID) {
			backoff = minBackoff
			select {
			case <-ctx.Done():
				return
			case <-disc:
			case <-time.After(10 * time.Second): // belt and braces
			}
			continue
		}
		// The swarm backs off an address after a failed dial, longer after
		// each; this loop has its own backoff, and a bootstrap node that
		// comes back must be rejoined at the next try, not minutes later.
		if sw, ok := h.h.Network().(*swarm.Swarm); ok {
			sw.Backoff().Clear(p.ID)
		}
		dctx, cancel := context.WithTimeout(ctx, dialTimeout)
		err := h.h.Connect(dctx, p)
		cancel()
		if err == nil {
			if !failing.IsZero() {
				h.cfg.Logger.Info("reached the bootstrap peer", "peer", p.ID, "after", time.Since(failing).Round(time.Second))
			}
			failing, warned = time.Time{}, time.Time{}
			h.cfg.Logger.Debug("connected to bootstrap peer", "peer", p.ID)
			continue
		}
		if failing.IsZero() {
			failing = time.Now()
		}
		// The operator hears of it at once, then every warnEvery while it
		// lasts: a wrong --bootstrap address leaves the node without the
		// directory (writes answer 503), which nothing else would say.
		if time.Since(warned) >= warnEvery {
			warned = time.Now()
			h.cfg.Logger.Warn("cannot reach the bootstrap peer; trying again", "addrs", p.Addrs, "peer", p.ID,
				"failing_for", time.Since(failing).Round(time.Second), "err", err)
		}
		h.cfg.Logger.Debug("bootstrap dial failed", "peer", p.ID, "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff + rand.N(backoff/2)):
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// otherBootstrapPeers are the configured bootstrap peers other than this node.
func (h *Host) otherBootstrapPeers() []peer.AddrInfo {
	self, _ := PeerID(h.cfg.Key.Public().(ed25519.PublicKey))
	var out []peer.AddrInfo
	for _, p := range h.cfg.Bootstrap {
		if p.ID != self {
			out = append(out, p)
		}
	}
	return out
}

// IsBootstrap reports whether p is one of the configured bootstrap peers.
func (h *Host) IsBootstrap(p peer.ID) bool {
	for _, b := range h.cfg.Bootstrap {
		if b.ID == p {
			return true
		}
	}
	return false
}
