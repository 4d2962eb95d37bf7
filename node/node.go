package node

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/admission"
	"github.com/agentmesh/mesh/internal/clock"
	"github.com/agentmesh/mesh/internal/cmdlog"
	"github.com/agentmesh/mesh/internal/gate"
	"github.com/agentmesh/mesh/internal/httpx"
	"github.com/agentmesh/mesh/internal/quorum"
	"github.com/agentmesh/mesh/p2p"
	"github.com/agentmesh/mesh/registryapi"
	"github.com/agentmesh/mesh/store"
	"github.com/agentmesh/mesh/wall"
)

// Node is one mesh node.
type Node struct {
	cfg Config
	log *slog.Logger

	key ed25519.PrivateKey
	db  *store.DB
	// dht keeps the DHT values this node holds, on disk (nil in memory:
	// then the host keeps them).
	dht *store.DB

	clog    *cmdlog.Log // the canonical log: the directory's or a replica's copy
	dir     *registryapi.Directory
	catalog *wall.Catalog
	signers *quorum.Signers // the quorum's members as the log names them
	metrics *prometheus.Registry

	host      *p2p.Host
	self      peer.ID // the host's, of key
	role      string
	view      *dirView // who runs the directory: this node, its quorum, or what bootstrap nodes said
	tokens    *registryapi.Tokens
	validator registryapi.RecordValidator // of DHT records: attested by our directory
	// orderer orders writes on a bootstrap node (the single writer, or the
	// quorum while this member leads it); nil on other nodes. proposer is
	// what the surfaces propose to: local, or the way to the directory.
	orderer   cmdlog.Proposer
	proposer  cmdlog.Proposer
	quorum    *quorum.Quorum // nil unless this node is a member of a quorum
	replica   follower       // nil on a single directory node
	dirTopics dirTopics
	publisher *publisher    // nil unless a bootstrap node
	prober    *cardProber   // nil unless a bootstrap node probing cards
	agent     *agentRuntime // nil unless an agent is embedded
	solUSD    *registryapi.SolUSD

	baseFromHost bool          // answers name the Host a client used (no public URL known)
	snapshots    chan struct{} // snapshots being served
	signersDue   chan struct{} // the leader is to name the members in the log
	changing     atomic.Bool   // a change of the quorum's members is under way (quorum_admin.go)
	contacts     contacts      // a member's contacts with the others (quorum_view.go)

	wall       *wall.Service
	admission  *admission.Admitter // the write budgets
	surfaces   *admission.Surfaces // the write routes, by surface
	forwarded  *admission.Surfaces // the writes only the directory's orderer serves
	forwardMux *httpx.Mux          // on the directory: the routes other nodes forward
	mux        *httpx.Mux          // the bridge's routes, as registered
	handler    http.Handler
	requests   gate.Gate // of handler (gated)
	ln         net.Listener
	srv        *http.Server
	started    time.Time

	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// New checks cfg and returns a node that is not yet running. It has no side
// effects: nothing is opened or listened on until Start.
func New(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.ForwardTimeout == 0 {
		cfg.ForwardTimeout = DefaultForwardTimeout
	}
	if cfg.ForwardRetry == 0 {
		cfg.ForwardRetry = DefaultForwardRetry
	}
	cfg.Raft.defaults()
	if cfg.ChangesKept == 0 {
		cfg.ChangesKept = DefaultChangesKept
	}
	return &Node{cfg: cfg, log: cfg.Logger, snapshots: make(chan struct{}, snapshotsServed), signersDue: make(chan struct{}, 1)}, nil
}

// Start opens the node's state and starts serving. When it returns nil the
// node is ready: /health answers and every endpoint works. On error,
// everything Start opened is closed again.
//
// Start keeps ctx's values, not its cancellation: cancelling ctx neither
// interrupts Start nor stops the node, which runs until Close (so that a
// caller's request-scoped context cannot take the node down half-way).
// To stop the node when ctx ends, call Close then.
func (n *Node) Start(ctx context.Context) (err error) {
	if n.cancel != nil {
		return errors.New("node: already started")
	}
	ctx, n.cancel = context.WithCancel(context.WithoutCancel(ctx))
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	if err := n.openState(); err != nil {
		return err
	}
	n.goroutine(func() { n.buildIndex(ctx) })
	n.metrics = prometheus.NewRegistry()
	if n.admission, err = admission.New(n.budgets(), n.metrics); err != nil {
		return err
	}
	// The bridge's address first: the node names its URL to other nodes
	// (a member's quorum view) as soon as it serves them. It serves HTTP
	// once everything is up; clients that connect meanwhile wait.
	if n.ln, err = net.Listen("tcp", n.cfg.HTTPAddr); err != nil {
		return fmt.Errorf("node: listen on %s: %w", n.cfg.HTTPAddr, err)
	}
	if n.cfg.PublicURL == "" {
		n.cfg.PublicURL = "http://" + n.ln.Addr().String()
		if addr := n.ln.Addr().(*net.TCPAddr); addr.IP.IsUnspecified() {
			// Listening on every interface, the node cannot name an address
			// its clients reach: answers take it from each request's Host.
			n.baseFromHost = true
			n.cfg.PublicURL = "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(addr.Port))
			n.log.Warn("listening on every interface without a public URL: addresses in answers follow each request's Host header, and an embedded agent registers " + n.cfg.PublicURL + "; set Config.PublicURL")
		}
	}
	if err := n.startP2P(ctx); err != nil {
		return err
	}
	if err := n.startRegistry(ctx); err != nil {
		return err
	}
	if err := n.openAgent(); err != nil {
		return err
	}
	n.solUSD = registryapi.NewSolUSD(registryapi.SolUSDConfig{Fixed: n.cfg.SolUSD, URL: n.cfg.SolUSDURL,
		Interval: n.cfg.SolUSDInterval, Timeout: n.cfg.SolUSDTimeout, Logger: n.log, Now: n.cfg.Now})
	n.goroutine(func() { n.solUSD.Run(ctx) })
	if err := n.newWall(); err != nil {
		return err
	}
	if err := n.buildHTTP(); err != nil {
		return err
	}
	if n.role == RoleBootstrap {
		n.acceptWrites()
	}
	if err := n.wall.Start(ctx); err != nil {
		return err
	}
	n.started = n.cfg.Now()
	// The header and idle timeouts are swept, not a timer each connection
	// re-arms at every request (httpx.SweptListener): a client that sends
	// nothing, or half a header, is cut at most a sweep late.
	ln := httpx.SweepDeadlines(n.ln, deadlineSweep)
	header := orDefault(n.cfg.HeaderTimeout, DefaultHeaderTimeout)
	body := orDefault(n.cfg.BodyTimeout, httpx.DefaultBodyTimeout)
	n.srv = &http.Server{
		Handler:           n.handler,
		ReadHeaderTimeout: header,
		// A body its route does not read (a GET's) is drained by the
		// server after the answer, before the client gets it: bounded as
		// httpx.ReadBody bounds one a route reads, else a client that
		// trickles it holds its connection for ever.
		ReadTimeout:    header + body,
		BaseContext:    func(net.Listener) context.Context { return httpx.WithBodyTimeout(context.Background(), body) },
		IdleTimeout:    orDefault(n.cfg.IdleTimeout, DefaultIdleTimeout),
		MaxHeaderBytes: 64 << 10,
		ErrorLog:       slog.NewLogLogger(n.log.Handler(), slog.LevelDebug),
		ConnState:      ln.ConnState,
	}
	// The agent starts before anything is served: its deposit poller
	// takes its first checkpoint before a top-up can be made.
	if err := n.startAgent(ctx); err != nil {
		return err
	}
	n.goroutine(func() {
		if err := n.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.log.Error("http server stopped", "err", err)
		}
	})
	if !n.cfg.InMemory {
		n.goroutine(func() { n.db.RunGC(ctx, 10*time.Minute) })
		n.goroutine(func() { n.dht.RunGC(ctx, 10*time.Minute) })
	}
	n.goroutine(func() { n.compactLog(ctx) })
	if n.role == RoleBootstrap {
		n.goroutine(func() { n.sweepExpired(ctx) })
		n.goroutine(func() { n.probeCards(ctx) })
	}
	n.log.Info("node started", "role", n.role, "http", n.URL(), "peer", n.host.ID(), "data", n.cfg.DataDir)
	return nil
}

// deadlineSweep is how often the bridge's connections are checked for a
// passed read deadline (the header timeout, 10 s, and the idle one, 2 min).
const deadlineSweep = 250 * time.Millisecond

// openState loads the identity key and opens the store and directory.
func (n *Node) openState() error {
	if n.cfg.DataDir != "" {
		if err := os.MkdirAll(n.cfg.DataDir, 0o700); err != nil {
			return fmt.Errorf("node: data directory: %w", err)
		}
	}
	n.key = n.cfg.Key
	if n.key == nil && n.cfg.DataDir != "" {
		k, err := identity.LoadOrCreateKey(filepath.Join(n.cfg.DataDir, "node.key"))
		if err != nil {
			return fmt.Errorf("node: identity key: %w", err)
		}
		n.key = k
	}
	if n.key == nil {
		n.key = identity.GenerateKey()
	}
	n.self, _ = p2p.PeerID(n.key.Public().(ed25519.PublicKey))
	db, err := store.Open(store.Options{
		Dir: filepath.Join(n.cfg.DataDir, "store"), InMemory: n.cfg.InMemory,
		SyncWrites: n.cfg.SyncWrites, Logger: n.log,
	})
	if err != nil {
		return err
	}
	n.db = db
	if !n.cfg.InMemory {
		if n.dht, err = openDHTValues(n.cfg.DataDir, n.log.With("component", "dht-values")); err != nil {
			return err
		}
	}
	if n.clog, err = cmdlog.Open(db); err != nil {
		return err
	}
	if n.dir, err = registryapi.OpenDirectory(n.clog); err != nil {
		return err
	}
	n.dir.SetReadCacheBytes(n.cfg.ReadCacheBytes)
	n.catalog = wall.NewCatalog(n.clog)
	n.catalog.SetIndexLimit(n.cfg.BoardIndexPosts)
	n.signers = quorum.NewSigners(n.clog)
	return nil
}

// buildIndex builds the search index in the background: the node serves
// everything else meanwhile, searches answering 503 index_building.
func (n *Node) buildIndex(ctx context.Context) {
	if n.cfg.beforeIndex != nil {
		n.cfg.beforeIndex(ctx)
	}
	start := time.Now()
	if err := n.dir.BuildIndex(ctx); err != nil {
		if ctx.Err() == nil {
			n.log.Error("the search index could not be built: searches answer 503 index_building", "err", err)
		}
		return
	}
	n.log.Info("search index built", "agents", n.dir.AgentCount(), "took", time.Since(start).Round(time.Millisecond))
}

// newWall makes the wall's service, on the node's host, log and catalog;
// Start starts it once the bridge routes to it.
func (n *Node) newWall() (err error) {
	var refresh func(context.Context) error
	if n.replica != nil {
		refresh = n.replica.Sync
	}
	n.wall, err = wall.New(wall.Config{
		Catalog: n.catalog, Log: n.proposer, Host: n.host, Directory: n.view.directory, PublicURL: n.cfg.PublicURL, Refresh: refresh,
		KeepsHistory: n.role == RoleBootstrap, HistoryKeepers: n.view.keepers,
		SocketRate: n.cfg.WallSocketRate, RoomRate: n.cfg.WallRoomRate, JoinWindow: n.cfg.ClusterJoinWindow,
		Quota: n.cfg.BoardQuota, SlugRedirect: n.cfg.ClusterSlugRedirect,
		Tuning: n.cfg.Wall, Clock: clock.WithNow(n.cfg.Now), Logger: n.log.With("component", "wall"), Registerer: n.metrics,
	})
	return err
}

// goroutine runs fn in a goroutine that Close waits for.
func (n *Node) goroutine(fn func()) {
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		fn()
	}()
}

// every runs fn every d until ctx is done.
func every(ctx context.Context, d time.Duration, fn func()) { everyOrWoken(ctx, d, nil, fn) }

// everyOrWoken runs fn every d, and whenever wake fires, until ctx is done.
func everyOrWoken(ctx context.Context, d time.Duration, wake <-chan struct{}, fn func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-wake:
		}
		fn()
	}
}

// grace is Config.ShutdownGrace, or its default when unset.
func (n *Node) grace() time.Duration { return orDefault(n.cfg.ShutdownGrace, DefaultShutdownGrace) }

// orDefault is d, or def when d is unset.
func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// Close stops the node: the HTTP server first (in-flight requests get up
// to ShutdownGrace to finish), the wall's sockets, then every other way
// into the bridge (requests forwarded by other nodes and the embedded
// agent's are refused from then on, and waited for, up to ShutdownGrace,
// if under way), then background work (the directory flushes its
// heartbeats a last time, so every beat it answered is kept), then the p2p
// host (after up to ShutdownGrace for the gossip queued for peers) and the
// store. It is safe to call more than once and after a failed Start.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		if n.srv != nil {
			ctx, cancel := context.WithTimeout(context.Background(), n.grace())
			if err := n.srv.Shutdown(ctx); err != nil {
				n.srv.Close() // the requests still running lose their connections
			}
			cancel()
		}
		if n.ln != nil {
			n.ln.Close() // closed already if it was served; not if Start failed before
		}
		if n.wall != nil {
			n.wall.Close() // hijacked sockets outlive the HTTP server's shutdown
		}
		if !n.requests.CloseWithin(n.grace()) {
			n.log.Warn("requests still running after the shutdown grace: the store closes under them", "grace", n.grace())
		}
		if n.cancel != nil {
			n.cancel()
		}
		n.wg.Wait()
		if n.quorum != nil {
			if err := n.quorum.Close(); err != nil {
				n.log.Debug("leaving the quorum", "err", err)
			}
		}
		n.closeAgent()
		if n.host != nil {
			if err := n.host.Close(); err != nil {
				n.log.Debug("closing the p2p host", "err", err)
			}
		}
		if n.db != nil {
			n.closeErr = n.db.Close()
		}
		if n.dht != nil {
			n.closeErr = errors.Join(n.closeErr, n.dht.Close())
		}
		n.log.Info("node stopped")
	})
	return n.closeErr
}

// URL is the base URL of the HTTP bridge (valid after Start).
func (n *Node) URL() string { return n.cfg.PublicURL }

// Addr is the bridge's listen address (valid after Start).
func (n *Node) Addr() string { return n.ln.Addr().String() }

// DID is the did:key of the node's identity key (valid after Start).
func (n *Node) DID() string {
	return identity.DIDFromPublicKey(n.key.Public().(ed25519.PublicKey))
}

// PeerID is the node's libp2p peer ID (valid after Start).
func (n *Node) PeerID() peer.ID { return n.host.ID() }

// P2PAddrs are the node's full libp2p multiaddrs (valid after Start).
func (n *Node) P2PAddrs() []string { return n.host.Addrs() }

// Role is the node's resolved role (valid after Start).
func (n *Node) Role() string { return n.role }

// Handler is the node's HTTP handler, for serving it on another listener.
func (n *Node) Handler() http.Handler { return n.handler }
