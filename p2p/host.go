package p2p

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ipfs/go-datastore"
	dssync "github.com/ipfs/go-datastore/sync"
	"github.com/libp2p/go-libp2p"
	dht "github.com/libp2p/go-libp2p-kad-dht"
	"github.com/libp2p/go-libp2p-kad-dht/records"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	record "github.com/libp2p/go-libp2p-record"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"
	"github.com/libp2p/go-libp2p/p2p/net/connmgr"
	libp2pquic "github.com/libp2p/go-libp2p/p2p/transport/quic"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
	ma "github.com/multiformats/go-multiaddr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentmesh/mesh/internal/gate"
)

// Host is a running libp2p node: host, DHT and gossipsub.
type Host struct {
	cfg Config

	h   host.Host
	dht *dht.IpfsDHT
	ps  *pubsub.PubSub

	mu      sync.Mutex
	topics  map[string]*Topic
	routing map[peer.ID]bool // DHT servers whenRouted waits for
	// onRendezvous are the OnRendezvousNode hooks.
	onRendezvous []func(peer.ID)
	// onRegister are the OnRendezvousRegister hooks.
	onRegister []func(ns string)
	// onBrowserGone are the OnBrowserGone hooks.
	onBrowserGone []func(peer.ID)

	rendezvous *registry     // nil unless this node is a rendezvous node
	browsers   *browserPeers // the browser connections (browser.go)
	streams    *streamLimits
	sessions   map[sessionKey]*clientSession // this node's sessions (session.go)
	served     map[sessionKey]*peerSlots     // the peers' requests served in sessions
	drops      *prometheus.CounterVec
	out        *outbound           // the peers' gossip queues
	values     *records.ValueStore // reads this node's own DHT values
	scores     atomic.Pointer[map[peer.ID]float64]

	ctx      context.Context // ends at Close
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	handlers gate.Gate   // running stream handlers
	jobs     chan func() // to an idle worker (workers.go)
	once     sync.Once
}

// New checks cfg and returns a Host that is not yet running.
func New(cfg Config) (*Host, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	drops := newDropCounter()
	out := newOutbound(cfg.GossipQueueBytes, drops.WithLabelValues(SurfaceTopic, DropSlowPeer), cfg.Logger)
	return &Host{cfg: cfg, topics: map[string]*Topic{}, routing: map[peer.ID]bool{}, drops: drops, out: out, streams: newStreamLimits(), jobs: make(chan func())}, nil
}

// collectors are the layer's own metrics (libp2p registers its own).
func (h *Host) collectors() []prometheus.Collector {
	return []prometheus.Collector{h.drops, h.out.queued, h.out.droppedBytes}
}

// Start builds the libp2p host, the DHT and gossipsub, and starts dialling
// the bootstrap peers. It does not wait for them: Start succeeds on a node
// that is alone, and connections come when the peers do.
func (h *Host) Start(ctx context.Context) (err error) {
	h.ctx, h.cancel = context.WithCancel(context.WithoutCancel(ctx))
	ctx = h.ctx
	defer func() {
		if err != nil {
			h.Close()
		}
	}()
	if h.cfg.Registerer != nil {
		for _, c := range h.collectors() {
			if err := h.cfg.Registerer.Register(c); err != nil {
				return fmt.Errorf("p2p: metrics: %w", err)
			}
		}
	}
	if h.h, err = h.newLibp2p(); err != nil {
		return err
	}
	if err := h.listenBrowsers(); err != nil {
		return err
	}
	if h.dht, err = h.newDHT(); err != nil {
		return err
	}
	if h.ps, err = h.newPubSub(ctx); err != nil {
		return err
	}
	if h.cfg.Rendezvous {
		h.serveRendezvous()
	}
	if err := h.watchPeers(ctx); err != nil {
		return err
	}
	h.goroutine(func() { h.keepBootstrapped(ctx) })
	return nil
}

// newLibp2p builds the host. Every option is chosen, not defaulted, so that
// what the node exposes is visible here.
func (h *Host) newLibp2p() (host.Host, error) {
	priv, err := crypto.UnmarshalEd25519PrivateKey(h.cfg.Key)
	if err != nil {
		return nil, fmt.Errorf("p2p: identity key: %w", err)
	}
	// Resource manager: libp2p's defaults scaled to this machine's memory
	// and file descriptors. It bounds streams and connections per peer and
	// in total, so a peer cannot exhaust the node, and connections per
	// address block, as many as the relay admits peers behind one address
	// (connLimitsPerSubnet; loopback is unlimited, which multi-node tests
	// rely on). A browser peer gets the limits of BrowserLimits instead of
	// a peer's (browser.go), and the gater bounds browser connections.
	h.browsers = newBrowserPeers(h.cfg.BrowserLimits.Conns, h.cfg.Gater)
	limiter := browserLimiter{Limiter: rcmgr.NewFixedLimiter(rcmgr.DefaultLimits.AutoScale()), browsers: h.browsers,
		peer: h.cfg.BrowserLimits.peerLimit()}
	rm, err := rcmgr.NewResourceManager(limiter, rcmgr.WithLimitPerSubnet(connLimitsPerSubnet()))
	if err != nil {
		return nil, fmt.Errorf("p2p: resource manager: %w", err)
	}
	// Connection manager: trim to ConnLow when above ConnHigh, sparing
	// connections younger than a minute and protected ones (bootstrap peers).
	cm, err := connmgr.NewConnManager(h.cfg.ConnLow, h.cfg.ConnHigh, connmgr.WithGracePeriod(time.Minute))
	if err != nil {
		return nil, fmt.Errorf("p2p: connection manager: %w", err)
	}
	opts := []libp2p.Option{
		libp2p.Identity(priv),
		libp2p.ListenAddrStrings(h.cfg.Listen...),
		// TCP for reach (every firewall passes it), QUIC for fast
		// handshakes and hole punching; with Browsers, WebTransport and
		// WebRTC-direct for web pages (browserOptions). Nothing else is
		// exposed.
		libp2p.Transport(tcp.NewTCPTransport),
		libp2p.Transport(libp2pquic.NewTransport),
		libp2p.ResourceManager(rm),
		libp2p.ConnectionGater(h.browsers),
		libp2p.ConnectionManager(cm),
		libp2p.UserAgent("mesh"),
		libp2p.ProtocolVersion(ProtocolPrefix + "/1.0.0"),
	}
	opts = append(opts, h.browserOptions()...)
	acl := &memberACL{}
	opts = append(opts, h.natOptions(acl)...)
	if h.cfg.Registerer != nil {
		opts = append(opts, libp2p.PrometheusRegisterer(h.cfg.Registerer))
	} else {
		opts = append(opts, libp2p.DisableMetrics())
	}
	hst, err := libp2p.New(opts...)
	if err != nil {
		rm.Close()
		return nil, fmt.Errorf("p2p: host: %w", err)
	}
	acl.host.Store(&hst)
	hst.Network().Notify(&network.NotifyBundle{
		ConnectedF:    func(_ network.Network, c network.Conn) { h.browsers.connected(c) },
		DisconnectedF: func(_ network.Network, c network.Conn) { h.browserDisconnected(c) },
	})
	return hst, nil
}

// maxRecordAge: records received longer ago than this are dropped by the
// nodes storing them; owners republish well before (see the registry's
// republisher).
const maxRecordAge = 24 * time.Hour

// newDHT builds the Kademlia DHT on the product's own protocol prefix
// (/mesh/kad/1.0.0), with only the namespaces the caller validates, in the
// mode dhtMode picks.
func (h *Host) newDHT() (*dht.IpfsDHT, error) {
	nsv := record.NamespacedValidator{}
	for ns, v := range h.cfg.Validators {
		nsv[ns] = v
	}
	// Without a store of the node's, values live in memory: the directory
	// republishes every record when it starts and when a DHT server joins
	// a small DHT, and records held for others are theirs to republish.
	store := h.cfg.Values
	if store == nil {
		store = dssync.MutexWrap(datastore.NewMapDatastore())
	}
	values := newValues(store)
	h.values = records.NewValueStore(values, nsv, maxRecordAge)
	d, err := dht.New(h.h,
		dht.ValueDatastore(values),
		dht.ProtocolPrefix(ProtocolPrefix),
		dht.Mode(h.cfg.dhtMode()),
		dht.Validator(countingValidator{nsv, h}),
		// The mesh stores values (agent records), not provider records:
		// who serves a topic is asked of the rendezvous (rendezvous.go).
		dht.DisableProviders(),
		dht.BootstrapPeers(h.cfg.Bootstrap...),
		dht.MaxRecordAge(maxRecordAge),
	)
	if err != nil {
		return nil, fmt.Errorf("p2p: dht: %w", err)
	}
	return d, nil
}

// Close stops dialling, leaves topics and shuts the DHT and host down. It is
// safe to call twice and after a failed Start.
func (h *Host) Close() error {
	var err error
	h.once.Do(func() {
		if h.ps != nil { // what the node said last (a wall's goodbye) reaches its peers
			ctx, cancel := context.WithTimeout(context.Background(), h.cfg.FlushTimeout)
			h.out.flush(ctx)
			cancel()
		}
		if h.cancel != nil {
			h.cancel()
		}
		h.handlers.Close()
		h.wg.Wait()
		h.mu.Lock()
		for _, t := range h.topics {
			t.close()
		}
		h.mu.Unlock()
		if h.dht != nil {
			err = errors.Join(err, h.dht.Close())
		}
		if h.h != nil {
			err = errors.Join(err, h.h.Close())
		}
		if h.cfg.Registerer != nil {
			for _, c := range h.collectors() {
				h.cfg.Registerer.Unregister(c) // a host started again registers them anew
			}
		}
	})
	return err
}

func (h *Host) goroutine(fn func()) {
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		fn()
	}()
}

// ID is the node's peer ID.
func (h *Host) ID() peer.ID { return h.h.ID() }

// Addrs are the node's full multiaddrs, each ending in /p2p/<peer id>.
func (h *Host) Addrs() []string {
	info := peer.AddrInfo{ID: h.h.ID(), Addrs: h.h.Addrs()}
	full, _ := peer.AddrInfoToP2pAddrs(&info)
	out := make([]string, len(full))
	for i, a := range full {
		out[i] = a.String()
	}
	return out
}

// ListenAddrs are the addresses the host listens on, with the ports it
// bound (a configured port 0 shows the one chosen).
func (h *Host) ListenAddrs() []string {
	var out []string
	for _, a := range h.h.Network().ListenAddresses() {
		if s := a.String(); !strings.Contains(s, "p2p-circuit") { // the relay transport's, no socket
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

// Peers lists the connected peers.
func (h *Host) Peers() []peer.ID { return h.h.Network().Peers() }

// Connected reports whether p is connected.
func (h *Host) Connected(p peer.ID) bool {
	return h.h.Network().Connectedness(p) == network.Connected
}

// Connect dials p: at its own addresses and, as a fallback the dialler
// tries after them, through the bootstrap relays (see addRelayAddrs).
func (h *Host) Connect(ctx context.Context, p peer.AddrInfo) error {
	h.addRelayAddrs(p.ID)
	return h.h.Connect(ctx, p)
}

// Libp2p exposes the underlying host, for tests and for wiring that needs it.
func (h *Host) Libp2p() host.Host { return h.h }

// ParseAddrs parses full multiaddrs (with /p2p/<id>) into peers, merging
// several addresses of one peer. Peers keep the order of their first
// address: the first peer is meaningful to callers.
func ParseAddrs(addrs []string) ([]peer.AddrInfo, error) {
	var out []peer.AddrInfo
	index := map[peer.ID]int{}
	for _, s := range addrs {
		a, err := ma.NewMultiaddr(s)
		if err != nil {
			return nil, fmt.Errorf("address %q: %w", s, err)
		}
		info, err := peer.AddrInfoFromP2pAddr(a)
		if err != nil {
			return nil, fmt.Errorf("address %q: %w (a full address ends in /p2p/<peer id>)", s, err)
		}
		i, seen := index[info.ID]
		if !seen {
			i = len(out)
			index[info.ID] = i
			out = append(out, peer.AddrInfo{ID: info.ID})
		}
		out[i].Addrs = append(out[i].Addrs, info.Addrs...)
	}
	return out, nil
}
