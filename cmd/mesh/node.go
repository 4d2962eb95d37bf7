package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/agentmesh/mesh/internal/admission"
	"github.com/agentmesh/mesh/node"
	"github.com/agentmesh/mesh/p2p"
)

func nodeCmd() *cobra.Command { return newNodeCmd(runNode) }

// newNodeCmd is `mesh node`, handing the configuration its flags and
// environment make to run.
func newNodeCmd(run func(context.Context, node.Config) error) *cobra.Command {
	cfg := node.DefaultConfig()
	var logLevel string
	var noSync bool
	c := &cobra.Command{
		Use:   "node",
		Short: "Run a mesh node",
		Long: `Run a mesh node. Alone, a node is its own directory: it keeps every agent,
token, report and nonce in --data and serves the HTTP API on --http.`,
		Args:    cobra.NoArgs,
		PreRunE: applyEnvHook,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newLogger(logLevel)
			if err != nil {
				return err
			}
			slog.SetDefault(log)
			cfg.Logger = log
			cfg.SyncWrites = !noSync
			return run(cmd.Context(), cfg)
		},
	}
	f := c.Flags()
	f.StringVar(&cfg.DataDir, "data", cfg.DataDir, "data directory")
	f.StringVar(&cfg.HTTPAddr, "http", cfg.HTTPAddr, "HTTP listen address")
	f.StringVar(&cfg.PublicURL, "public-url", "", "base URL clients reach this node at; default http://<http address>")
	f.StringSliceVar(&cfg.TrustedProxies, "trusted-proxy", nil, "CIDR or IP of a reverse proxy whose X-Forwarded-For names the client, repeatable or comma-separated; trust only your own proxies")
	f.StringVar(&cfg.Role, "role", "", "bootstrap (runs the directory) or node; default: node when --bootstrap is given without --quorum, else bootstrap")
	f.StringSliceVar(&cfg.Listen, "listen", cfg.Listen, "libp2p listen multiaddrs, repeatable or comma-separated")
	f.StringSliceVar(&cfg.Bootstrap, "bootstrap", nil, "full multiaddr of a bootstrap node (…/p2p/<peer id>), repeatable or comma-separated: a node follows the directory these run (one node, or members of a quorum: it finds the leader itself); one it cannot reach is warned about")
	f.BoolVar(&cfg.DHTServer, "dht-server", false, "always answer DHT queries; without it bootstrap nodes, --reachability public and nodes AutoNAT finds reachable do")
	f.StringVar(&cfg.Reachability, "reachability", "", "public, private (behind NAT: use the bootstrap relays) or empty to detect; bootstrap nodes default to public")
	f.BoolVar(&cfg.Browsers, "browsers", cfg.Browsers, "let web pages join clusters as libp2p peers: listen on WebTransport and WebRTC-direct beside each QUIC address, on its UDP port, unless --listen names browser addresses itself; --browsers=false listens for none")
	f.IntVar(&cfg.BrowserLimits.Conns, "browser-conns", p2p.DefaultBrowserConns, "browser connections (WebTransport, WebRTC-direct) the node holds at once; past it new ones are refused")
	f.IntVar(&cfg.BrowserLimits.PeerStreams, "browser-peer-streams", p2p.DefaultBrowserPeerStreams, "streams one browser peer may have open at once, both ways (half of them inbound at most)")
	f.Int64Var(&cfg.BrowserLimits.PeerMemory, "browser-peer-memory", p2p.DefaultBrowserPeerMemory, "bytes one browser peer's connections and streams may reserve (a WebRTC-direct connection reserves 2.5 MiB)")
	f.IntVar(&cfg.GossipQueueBytes, "gossip-queue-bytes", cfg.GossipQueueBytes, "bytes of gossip that may wait for one peer; past it its oldest messages are dropped")
	f.DurationVar(&cfg.HeaderTimeout, "header-timeout", cfg.HeaderTimeout, "how long an HTTP client may take to send a request's header before its connection is cut (checked 4 times a second); 0 takes the default")
	f.DurationVar(&cfg.IdleTimeout, "idle-timeout", cfg.IdleTimeout, "an HTTP keep-alive connection without a request for this long is closed (checked 4 times a second); 0 takes the default")
	f.DurationVar(&cfg.ShutdownGrace, "shutdown-grace", cfg.ShutdownGrace, "on SIGTERM, how long the requests under way and the gossip queued for peers each get to finish")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	f.BoolVar(&noSync, "no-sync", false, "do not fsync each write: faster, but a power loss may drop the last writes")
	f.Float64Var(&cfg.WallSocketRate, "wall-socket-rate", cfg.WallSocketRate, "frames a second the node takes from one wall socket, in bursts of twice that; a faster client is slowed down (not read meanwhile), never refused")
	f.Float64Var(&cfg.WallRoomRate, "wall-room-rate", cfg.WallRoomRate, "messages a second the node takes from all wall sockets of one cluster together, in bursts of twice that, pacing them likewise")
	f.Int64Var(&cfg.Wall.SendMemory, "wall-send-memory", cfg.Wall.SendMemory, "bytes of frames that may wait for all wall sockets of the node together; past it a socket that has frames waiting is closed as a slow consumer")
	f.Var((*zeroInf)(&cfg.Wall.ControlRate), "wall-control-rate", "control frames (pings, pongs, closes) a second one wall socket may send, in bursts of twice that; past it the socket is closed")
	f.IntVar(&cfg.Wall.ProofNonces, "wall-proof-nonces", cfg.Wall.ProofNonces, "nonces of wall connect proofs (did_verified) the node remembers, each for 240 s; past it signed connects are refused (503) until some are forgotten")
	f.StringSliceVar(&cfg.Quorum, "quorum", nil, "bootstrap nodes only: full multiaddrs of the initial voters of the Raft quorum that runs the directory, this node's included, the same list on each (3 or 5); starting again with the same list is harmless")
	f.DurationVar(&cfg.Raft.HeartbeatTimeout, "raft-heartbeat-timeout", cfg.Raft.HeartbeatTimeout, "quorum: a follower that has not heard from the leader for this long stands for election; writes stall about twice this when the leader dies")
	f.DurationVar(&cfg.Raft.ElectionTimeout, "raft-election-timeout", cfg.Raft.ElectionTimeout, "quorum: how long a candidate waits for votes; at least the heartbeat timeout")
	f.DurationVar(&cfg.Raft.LeaderLease, "raft-leader-lease", cfg.Raft.LeaderLease, "quorum: a leader that has not heard from a majority for this long steps down; at most the heartbeat timeout")
	f.DurationVar(&cfg.Raft.CommitTimeout, "raft-commit-timeout", cfg.Raft.CommitTimeout, "quorum: the longest the leader waits before sending new entries, or telling the followers what committed where no commit notice does at once (a write through a follower waits for that)")
	f.DurationVar(&cfg.Raft.RPCTimeout, "raft-rpc-timeout", cfg.Raft.RPCTimeout, "quorum: bound of one Raft RPC between members")
	f.DurationVar(&cfg.Raft.SnapshotInterval, "raft-snapshot-interval", cfg.Raft.SnapshotInterval, "quorum: how often a member checks whether to snapshot the directory and compact Raft's log")
	f.Uint64Var(&cfg.Raft.SnapshotThreshold, "raft-snapshot-threshold", cfg.Raft.SnapshotThreshold, "quorum: entries committed since the last snapshot that make a member take one")
	f.Uint64Var(&cfg.Raft.TrailingLogs, "raft-trailing-logs", cfg.Raft.TrailingLogs, "quorum: entries of Raft's log kept behind a snapshot; a member less far behind catches up from the log")
	f.Uint64Var(&cfg.ChangesKept, "changes-kept", cfg.ChangesKept, "latest entries of the directory's change log served (compacted every minute; older ones an agent's row refers to stay in the store); a node further behind installs a snapshot")
	f.DurationVar(&cfg.ForwardTimeout, "forward-timeout", cfg.ForwardTimeout, "bound of a write forwarded to the directory's leader, retries included; then 503 directory_unavailable")
	f.DurationVar(&cfg.ForwardRetry, "forward-retry", cfg.ForwardRetry, "pause between tries of a forwarded write while the quorum elects a leader")
	f.IntVar(&cfg.SearchRate, "search-rate", cfg.SearchRate, "searches (POST /v1/search) one client address may make a minute")
	f.IntVar(&cfg.SearchBurst, "search-burst", cfg.SearchBurst, "searches one client address may make at once")
	f.IntVar(&cfg.SearchConcurrency, "search-concurrency", cfg.SearchConcurrency, "searches the node ranks at once, whoever asks; 0 is one a core, -1 unbounded")
	f.DurationVar(&cfg.SearchWait, "search-wait", cfg.SearchWait, "how long a search past --search-concurrency waits for its turn before it is refused with 503 search_busy")
	f.Float64Var(&cfg.SolUSD, "sol-usd", cfg.SolUSD, "a fixed SOL/USD rate for the search's max_price_usd filter")
	f.StringVar(&cfg.SolUSDURL, "sol-usd-url", "", `URL polled for the SOL/USD rate instead: it answers a JSON number or {"usd": number}`)
	f.DurationVar(&cfg.SolUSDInterval, "sol-usd-interval", cfg.SolUSDInterval, "how often --sol-usd-url is polled")
	f.DurationVar(&cfg.SolUSDTimeout, "sol-usd-timeout", cfg.SolUSDTimeout, "how long one poll of --sol-usd-url may take")
	f.Var((*budgetFlag)(&cfg.Budgets.Client), "budget-client", "writes a second one client address (IPv4 address, IPv6 /64) may make without an agent's credential, as RATE/BURST")
	f.Var((*budgetFlag)(&cfg.Budgets.Credential), "budget-credential", "writes a second one registered agent (bearer token, or Mesh-Sig by its bound key) may make, as RATE/BURST")
	f.Var((*budgetFlag)(&cfg.Budgets.Node), "budget-node", "directory only: requests a second the directory takes from each node forwarding to it, as RATE/BURST")
	f.Var((*budgetFlag)(&cfg.Budgets.Directory), "budget-directory", "directory only: writes a second its log takes in all, as RATE/BURST")
	f.DurationVar(&cfg.Cards.Refresh, "card-refresh", cfg.Cards.Refresh, "directory only: each registered agent's card is fetched from its endpoint, and its liveness probed, at most once this often; 0 fetches and probes nothing")
	f.DurationVar(&cfg.Cards.Timeout, "card-fetch-timeout", cfg.Cards.Timeout, "directory only: bound of one card fetch, redirects and body included")
	f.Int64Var(&cfg.Cards.MaxBytes, "card-fetch-max-bytes", cfg.Cards.MaxBytes, "directory only: largest card a fetch reads, at most 65536")
	f.IntVar(&cfg.Cards.Concurrency, "card-fetch-concurrency", cfg.Cards.Concurrency, "directory only: card fetches under way at once in each lane: the walk, and new agents' first probes")
	f.IntVar(&cfg.Cards.Redirects, "card-fetch-redirects", cfg.Cards.Redirects, "directory only: redirects a card fetch follows, each hop checked like the first")
	f.StringSliceVar(&cfg.Cards.Allow, "card-fetch-allow", nil, "directory only: CIDR or address card fetches may reach although it is loopback, private, link-local, CGNAT or metadata, repeatable or comma-separated")
	f.DurationVar(&cfg.AgentActivationWindow, "agent-activation-window", cfg.AgentActivationWindow, "directory only: a new registration whose agent takes no token within this expires; 0 never")
	f.DurationVar(&cfg.ClusterJoinWindow, "cluster-join-window", cfg.ClusterJoinWindow, "directory only: a new public cluster nobody joins within this expires; 0 never")
	f.DurationVar(&cfg.ClusterSlugRedirect, "cluster-slug-redirect", cfg.ClusterSlugRedirect, "directory only: how long a renamed public cluster's former slug leads to it and is given to no other; 0 for ever")
	f.IntVar(&cfg.BoardQuota.Boards, "board-max-boards", cfg.BoardQuota.Boards, "directory only: boards one cluster may have")
	f.IntVar(&cfg.BoardQuota.BoardPosts, "board-max-posts", cfg.BoardQuota.BoardPosts, "directory only: live posts one board may hold")
	f.Int64Var(&cfg.BoardQuota.BoardBytes, "board-max-bytes", cfg.BoardQuota.BoardBytes, "directory only: bytes of live posts one board may hold")
	f.IntVar(&cfg.BoardQuota.ClusterPosts, "cluster-max-posts", cfg.BoardQuota.ClusterPosts, "directory only: live posts one cluster's boards may hold")
	f.Int64Var(&cfg.BoardQuota.ClusterBytes, "cluster-max-bytes", cfg.BoardQuota.ClusterBytes, "directory only: bytes of live posts one cluster's boards may hold")
	f.IntVar(&cfg.BoardIndexPosts, "board-index-posts", cfg.BoardIndexPosts, "posts this node's in-memory board indexes hold in all (the least recently read boards' go past it)")
	f.Int64Var(&cfg.ReadCacheBytes, "read-cache-bytes", cfg.ReadCacheBytes, "bytes of agents' rows (without their full cards) this node keeps decoded for reads, and at most 100,000 rows whatever this is; the rest are read from the store; 0 bounds them in rows alone")
	zeroUnlimited(f, "wall-socket-rate", "wall-room-rate", "wall-control-rate", "search-rate",
		"budget-client", "budget-credential", "budget-node", "budget-directory",
		"board-max-boards", "board-max-posts", "board-max-bytes", "cluster-max-posts", "cluster-max-bytes", "board-index-posts")
	bindEnv(f, "MESH_")
	return c
}

// budgetFlag is an admission.Budget as a flag: RATE/BURST, RATE, or 0.
type budgetFlag admission.Budget

func (b *budgetFlag) String() string { return admission.Budget(*b).String() }
func (b *budgetFlag) Type() string   { return "RATE/BURST" }
func (b *budgetFlag) Set(s string) error {
	v, err := admission.ParseBudget(s)
	if err == nil {
		*b = budgetFlag(v)
	}
	return err
}

func runNode(ctx context.Context, cfg node.Config) error {
	n, err := node.New(cfg)
	if err != nil {
		return err
	}
	return runUntilSignal(ctx, n, func() {
		fmt.Printf("mesh node %s (%s)\n  http  %s\n  did   %s\n  peer  %s\n  data  %s\n", node.Version, n.Role(), n.URL(), n.DID(), n.PeerID(), cfg.DataDir)
		for _, a := range n.P2PAddrs() {
			fmt.Printf("  addr  %s\n", a)
		}
	})
}

// daemon is what `mesh node` and `mesh coord` run.
type daemon interface {
	Start(context.Context) error
	Close() error
}

// restarter is a daemon that may ask to be started again (the coordination
// daemon, once it installed a new version).
type restarter interface {
	Restart() <-chan struct{}
}

// errRestart: the daemon closed because it asked to be started again.
var errRestart = errors.New("restart requested")

// runUntilSignal starts d, prints its banner once it runs, and closes it
// on SIGINT or SIGTERM (or when ctx ends), or when it asks for a restart
// (then errRestart, once it is closed).
func runUntilSignal(ctx context.Context, d daemon, banner func()) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := d.Start(ctx); err != nil {
		return err
	}
	banner()
	var restart <-chan struct{}
	if r, ok := d.(restarter); ok {
		restart = r.Restart()
	}
	select {
	case <-ctx.Done():
		fmt.Println("shutting down")
		return d.Close()
	case <-restart:
	}
	fmt.Println("restarting into the new version")
	if err := d.Close(); err != nil {
		return err
	}
	return errRestart
}

func newLogger(level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToUpper(level))); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l})), nil
}
