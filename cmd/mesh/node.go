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
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := flagsFromEnv(cmd.Flags(), nodeEnv); err != nil {
				return err
			}
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
	f.StringVar(&cfg.DataDir, "data", env("MESH_DATA", cfg.DataDir), "data directory (env MESH_DATA)")
	f.StringVar(&cfg.HTTPAddr, "http", env("MESH_HTTP", cfg.HTTPAddr), "HTTP listen address (env MESH_HTTP)")
	f.StringVar(&cfg.PublicURL, "public-url", env("MESH_PUBLIC_URL", ""), "base URL clients reach this node at; default http://<http address> (env MESH_PUBLIC_URL)")
	f.StringSliceVar(&cfg.TrustedProxies, "trusted-proxy", envList("MESH_TRUSTED_PROXY", nil), "CIDR or IP of a reverse proxy whose X-Forwarded-For names the client, repeatable or comma-separated; trust only your own proxies (env MESH_TRUSTED_PROXY)")
	f.StringVar(&cfg.Role, "role", env("MESH_ROLE", ""), "bootstrap (runs the directory) or node; default: node when --bootstrap is given without --quorum, else bootstrap (env MESH_ROLE)")
	f.StringSliceVar(&cfg.Listen, "listen", envList("MESH_LISTEN", cfg.Listen), "libp2p listen multiaddrs, repeatable or comma-separated (env MESH_LISTEN)")
	f.StringSliceVar(&cfg.Bootstrap, "bootstrap", envList("MESH_BOOTSTRAP", nil), "full multiaddr of a bootstrap node (…/p2p/<peer id>), repeatable; the first is the directory (env MESH_BOOTSTRAP)")
	f.BoolVar(&cfg.DHTServer, "dht-server", env("MESH_DHT_SERVER", "") != "", "always answer DHT queries; without it bootstrap nodes, --reachability public and nodes AutoNAT finds reachable do (env MESH_DHT_SERVER)")
	f.StringVar(&cfg.Reachability, "reachability", env("MESH_REACHABILITY", ""), "public, private (behind NAT: use the bootstrap relays) or empty to detect; bootstrap nodes default to public (env MESH_REACHABILITY)")
	f.IntVar(&cfg.GossipQueueBytes, "gossip-queue-bytes", cfg.GossipQueueBytes, "bytes of gossip that may wait for one peer; past it its oldest messages are dropped (env MESH_GOSSIP_QUEUE_BYTES)")
	f.DurationVar(&cfg.ShutdownGrace, "shutdown-grace", cfg.ShutdownGrace, "on SIGTERM, how long the requests under way and the gossip queued for peers each get to finish (env MESH_SHUTDOWN_GRACE)")
	f.StringVar(&logLevel, "log-level", env("MESH_LOG_LEVEL", "info"), "debug, info, warn or error (env MESH_LOG_LEVEL)")
	f.BoolVar(&noSync, "no-sync", env("MESH_NO_SYNC", "") != "", "do not fsync each write: faster, but a power loss may drop the last writes (env MESH_NO_SYNC)")
	f.Float64Var(&cfg.WallSocketRate, "wall-socket-rate", cfg.WallSocketRate, "frames a second the node takes from one wall socket, in bursts of twice that; a faster client is slowed down (not read meanwhile), never refused; 0 is unlimited (env MESH_WALL_SOCKET_RATE)")
	f.Float64Var(&cfg.WallRoomRate, "wall-room-rate", cfg.WallRoomRate, "messages a second the node takes from all wall sockets of one cluster together, in bursts of twice that, pacing them likewise; 0 is unlimited (env MESH_WALL_ROOM_RATE)")
	f.Int64Var(&cfg.Wall.SendMemory, "wall-send-memory", cfg.Wall.SendMemory, "bytes of frames that may wait for all wall sockets of the node together; past it a socket that has frames waiting is closed as a slow consumer (env MESH_WALL_SEND_MEMORY)")
	f.Float64Var(&cfg.Wall.ControlRate, "wall-control-rate", cfg.Wall.ControlRate, "control frames (pings, pongs, closes) a second one wall socket may send, in bursts of twice that; past it the socket is closed (env MESH_WALL_CONTROL_RATE)")
	f.IntVar(&cfg.Wall.ProofNonces, "wall-proof-nonces", cfg.Wall.ProofNonces, "nonces of wall connect proofs (did_verified) the node remembers, each for 240 s; past it signed connects are refused (503) until some are forgotten (env MESH_WALL_PROOF_NONCES)")
	f.StringSliceVar(&cfg.Quorum, "quorum", envList("MESH_QUORUM", nil), "bootstrap nodes only: full multiaddrs of the initial voters of the Raft quorum that runs the directory, this node's included, the same list on each (3 or 5); starting again with the same list is harmless (env MESH_QUORUM)")
	f.DurationVar(&cfg.Raft.HeartbeatTimeout, "raft-heartbeat-timeout", cfg.Raft.HeartbeatTimeout, "quorum: a follower that has not heard from the leader for this long stands for election; writes stall about twice this when the leader dies (env MESH_RAFT_HEARTBEAT_TIMEOUT)")
	f.DurationVar(&cfg.Raft.ElectionTimeout, "raft-election-timeout", cfg.Raft.ElectionTimeout, "quorum: how long a candidate waits for votes; at least the heartbeat timeout (env MESH_RAFT_ELECTION_TIMEOUT)")
	f.DurationVar(&cfg.Raft.LeaderLease, "raft-leader-lease", cfg.Raft.LeaderLease, "quorum: a leader that has not heard from a majority for this long steps down; at most the heartbeat timeout (env MESH_RAFT_LEADER_LEASE)")
	f.DurationVar(&cfg.Raft.CommitTimeout, "raft-commit-timeout", cfg.Raft.CommitTimeout, "quorum: the longest the leader waits before sending new entries (env MESH_RAFT_COMMIT_TIMEOUT)")
	f.DurationVar(&cfg.Raft.RPCTimeout, "raft-rpc-timeout", cfg.Raft.RPCTimeout, "quorum: bound of one Raft RPC between members (env MESH_RAFT_RPC_TIMEOUT)")
	f.DurationVar(&cfg.Raft.SnapshotInterval, "raft-snapshot-interval", cfg.Raft.SnapshotInterval, "quorum: how often a member checks whether to snapshot the directory and compact Raft's log (env MESH_RAFT_SNAPSHOT_INTERVAL)")
	f.Uint64Var(&cfg.Raft.SnapshotThreshold, "raft-snapshot-threshold", cfg.Raft.SnapshotThreshold, "quorum: entries committed since the last snapshot that make a member take one (env MESH_RAFT_SNAPSHOT_THRESHOLD)")
	f.Uint64Var(&cfg.Raft.TrailingLogs, "raft-trailing-logs", cfg.Raft.TrailingLogs, "quorum: entries of Raft's log kept behind a snapshot; a member less far behind catches up from the log (env MESH_RAFT_TRAILING_LOGS)")
	f.Uint64Var(&cfg.ChangesKept, "changes-kept", cfg.ChangesKept, "latest entries of the directory's change log kept (compacted every minute); a node further behind installs a snapshot (env MESH_CHANGES_KEPT)")
	f.DurationVar(&cfg.ForwardTimeout, "forward-timeout", cfg.ForwardTimeout, "bound of a write forwarded to the directory's leader, retries included; then 503 directory_unavailable (env MESH_FORWARD_TIMEOUT)")
	f.DurationVar(&cfg.ForwardRetry, "forward-retry", cfg.ForwardRetry, "pause between tries of a forwarded write while the quorum elects a leader (env MESH_FORWARD_RETRY)")
	f.IntVar(&cfg.SearchRate, "search-rate", cfg.SearchRate, "searches (POST /v1/search) one client address may make a minute (env MESH_SEARCH_RATE)")
	f.IntVar(&cfg.SearchBurst, "search-burst", cfg.SearchBurst, "searches one client address may make at once (env MESH_SEARCH_BURST)")
	f.Float64Var(&cfg.SolUSD, "sol-usd", cfg.SolUSD, "a fixed SOL/USD rate for the search's max_price_usd filter (env MESH_SOL_USD)")
	f.StringVar(&cfg.SolUSDURL, "sol-usd-url", env("MESH_SOL_USD_URL", ""), `URL polled for the SOL/USD rate instead: it answers a JSON number or {"usd": number} (env MESH_SOL_USD_URL)`)
	f.DurationVar(&cfg.SolUSDInterval, "sol-usd-interval", cfg.SolUSDInterval, "how often --sol-usd-url is polled (env MESH_SOL_USD_INTERVAL)")
	f.DurationVar(&cfg.SolUSDTimeout, "sol-usd-timeout", cfg.SolUSDTimeout, "how long one poll of --sol-usd-url may take (env MESH_SOL_USD_TIMEOUT)")
	f.Var((*budgetFlag)(&cfg.Budgets.Client), "budget-client", "writes a second one client address (IPv4 address, IPv6 /64) may make without an agent's credential, as RATE/BURST; 0 is unlimited (env MESH_BUDGET_CLIENT)")
	f.Var((*budgetFlag)(&cfg.Budgets.Credential), "budget-credential", "writes a second one registered agent (bearer token, or Mesh-Sig by its bound key) may make, as RATE/BURST; 0 is unlimited (env MESH_BUDGET_CREDENTIAL)")
	f.Var((*budgetFlag)(&cfg.Budgets.Node), "budget-node", "directory only: requests a second the directory takes from each node forwarding to it, as RATE/BURST; 0 is unlimited (env MESH_BUDGET_NODE)")
	f.Var((*budgetFlag)(&cfg.Budgets.Directory), "budget-directory", "directory only: writes a second its log takes in all, as RATE/BURST; 0 is unlimited (env MESH_BUDGET_DIRECTORY)")
	f.DurationVar(&cfg.Cards.Refresh, "card-refresh", cfg.Cards.Refresh, "directory only: each registered agent's card is fetched from its endpoint, and its liveness probed, at most once this often; 0 fetches and probes nothing (env MESH_CARD_REFRESH)")
	f.DurationVar(&cfg.Cards.Timeout, "card-fetch-timeout", cfg.Cards.Timeout, "directory only: bound of one card fetch, redirects and body included (env MESH_CARD_FETCH_TIMEOUT)")
	f.Int64Var(&cfg.Cards.MaxBytes, "card-fetch-max-bytes", cfg.Cards.MaxBytes, "directory only: largest card a fetch reads, at most 65536 (env MESH_CARD_FETCH_MAX_BYTES)")
	f.IntVar(&cfg.Cards.Concurrency, "card-fetch-concurrency", cfg.Cards.Concurrency, "directory only: card fetches under way at once (env MESH_CARD_FETCH_CONCURRENCY)")
	f.IntVar(&cfg.Cards.Redirects, "card-fetch-redirects", cfg.Cards.Redirects, "directory only: redirects a card fetch follows, each hop checked like the first (env MESH_CARD_FETCH_REDIRECTS)")
	f.StringSliceVar(&cfg.Cards.Allow, "card-fetch-allow", envList("MESH_CARD_FETCH_ALLOW", nil), "directory only: CIDR or address card fetches may reach although it is loopback, private, link-local, CGNAT or metadata, repeatable or comma-separated (env MESH_CARD_FETCH_ALLOW)")
	f.DurationVar(&cfg.AgentActivationWindow, "agent-activation-window", cfg.AgentActivationWindow, "directory only: a new registration whose agent takes no token within this expires; 0 never (env MESH_AGENT_ACTIVATION_WINDOW)")
	f.DurationVar(&cfg.ClusterJoinWindow, "cluster-join-window", cfg.ClusterJoinWindow, "directory only: a new public cluster nobody joins within this expires; 0 never (env MESH_CLUSTER_JOIN_WINDOW)")
	f.DurationVar(&cfg.ClusterSlugRedirect, "cluster-slug-redirect", cfg.ClusterSlugRedirect, "directory only: how long a renamed public cluster's former slug leads to it and is given to no other; 0 for ever (env MESH_CLUSTER_SLUG_REDIRECT)")
	f.IntVar(&cfg.BoardQuota.Boards, "board-max-boards", cfg.BoardQuota.Boards, "directory only: boards one cluster may have; 0 unlimited (env MESH_BOARD_MAX_BOARDS)")
	f.IntVar(&cfg.BoardQuota.BoardPosts, "board-max-posts", cfg.BoardQuota.BoardPosts, "directory only: live posts one board may hold; 0 unlimited (env MESH_BOARD_MAX_POSTS)")
	f.Int64Var(&cfg.BoardQuota.BoardBytes, "board-max-bytes", cfg.BoardQuota.BoardBytes, "directory only: bytes of live posts one board may hold; 0 unlimited (env MESH_BOARD_MAX_BYTES)")
	f.IntVar(&cfg.BoardQuota.ClusterPosts, "cluster-max-posts", cfg.BoardQuota.ClusterPosts, "directory only: live posts one cluster's boards may hold; 0 unlimited (env MESH_CLUSTER_MAX_POSTS)")
	f.Int64Var(&cfg.BoardQuota.ClusterBytes, "cluster-max-bytes", cfg.BoardQuota.ClusterBytes, "directory only: bytes of live posts one cluster's boards may hold; 0 unlimited (env MESH_CLUSTER_MAX_BYTES)")
	f.IntVar(&cfg.BoardIndexPosts, "board-index-posts", cfg.BoardIndexPosts, "posts this node's in-memory board indexes hold in all (the least recently read boards' go past it); 0 unlimited (env MESH_BOARD_INDEX_POSTS)")
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

// nodeEnv names the environment variables of the `mesh node` flags that
// flagsFromEnv applies (the others read theirs as their default).
var nodeEnv = map[string]string{
	"wall-socket-rate":   "MESH_WALL_SOCKET_RATE",
	"wall-room-rate":     "MESH_WALL_ROOM_RATE",
	"wall-send-memory":   "MESH_WALL_SEND_MEMORY",
	"wall-control-rate":  "MESH_WALL_CONTROL_RATE",
	"wall-proof-nonces":  "MESH_WALL_PROOF_NONCES",
	"gossip-queue-bytes": "MESH_GOSSIP_QUEUE_BYTES",
	"shutdown-grace":     "MESH_SHUTDOWN_GRACE",

	"raft-heartbeat-timeout":  "MESH_RAFT_HEARTBEAT_TIMEOUT",
	"raft-election-timeout":   "MESH_RAFT_ELECTION_TIMEOUT",
	"raft-leader-lease":       "MESH_RAFT_LEADER_LEASE",
	"raft-commit-timeout":     "MESH_RAFT_COMMIT_TIMEOUT",
	"raft-rpc-timeout":        "MESH_RAFT_RPC_TIMEOUT",
	"raft-snapshot-interval":  "MESH_RAFT_SNAPSHOT_INTERVAL",
	"raft-snapshot-threshold": "MESH_RAFT_SNAPSHOT_THRESHOLD",
	"raft-trailing-logs":      "MESH_RAFT_TRAILING_LOGS",
	"changes-kept":            "MESH_CHANGES_KEPT",
	"forward-timeout":         "MESH_FORWARD_TIMEOUT",
	"forward-retry":           "MESH_FORWARD_RETRY",
	"search-rate":             "MESH_SEARCH_RATE",
	"search-burst":            "MESH_SEARCH_BURST",
	"sol-usd":                 "MESH_SOL_USD",
	"sol-usd-interval":        "MESH_SOL_USD_INTERVAL",
	"sol-usd-timeout":         "MESH_SOL_USD_TIMEOUT",
	"budget-client":           "MESH_BUDGET_CLIENT",
	"budget-credential":       "MESH_BUDGET_CREDENTIAL",
	"budget-node":             "MESH_BUDGET_NODE",
	"budget-directory":        "MESH_BUDGET_DIRECTORY",

	"card-refresh":           "MESH_CARD_REFRESH",
	"card-fetch-timeout":     "MESH_CARD_FETCH_TIMEOUT",
	"card-fetch-max-bytes":   "MESH_CARD_FETCH_MAX_BYTES",
	"card-fetch-concurrency": "MESH_CARD_FETCH_CONCURRENCY",
	"card-fetch-redirects":   "MESH_CARD_FETCH_REDIRECTS",

	"agent-activation-window": "MESH_AGENT_ACTIVATION_WINDOW",
	"cluster-join-window":     "MESH_CLUSTER_JOIN_WINDOW",
	"cluster-slug-redirect":   "MESH_CLUSTER_SLUG_REDIRECT",
	"board-max-boards":        "MESH_BOARD_MAX_BOARDS",
	"board-max-posts":         "MESH_BOARD_MAX_POSTS",
	"board-max-bytes":         "MESH_BOARD_MAX_BYTES",
	"cluster-max-posts":       "MESH_CLUSTER_MAX_POSTS",
	"cluster-max-bytes":       "MESH_CLUSTER_MAX_BYTES",
	"board-index-posts":       "MESH_BOARD_INDEX_POSTS",
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
