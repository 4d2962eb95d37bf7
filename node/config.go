package node

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"time"

	"github.com/libp2p/go-libp2p/core/connmgr"

	"github.com/agentmesh/mesh/internal/admission"
	"github.com/agentmesh/mesh/internal/httpx"
	"github.com/agentmesh/mesh/internal/quorum"
	"github.com/agentmesh/mesh/internal/safefetch"
	"github.com/agentmesh/mesh/p2p"
	"github.com/agentmesh/mesh/registryapi"
	"github.com/agentmesh/mesh/wall"
)

// Version is the node software version, reported by /health.
var Version = "0.1.0-dev"

// Config configures a node. The zero value is not usable; start from
// DefaultConfig.
type Config struct {
	// DataDir holds the node's key and its Badger store. Ignored for the
	// store when InMemory is set (the key is then kept only in memory too,
	// unless DataDir is also set).
	DataDir string `json:"data_dir"`
	// InMemory keeps all state in RAM: for tests and throw-away nodes.
	InMemory bool `json:"in_memory"`
	// HTTPAddr is the listen address of the HTTP bridge; port 0 picks one.
	HTTPAddr string `json:"http_addr"`
	// PublicURL is the base URL clients use to reach this node (agent
	// handles are built on it). Empty means http://<the listen address>.
	PublicURL string `json:"public_url"`
	// TrustedProxies are the reverse proxies (CIDRs; a bare IP is that
	// address alone) whose X-Forwarded-For names the client, for the
	// per-client limits and counts (x402 proof checks, the free tier).
	// Requests from any other peer are counted at their own address and
	// their X-Forwarded-For is ignored. Trust only proxies that put the
	// peer they saw last in the header, and as narrow a range as you can:
	// anyone inside a trusted range can claim any address.
	TrustedProxies []string `json:"trusted_proxies"`
	// SyncWrites makes every acknowledged write durable against power loss
	// (fsync per commit). A process crash never loses acknowledged writes.
	SyncWrites bool `json:"sync_writes"`
	// OnlineWindow is how long after its last heartbeat an agent shows online.
	OnlineWindow time.Duration `json:"online_window"`
	// Role is RoleBootstrap (runs the canonical directory) or RoleNode
	// (replicates it and forwards writes). Empty picks RoleNode when
	// Bootstrap is set and RoleBootstrap otherwise: a node alone is its own
	// directory.
	Role string `json:"role"`
	// Listen are the libp2p multiaddrs to listen on.
	Listen []string `json:"listen"`
	// Bootstrap are full multiaddrs (ending in /p2p/<peer id>) of bootstrap
	// nodes; all of them are kept connected. A node that is not a
	// bootstrap node replicates the directory they run and forwards writes
	// to whichever of them orders writes (the leader of a quorum): it
	// starts with the first one and learns the leader from them.
	Bootstrap []string `json:"bootstrap"`
	// Quorum, on a bootstrap node, are the full multiaddrs of the initial
	// voters of a Raft quorum of bootstrap nodes running the directory
	// together, this node's among them: the same list on each. A member
	// whose Raft log is empty bootstraps the quorum with them; one that
	// has a log keeps the quorum's own members (change them with `mesh
	// quorum add|remove`), so starting again with the same list is
	// harmless. Empty: the node alone is the directory, as before quorums.
	Quorum []string `json:"quorum"`
	// Raft tunes the quorum's timings; zero fields take
	// DefaultRaftTimings'.
	Raft RaftTimings `json:"raft"`
	// ForwardTimeout bounds a write this node forwards to the directory
	// (the leader of a quorum), retries included: past it the client gets
	// 503 directory_unavailable. ForwardRetry is the pause between tries
	// while no leader is known. Zero means the defaults (10 s, 100 ms).
	ForwardTimeout time.Duration `json:"forward_timeout"`
	ForwardRetry   time.Duration `json:"forward_retry"`
	// ChangesKept is how many of the latest entries the change log keeps
	// (compacted every minute); a node further behind installs a snapshot
	// of the directory. 0 means DefaultChangesKept.
	ChangesKept uint64 `json:"changes_kept"`
	// DHTServer forces a node to answer DHT queries. Bootstrap nodes always
	// do; so do nodes with Reachability "public", and nodes with it unset
	// while AutoNAT finds them publicly reachable.
	DHTServer bool `json:"dht_server"`
	// Reachability is "public", "private" (behind NAT: reserve relay slots
	// on the bootstrap nodes) or empty to detect it. Bootstrap nodes
	// default to public.
	Reachability string `json:"reachability"`
	// Browsers lets web pages join clusters as libp2p peers: the node
	// listens on WebTransport and WebRTC-direct beside each QUIC address,
	// on its UDP port, unless Listen names browser addresses itself
	// (p2p.Config.Browsers). DefaultConfig sets it.
	Browsers bool `json:"browsers"`
	// BrowserLimits bound the browser connections and what each browser
	// peer may hold; zero fields take p2p's defaults.
	BrowserLimits p2p.BrowserLimits `json:"browser_limits"`
	// GossipQueueBytes bounds the gossip waiting to be sent to each peer;
	// past it the peer's oldest messages are dropped. 0 means
	// p2p.DefaultGossipQueueBytes (see p2p.Config.GossipQueueBytes).
	GossipQueueBytes int `json:"gossip_queue_bytes"`
	// ShutdownGrace bounds each wait of Close: for the HTTP requests under
	// way, for the requests that came otherwise (forwarded by other nodes,
	// the embedded agent's), and for the gossip queued for peers (a wall's
	// goodbye among it). 0 means DefaultShutdownGrace.
	ShutdownGrace time.Duration `json:"shutdown_grace"`
	// HeaderTimeout bounds how long a client may take to send a request's
	// header, BodyTimeout its body; IdleTimeout closes a keep-alive
	// connection without a request for that long. Zero means the defaults
	// (10 s, 30 s, 2 min).
	HeaderTimeout time.Duration `json:"header_timeout"`
	BodyTimeout   time.Duration `json:"body_timeout"`
	IdleTimeout   time.Duration `json:"idle_timeout"`
	// Gater, if set, vets libp2p connections (tests simulate NATs with it).
	Gater connmgr.ConnectionGater `json:"-"`
	// Key is the node's identity key. Nil means load or create
	// DataDir/node.key. An agent embedding a node may pass its own key.
	Key ed25519.PrivateKey `json:"-"`
	// Logger receives the node's logs; nil discards them.
	Logger *slog.Logger `json:"-"`
	// Now is the clock; nil means time.Now. Tests inject their own.
	Now func() time.Time `json:"-"`
	// Agent, when set, embeds an agent in the node (see AgentConfig).
	Agent *AgentConfig `json:"-"`
	// beforeIndex, in tests, runs before the search index is built (in
	// the background: it may hold the build back).
	beforeIndex func(context.Context)
	// WallSocketRate paces one wall socket, in frames a second, and
	// WallRoomRate all the sockets of one cluster on this node together,
	// in messages a second (bursts of twice the rate): while either does
	// not allow the next frame, the node stops reading the socket, so TCP
	// slows the client down; nothing is refused for coming too fast. Zero
	// means unlimited. Other nodes still take at most Wall.PeerRate
	// messages a second of one cluster from this node.
	WallSocketRate float64 `json:"wall_socket_rate"`
	WallRoomRate   float64 `json:"wall_room_rate"`
	// Wall tunes the cluster wall's timings and queues; zero fields take
	// the wall's defaults (see wall.Tuning).
	Wall wall.Tuning `json:"-"`
	// SearchRate is how many searches (POST /v1/search) one client
	// address may make a minute, 0 unlimited (as every rate);
	// SearchBurst how many at once, 0 for the default.
	SearchRate  int `json:"search_rate"`
	SearchBurst int `json:"search_burst"`
	// SearchConcurrency bounds the searches this node ranks at once,
	// whoever asks (0: one a core; a negative value leaves them
	// unbounded); a search past it waits at most SearchWait (0:
	// registryapi.DefaultSearchWait) for its turn, the newest first, and
	// is then refused with 503 search_busy.
	SearchConcurrency int           `json:"search_concurrency"`
	SearchWait        time.Duration `json:"search_wait"`
	// SolUSD is a fixed SOL/USD rate for the search's max_price_usd
	// filter; SolUSDURL a URL polled for it instead, every SolUSDInterval,
	// each fetch within SolUSDTimeout (registryapi.SolUSDConfig says what
	// it answers). Neither: the filter answers 503 price_rate_unknown.
	SolUSD         float64       `json:"sol_usd"`
	SolUSDURL      string        `json:"sol_usd_url"`
	SolUSDInterval time.Duration `json:"sol_usd_interval"`
	SolUSDTimeout  time.Duration `json:"sol_usd_timeout"`
	// Budgets meter writes (internal/admission): per client address and
	// per established credential on every node; on the directory, per
	// node that forwards to it and for its log in all. A zero budget is
	// unlimited; DefaultConfig sets admission.DefaultConfig. Budgets.Search
	// is not read: SearchRate and SearchBurst size it.
	Budgets admission.Config `json:"budgets"`
	// AgentActivationWindow is, on the directory, how long a new agent
	// registration waits for its agent's first token before it expires
	// (a catalog listing under it stays); 0 keeps registrations until
	// they are deleted.
	AgentActivationWindow time.Duration `json:"agent_activation_window"`
	// Cards tunes how the directory fetches agents' full cards from their
	// endpoints and probes their liveness (see CardFetch).
	Cards CardFetch `json:"cards"`
	// ClusterJoinWindow is, on the directory, how long a new public
	// cluster waits for its first member before it expires; 0 keeps
	// clusters until their admin deletes them.
	ClusterJoinWindow time.Duration `json:"cluster_join_window"`
	// ClusterSlugRedirect is, on the directory, how long a renamed public
	// cluster's former slug keeps leading to it (and is given to no other
	// cluster); 0 keeps it for ever.
	ClusterSlugRedirect time.Duration `json:"cluster_slug_redirect"`
	// BoardQuota is, on the directory, what a cluster's boards may hold
	// (boards, live posts and their bytes, per cluster and per board);
	// zero fields are unlimited.
	BoardQuota wall.Quota `json:"board_quota"`
	// BoardIndexPosts bounds the posts this node's in-memory board
	// indexes hold in all (the least recently read go past it); 0 is
	// unlimited.
	BoardIndexPosts int `json:"board_index_posts"`
	// ReadCacheBytes bounds the rows the directory's read cache holds,
	// in bytes (registryapi.DefaultReadCacheBytes); 0 leaves its bound
	// in rows (100,000) alone.
	ReadCacheBytes int64 `json:"read_cache_bytes"`
}

// CardFetch tunes the directory's fetches of agents' cards
// (node/cardprobe.go). Each registered agent with an endpoint is probed at
// most once every Refresh; at most Concurrency fetches run at once, each
// within Timeout, reading at most MaxBytes, following at most Redirects
// redirects, and never to a loopback, private, link-local, CGNAT,
// multicast, unspecified or metadata address unless Allow (CIDRs) lets it.
type CardFetch struct {
	Refresh     time.Duration `json:"refresh"` // 0: no probes, no fetched cards
	Timeout     time.Duration `json:"timeout"`
	MaxBytes    int64         `json:"max_bytes"`
	Concurrency int           `json:"concurrency"`
	Redirects   int           `json:"redirects"`
	Allow       []string      `json:"allow"`
}

// DefaultCardFetch is CardFetch's default.
func DefaultCardFetch() CardFetch {
	return CardFetch{Refresh: 10 * time.Minute, Timeout: 5 * time.Second, MaxBytes: registryapi.MaxFullCard,
		Concurrency: 8, Redirects: 3}
}

func (c *CardFetch) validate() error {
	if c.Refresh < 0 || c.Timeout <= 0 || c.Concurrency <= 0 || c.Redirects < 0 {
		return errors.New("node: card fetch: refresh and redirects must not be negative; timeout and concurrency must be positive")
	}
	if c.MaxBytes <= 0 || c.MaxBytes > registryapi.MaxFullCard {
		return fmt.Errorf("node: card fetch: max bytes %d: want 1..%d (the largest card the directory keeps)", c.MaxBytes, registryapi.MaxFullCard)
	}
	_, err := safefetch.ParseAllow(c.Allow)
	return err
}

// budgets are Budgets with the search's from SearchRate and SearchBurst
// (their flags predate the write budgets).
func (n *Node) budgets() admission.Config {
	b := n.cfg.Budgets
	b.Search = admission.Budget{Rate: float64(n.cfg.SearchRate) / 60, Burst: cmp.Or(n.cfg.SearchBurst, registryapi.DefaultSearchBurst)}
	return b
}

// RaftTimings are the timings of a quorum member (see quorum.Config).
type RaftTimings struct {
	// HeartbeatTimeout: a follower that has not heard from the leader for
	// this long stands for election. It bounds how long writes stall when
	// the leader dies (about twice it, elections on a LAN included).
	HeartbeatTimeout time.Duration `json:"heartbeat_timeout"`
	// ElectionTimeout: how long a candidate waits for votes.
	ElectionTimeout time.Duration `json:"election_timeout"`
	// LeaderLease: a leader that has not heard from a majority for this
	// long steps down (at most HeartbeatTimeout).
	LeaderLease time.Duration `json:"leader_lease"`
	// CommitTimeout: the longest a leader waits before it sends new
	// entries to the followers (it sends at once when it has work), or,
	// without any, tells them what committed.
	CommitTimeout time.Duration `json:"commit_timeout"`
	// RPCTimeout bounds one Raft RPC between members.
	RPCTimeout time.Duration `json:"rpc_timeout"`
	// SnapshotInterval is how often a member checks whether to snapshot;
	// it does once SnapshotThreshold entries were committed since the last
	// one, and keeps TrailingLogs of Raft's log behind it.
	SnapshotInterval  time.Duration `json:"snapshot_interval"`
	SnapshotThreshold uint64        `json:"snapshot_threshold"`
	TrailingLogs      uint64        `json:"trailing_logs"`
}

// DefaultRaftTimings are hashicorp/raft's defaults, fit for members on one
// continent, but for a shorter CommitTimeout (see quorum.DefaultConfig).
func DefaultRaftTimings() RaftTimings {
	d := quorum.DefaultConfig()
	return RaftTimings{HeartbeatTimeout: d.HeartbeatTimeout, ElectionTimeout: d.ElectionTimeout,
		LeaderLease: d.LeaderLeaseTimeout, CommitTimeout: d.CommitTimeout, RPCTimeout: d.RPCTimeout,
		SnapshotInterval: d.SnapshotInterval, SnapshotThreshold: d.SnapshotThreshold, TrailingLogs: d.TrailingLogs}
}

func (t *RaftTimings) defaults() {
	d := DefaultRaftTimings()
	for _, f := range []struct{ v, def *time.Duration }{
		{&t.HeartbeatTimeout, &d.HeartbeatTimeout}, {&t.ElectionTimeout, &d.ElectionTimeout},
		{&t.LeaderLease, &d.LeaderLease}, {&t.CommitTimeout, &d.CommitTimeout}, {&t.RPCTimeout, &d.RPCTimeout},
		{&t.SnapshotInterval, &d.SnapshotInterval},
	} {
		if *f.v == 0 {
			*f.v = *f.def
		}
	}
	if t.SnapshotThreshold == 0 {
		t.SnapshotThreshold = d.SnapshotThreshold
	}
	if t.TrailingLogs == 0 {
		t.TrailingLogs = d.TrailingLogs
	}
}

// Defaults of forwarding.
const (
	DefaultForwardTimeout = 10 * time.Second
	DefaultForwardRetry   = 100 * time.Millisecond
)

// DefaultConfig returns the configuration of `mesh node` without flags.
func DefaultConfig() Config {
	return Config{
		DataDir:          "./mesh-data",
		HTTPAddr:         "127.0.0.1:7777",
		Listen:           p2p.DefaultListen,
		Browsers:         true,
		SyncWrites:       true,
		OnlineWindow:     registryapi.DefaultOnlineWindow,
		WallSocketRate:   wall.DefaultSocketRate,
		WallRoomRate:     wall.DefaultRoomRate,
		GossipQueueBytes: p2p.DefaultGossipQueueBytes,
		Wall:             wall.Tuning{SendMemory: wall.DefaultSendMemory, ControlRate: wall.DefaultControlRate, ProofNonces: wall.DefaultProofNonces},
		Raft:             DefaultRaftTimings(),
		ForwardTimeout:   DefaultForwardTimeout,
		ForwardRetry:     DefaultForwardRetry,
		ChangesKept:      DefaultChangesKept,
		ShutdownGrace:    DefaultShutdownGrace,
		HeaderTimeout:    DefaultHeaderTimeout,
		BodyTimeout:      httpx.DefaultBodyTimeout,
		IdleTimeout:      DefaultIdleTimeout,
		SearchRate:       registryapi.DefaultSearchRate,
		SearchBurst:      registryapi.DefaultSearchBurst,
		SearchWait:       registryapi.DefaultSearchWait,
		SolUSDInterval:   time.Minute,
		SolUSDTimeout:    5 * time.Second,
		Budgets:          admission.DefaultConfig(),

		Cards:                 DefaultCardFetch(),
		AgentActivationWindow: registryapi.DefaultActivationWindow,
		ClusterJoinWindow:     wall.DefaultJoinWindow,
		ClusterSlugRedirect:   wall.DefaultSlugRedirect,
		BoardQuota:            wall.DefaultQuota,
		BoardIndexPosts:       wall.DefaultIndexPosts,
		ReadCacheBytes:        registryapi.DefaultReadCacheBytes,
	}
}

// DefaultShutdownGrace is Config.ShutdownGrace's default.
const DefaultShutdownGrace = 5 * time.Second

// Defaults of the bridge's connection timeouts.
const (
	DefaultHeaderTimeout = 10 * time.Second
	DefaultIdleTimeout   = 2 * time.Minute
)

// Roles of a node.
const (
	RoleBootstrap = "bootstrap"
	RoleNode      = "node"
)

// role resolves the configured role.
func (c *Config) role() string {
	if c.Role != "" {
		return c.Role
	}
	if len(c.Bootstrap) > 0 && len(c.Quorum) == 0 {
		return RoleNode
	}
	return RoleBootstrap
}

// Validate reports the first problem with c.
func (c *Config) Validate() error {
	switch c.Role {
	case "", RoleBootstrap:
	case RoleNode:
		if len(c.Bootstrap) == 0 {
			return errors.New("node: role node needs at least one bootstrap address")
		}
	default:
		return fmt.Errorf("node: unknown role %q (want bootstrap or node)", c.Role)
	}
	if _, err := p2p.ParseAddrs(c.Bootstrap); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if len(c.Quorum) > 0 {
		if c.role() != RoleBootstrap {
			return errors.New("node: Quorum is for bootstrap nodes (Role bootstrap)")
		}
		if _, err := p2p.ParseAddrs(c.Quorum); err != nil {
			return fmt.Errorf("node: quorum: %w", err)
		}
	}
	if c.ForwardTimeout < 0 || c.ForwardRetry < 0 {
		return errors.New("node: forward timeout and retry must not be negative")
	}
	for _, d := range []time.Duration{c.Raft.HeartbeatTimeout, c.Raft.ElectionTimeout, c.Raft.LeaderLease, c.Raft.CommitTimeout, c.Raft.RPCTimeout} {
		if d < 0 {
			return errors.New("node: Raft timings must not be negative")
		}
	}
	if c.DataDir == "" && !c.InMemory {
		return errors.New("node: DataDir is required unless InMemory is set")
	}
	if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
		return fmt.Errorf("node: HTTPAddr %q: %w", c.HTTPAddr, err)
	}
	if _, err := httpx.ParseProxies(c.TrustedProxies); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	switch c.Reachability {
	case "", p2p.ReachPublic, p2p.ReachPrivate:
	default:
		return fmt.Errorf("node: reachability %q: want public, private or empty", c.Reachability)
	}
	if c.SolUSD < 0 || c.SearchRate < 0 || c.SearchBurst < 0 || c.SearchWait < 0 || c.SolUSDInterval < 0 || c.SolUSDTimeout < 0 {
		return errors.New("node: SolUSD, SearchRate, SearchBurst, SolUSDInterval and SolUSDTimeout must not be negative")
	}
	if c.SolUSD > 0 && c.SolUSDURL != "" {
		return errors.New("node: set SolUSD or SolUSDURL, not both")
	}
	if c.OnlineWindow < 0 {
		return errors.New("node: OnlineWindow must not be negative")
	}
	for _, r := range []float64{c.WallSocketRate, c.WallRoomRate} {
		if !(r >= 0) || math.IsInf(r, 0) {
			return fmt.Errorf("node: wall rate %v: want a finite number of messages a second, or 0 for unlimited", r)
		}
	}
	if c.Wall.ProofNonces < 0 {
		return fmt.Errorf("node: Wall.ProofNonces %d: want a positive count, or 0 for the default", c.Wall.ProofNonces)
	}
	if c.Wall.SendMemory < 0 || !(c.Wall.ControlRate >= 0) {
		return fmt.Errorf("node: Wall.SendMemory %d, Wall.ControlRate %v: want positive values, 0 for the defaults (+Inf: no control rate)", c.Wall.SendMemory, c.Wall.ControlRate)
	}
	if c.HeaderTimeout < 0 || c.BodyTimeout < 0 || c.IdleTimeout < 0 {
		return errors.New("node: header, body and idle timeouts must not be negative")
	}
	if c.ShutdownGrace < 0 {
		return errors.New("node: ShutdownGrace must not be negative")
	}
	if c.GossipQueueBytes != 0 && c.GossipQueueBytes < p2p.MinGossipQueueBytes {
		return fmt.Errorf("node: GossipQueueBytes %d: want at least %d", c.GossipQueueBytes, p2p.MinGossipQueueBytes)
	}
	if err := c.Budgets.Validate(); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if q := c.BoardQuota; q.Boards < 0 || q.BoardPosts < 0 || q.BoardBytes < 0 || q.ClusterPosts < 0 || q.ClusterBytes < 0 {
		return errors.New("node: BoardQuota's limits must not be negative (zero is unlimited)")
	}
	if c.BoardIndexPosts < 0 {
		return errors.New("node: BoardIndexPosts must not be negative (zero is unlimited)")
	}
	if c.ReadCacheBytes < 0 {
		return errors.New("node: ReadCacheBytes must not be negative (zero bounds the read cache in rows alone)")
	}
	if c.AgentActivationWindow < 0 || c.ClusterJoinWindow < 0 || c.ClusterSlugRedirect < 0 {
		return errors.New("node: AgentActivationWindow, ClusterJoinWindow and ClusterSlugRedirect must not be negative (zero never expires)")
	}
	if err := c.Cards.validate(); err != nil {
		return err
	}
	if c.Key != nil && len(c.Key) != ed25519.PrivateKeySize {
		return errors.New("node: Key is not an Ed25519 private key")
	}
	if c.Agent != nil {
		return c.Agent.validate()
	}
	return nil
}
