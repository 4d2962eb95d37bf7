package main

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentmesh/mesh/internal/bench"
	"github.com/agentmesh/mesh/node"
)

func benchFanoutCmd() *cobra.Command {
	var o bench.FanoutOptions
	var url string
	c := &cobra.Command{
		Use:   "wall-fanout",
		Short: "Deliveries per second on one node: one sender, many receivers",
		Long: `Connects --receivers sockets and one ghost sender to a new public cluster
and sends for --duration, keeping --window messages in flight. Without --url
it starts an in-memory node in this process with the send limits lifted;
with --url it drives that node over real sockets, under the node's own
limits (messages it refuses are counted), reports the node's memory per
connection from its /metrics, and deletes the cluster at the end.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Receivers < 1 || o.Window < 1 || o.Size < 2 || o.Duration <= 0 {
				return fmt.Errorf("--receivers and --window must be at least 1, --size at least 2 and --duration positive")
			}
			bench.RaiseFileLimit()
			urls, done, err := benchNodes(cmd, []string{url}, 1, bench.Unthrottled)
			if err != nil {
				return err
			}
			defer done()
			o.Memory = url != ""
			fmt.Fprintf(os.Stderr, "%d receivers, %d-byte messages, %d in flight, %s, at %s\n", o.Receivers, o.Size, o.Window, o.Duration, urls[0])
			res, err := bench.Fanout(cmd.Context(), urls[0], o)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), res)
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&url, "url", "", "base URL of a running node; empty starts an in-memory node")
	f.IntVar(&o.Receivers, "receivers", 1000, "receiving sockets")
	f.IntVar(&o.Size, "size", 512, "payload bytes")
	f.DurationVar(&o.Duration, "duration", 10*time.Second, "sending time")
	// A streaming sender keeps several messages in flight; 64 stays well
	// below a socket's send queue (256), so no receiver is dropped.
	f.IntVar(&o.Window, "window", 64, "messages in flight (sent, not yet answered)")
	return c
}

func benchLatencyCmd() *cobra.Command {
	var nodes int
	var urls []string
	var o bench.LatencyOptions
	c := &cobra.Command{
		Use:   "wall-latency",
		Short: "Send-to-receive latency across nodes: sender on the first, a receiver on each other",
		Long: `Sends --rate messages a second for --duration from one socket and times their
arrival at a receiver on each other node. Without --url it starts a mesh of
--nodes in-memory nodes in this process with the send limits lifted (the
bootstrap only relays the directory). With --url, repeatable, it drives
running nodes over real sockets: the sender on the first, a receiver on
each other one (a single --url puts both on that node), under the nodes'
own limits (messages refused are counted).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Rate < 1 || o.Duration <= 0 || nodes < 3 && len(urls) == 0 {
				return fmt.Errorf("--rate must be at least 1, --duration positive and --nodes at least 3")
			}
			bases, done, err := benchNodes(cmd, urls, nodes, bench.Unthrottled)
			if err != nil {
				return err
			}
			defer done()
			if len(bases) == 1 {
				bases = append(bases, bases[0])
			}
			fmt.Fprintf(os.Stderr, "sender on %s, receivers on %v, %d msg/s for %s\n", bases[0], bases[1:], o.Rate, o.Duration)
			res, err := bench.Latency(cmd.Context(), bases, o)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "latency:", res)
			return nil
		},
	}
	f := c.Flags()
	f.StringSliceVar(&urls, "url", nil, "base URL of a running node, repeatable: the sender on the first, a receiver on each other; none starts an in-memory mesh")
	f.IntVar(&nodes, "nodes", 4, "nodes of the in-memory mesh, the bootstrap included (sender and receivers use the others)")
	f.IntVar(&o.Rate, "rate", 200, "messages per second")
	f.DurationVar(&o.Duration, "duration", 10*time.Second, "sending time")
	f.IntVar(&o.Size, "size", 512, "payload bytes")
	return c
}

// benchNodes returns the base URLs a wall bench drives: urls, when given;
// else those of an in-process mesh of n nodes (with n > 1, all but the
// bootstrap, which only relays the directory), configured by tweak (nil:
// as mesh node without flags), which done closes.
func benchNodes(cmd *cobra.Command, urls []string, n int, tweak func(*node.Config)) ([]string, func(), error) {
	urls = slices.DeleteFunc(slices.Clone(urls), func(u string) bool { return u == "" })
	if len(urls) > 0 {
		for i, u := range urls {
			urls[i] = strings.TrimRight(u, "/")
		}
		return urls, func() {}, nil
	}
	m, err := bench.StartMesh(cmd.Context(), n, tweak)
	if err != nil {
		return nil, nil, err
	}
	nodes := m.Nodes
	if n > 1 {
		nodes = nodes[1:]
	}
	for _, nd := range nodes {
		urls = append(urls, nd.URL())
	}
	return urls, m.Close, nil
}

func benchMemoryCmd() *cobra.Command {
	var conns int
	c := &cobra.Command{
		Use:   "wall-memory",
		Short: "Memory per idle WebSocket connection, clients in another process",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			m, err := bench.StartMesh(cmd.Context(), 1, nil)
			if err != nil {
				return err
			}
			defer m.Close()
			self, err := os.Executable()
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "opening %d idle sockets from a client process\n", conns)
			res, err := bench.IdleMemory(cmd.Context(), m.Nodes[0].URL(), conns, func(url string, n int) *exec.Cmd {
				return exec.CommandContext(cmd.Context(), self, "bench", "wall-clients", url, strconv.Itoa(n))
			})
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), res)
			return nil
		},
	}
	c.Flags().IntVar(&conns, "conns", 10000, "idle sockets")
	return c
}

// benchClientsCmd is wall-memory's client process.
func benchClientsCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "wall-clients <ws-url> <n>",
		Hidden: true,
		Args:   cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := strconv.Atoi(args[1])
			if err != nil {
				return err
			}
			return bench.HoldClients(cmd.Context(), args[0], n, cmd.OutOrStdout(), cmd.InOrStdin())
		},
	}
}

func benchMeshCmd() *cobra.Command {
	var sizes []int
	var registrations, agents int
	c := &cobra.Command{
		Use:   "mesh",
		Short: "Registration propagation and DHT lookups across N in-process nodes",
		Long: `For each size N, starts N nodes on loopback (a bootstrap and N-1 nodes),
registers agents through them in turn and reports how long each took to be
served by every node (p50, p99, max); then looks agents up in the DHT from every
ordinary node, bypassing the local directory, and reports the latency.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bench.RaiseFileLimit()
			for _, n := range sizes {
				fmt.Fprintf(os.Stderr, "starting %d nodes\n", n)
				m, err := bench.StartMesh(cmd.Context(), n, bench.Unmetered)
				if err != nil {
					return err
				}
				vis, err := bench.Propagation(cmd.Context(), m, registrations)
				if err == nil {
					var dht bench.Percentiles
					if dht, err = bench.DHTLookups(cmd.Context(), m, agents); err == nil {
						fmt.Fprintf(cmd.OutOrStdout(), "%d nodes: registration visible on every node: %s; DHT lookup: %s\n", n, vis, dht)
					}
				}
				m.Close()
				if err != nil {
					return err
				}
			}
			return nil
		},
	}
	f := c.Flags()
	f.IntSliceVar(&sizes, "nodes", []int{5, 20}, "mesh sizes to measure")
	f.IntVar(&registrations, "registrations", 30, "registrations to time per size")
	f.IntVar(&agents, "agents", 10, "agents to look up per node")
	return c
}

func benchStreamCmd() *cobra.Command {
	var nodes int
	var urls []string
	var burst, rate int
	var duration time.Duration
	c := &cobra.Command{
		Use:   "wall-stream",
		Short: "A streamed answer under a node's limits: deltas delivered and the sender's ack delay",
		Long: `Streams deltas in the spec's convention ({type: message, stream, seq, delta,
done}) from one socket to a reader: first a burst of --burst deltas written
at once, then --rate deltas a second for --duration (either is skipped when
0). Reports the deltas the reader got in order, error frames, and the
delay of each ack after its delta was due. Without --url it starts
in-memory nodes with the default limits of ` + "`mesh node`" + `: with --nodes 1,
sender and reader on one node; with 2, on two nodes joined to a bootstrap.
With --url, repeatable, it drives running nodes: the sender on the first,
the reader on the last.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if burst < 0 || rate < 0 || burst == 0 && rate == 0 || rate > 0 && duration <= 0 || len(urls) == 0 && nodes != 1 && nodes != 2 {
				return fmt.Errorf("give --burst, or --rate with a positive --duration, or both; --nodes is 1 or 2")
			}
			// Two nodes: two joined to a bootstrap, which only relays
			// the directory; all with the limits of mesh node.
			bases, done, err := benchNodes(cmd, urls, map[int]int{1: 1, 2: 3}[nodes], nil)
			if err != nil {
				return err
			}
			defer done()
			fmt.Fprintf(os.Stderr, "sender on %s, reader on %s\n", bases[0], bases[len(bases)-1])
			for _, o := range []bench.StreamOptions{{Burst: burst}, {Rate: rate, Duration: duration}} {
				if o.Burst == 0 && o.Rate == 0 {
					continue
				}
				res, err := bench.Stream(cmd.Context(), bases, o)
				if err != nil {
					return err
				}
				what := fmt.Sprintf("burst of %d", o.Burst)
				if o.Rate > 0 {
					what = fmt.Sprintf("%d/s for %s", o.Rate, o.Duration)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s: %s\n", what, res)
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringSliceVar(&urls, "url", nil, "base URL of a running node, repeatable: the sender on the first, the reader on the last; none starts in-memory nodes")
	f.IntVar(&nodes, "nodes", 1, "in-memory nodes: 1 (sender and reader on one) or 2")
	f.IntVar(&burst, "burst", 300, "deltas written at once (0: no burst)")
	f.IntVar(&rate, "rate", 100, "deltas a second after the burst (0: none)")
	f.DurationVar(&duration, "duration", 60*time.Second, "how long to stream at --rate")
	return c
}

func benchFloodCmd() *cobra.Command {
	var o bench.FloodOptions
	var url string
	c := &cobra.Command{
		Use:   "wall-flood",
		Short: "A ping flood on a running node's lobby, and the node's memory meanwhile",
		Long: `Opens --sockets WebSockets on a running node's open lobby (as ghosts, no
credentials), each with a 4 KiB receive buffer and never reading, and sends
batches of 125-byte pings on each for --duration; a socket the node closes
connects again at once. Samples the node's resident memory from its
/metrics every 100 ms and reports it before, at its peak and at the end,
and whether the node still answers /health. Run it against a node in
another process (mesh node): the measurement is of that process.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if url == "" || o.Sockets < 1 || o.Duration <= 0 {
				return fmt.Errorf("--url is required, --sockets at least 1 and --duration positive")
			}
			fmt.Fprintf(os.Stderr, "%d sockets flooding pings for %s at %s\n", o.Sockets, o.Duration, url)
			res, err := bench.PingFlood(cmd.Context(), strings.TrimRight(url, "/"), o)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), res)
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&url, "url", "", "base URL of the running node to flood")
	f.IntVar(&o.Sockets, "sockets", 4, "flooding sockets")
	f.DurationVar(&o.Duration, "duration", 10*time.Second, "flooding time")
	return c
}
