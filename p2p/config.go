package p2p

import (
	"crypto/ed25519"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ipfs/go-datastore"
	dht "github.com/libp2p/go-libp2p-kad-dht"
	record "github.com/libp2p/go-libp2p-record"
	"github.com/libp2p/go-libp2p/core/connmgr"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"
)

// ProtocolPrefix namespaces every protocol of the product, so that the mesh
// is a network of its own and never joins the public IPFS DHT.
const ProtocolPrefix = "/mesh"

// Config configures a Host.
type Config struct {
	// Key is the node's identity; its peer ID is derived from it.
	Key ed25519.PrivateKey
	// Listen are the multiaddrs to listen on.
	Listen []string
	// Bootstrap are peers to stay connected to; they are dialled with
	// backoff until connected and re-dialled when the connection drops.
	Bootstrap []peer.AddrInfo
	// DHTServer forces the node to answer DHT queries for others. Without
	// it the node serves when Reachability is ReachPublic, is a client when
	// it is ReachPrivate, and otherwise serves while AutoNAT finds it
	// publicly reachable (see dhtMode).
	DHTServer bool
	// RelayService runs a circuit relay v2 for the mesh (bootstrap nodes),
	// with limits fit for chat (see relayResources). It needs public
	// reachability, which a relay node must have.
	RelayService bool
	// Rendezvous serves the rendezvous protocol (bootstrap nodes): nodes
	// register the topics they serve and learn who else does.
	Rendezvous bool
	// Reachability overrides what AutoNAT would find out: ReachPublic,
	// ReachPrivate, or "" to detect it. A private node reserves slots on
	// the Bootstrap peers' relays and advertises circuit addresses; hole
	// punching upgrades its relayed connections where the NATs allow.
	Reachability string
	// Browsers lets web pages dial the node: it listens on WebTransport and
	// WebRTC-direct beside each QUIC address, on the same UDP port, unless
	// Listen names browser addresses itself (browser.go). Without it,
	// Listen must name none.
	Browsers bool
	// BrowserLimits bound the browser connections and what each browser
	// peer holds; zero fields take the defaults (DefaultBrowserConns…).
	BrowserLimits BrowserLimits
	// Gater, if set, vets every connection (tests use it to make direct
	// dials between two nodes impossible, as behind NATs).
	Gater connmgr.ConnectionGater
	// Validators check DHT records, by namespace: a key "/<ns>/..." is
	// checked by Validators[ns]. Keys of other namespaces are refused.
	Validators map[string]record.Validator
	// Values is where the node keeps the DHT values it holds (its own and,
	// as a DHT server, those put to it), compressed; nil keeps them in
	// memory. The host does not close it.
	Values datastore.Batching
	// OnDHTServer, if set, is called (it must not block) whenever a peer
	// that answers DHT queries connects and enters the routing table: a
	// record publisher may want to hand it the records it is now among the
	// closest peers for.
	OnDHTServer func(peer.ID)
	// ConnLow and ConnHigh are the connection manager's watermarks.
	ConnLow, ConnHigh int
	// GossipQueueBytes bounds, per peer, the gossip accepted for it and
	// not yet written (queued, or being written): past it the peer's
	// oldest published messages are dropped and counted (see outbound.go);
	// subscriptions and control messages are always kept. 0 means
	// DefaultGossipQueueBytes; the least is MinGossipQueueBytes.
	GossipQueueBytes int
	// FlushTimeout bounds how long Close waits for the gossip queued for
	// peers to be written before it closes their streams. 0 means
	// DefaultFlushTimeout.
	FlushTimeout time.Duration
	// Registerer receives libp2p's metrics; nil disables them.
	Registerer prometheus.Registerer
	// Logger receives the layer's logs; nil discards them.
	Logger *slog.Logger
}

// Reachability values.
const (
	ReachPublic  = "public"
	ReachPrivate = "private"
)

// DefaultGossipQueueBytes (4 MiB) holds four messages of the largest size
// gossipsub carries (maxMessageSize), more of topics with tighter limits: a
// burst for a peer on a slow link, and all that a stalled peer pins (the
// count bound alone let 1,024 messages wait for it, up to a GiB).
const DefaultGossipQueueBytes = 4 << 20

// DefaultFlushTimeout is Config.FlushTimeout's default.
const DefaultFlushTimeout = time.Second

// MinGossipQueueBytes holds one RPC of the largest size with its length
// prefix: with less, a peer that keeps up could never be sent such an RPC.
const MinGossipQueueBytes = maxMessageSize + binary.MaxVarintLen32

// DefaultListen listens on every interface, TCP and QUIC, random ports.
var DefaultListen = []string{"/ip4/0.0.0.0/tcp/0", "/ip4/0.0.0.0/udp/0/quic-v1"}

// dhtMode is the DHT's mode. Only nodes that others can dial may serve:
// a server behind NAT would sit in routing tables and time out every query.
// A node that does not know lets AutoNAT decide (dht.ModeAuto: client until
// peers confirm by dialling back that it is reachable; loopback and private
// addresses never are, so tests on 127.0.0.1 stay clients).
func (c *Config) dhtMode() dht.ModeOpt {
	switch {
	case c.DHTServer || c.Reachability == ReachPublic:
		return dht.ModeServer
	case c.Reachability == ReachPrivate:
		return dht.ModeClient
	}
	return dht.ModeAuto
}

func (c *Config) validate() error {
	if len(c.Key) != ed25519.PrivateKeySize {
		return errors.New("p2p: Key must be an Ed25519 private key")
	}
	if len(c.Listen) == 0 {
		c.Listen = DefaultListen
	}
	for _, s := range c.Listen {
		if IsBrowserAddr(s) && !c.Browsers {
			return fmt.Errorf("p2p: listen address %s is for browsers, whose transports are off", s)
		}
	}
	if err := c.BrowserLimits.fill(); err != nil {
		return err
	}
	if c.ConnLow <= 0 {
		c.ConnLow = 100
	}
	if c.ConnHigh <= c.ConnLow {
		c.ConnHigh = 4 * c.ConnLow
	}
	if c.FlushTimeout == 0 {
		c.FlushTimeout = DefaultFlushTimeout
	}
	if c.GossipQueueBytes == 0 {
		c.GossipQueueBytes = DefaultGossipQueueBytes
	}
	if c.GossipQueueBytes < MinGossipQueueBytes {
		return fmt.Errorf("p2p: GossipQueueBytes %d: want at least %d (one RPC of the largest size)", c.GossipQueueBytes, MinGossipQueueBytes)
	}
	switch c.Reachability {
	case "", ReachPublic, ReachPrivate:
	default:
		return fmt.Errorf("p2p: reachability %q: want public, private or empty", c.Reachability)
	}
	for ns, v := range c.Validators {
		if ns == "" || v == nil {
			return fmt.Errorf("p2p: bad validator for namespace %q", ns)
		}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}
