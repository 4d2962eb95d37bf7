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
			urls, done, err := benchNodes(cmd, []string{url}, 1)
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
			bases, done, err := benchNodes(cmd, urls, nodes)
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
// bootstrap, which only relays the directory), send limits lifted, which
// done closes.
func benchNodes(cmd *cobra.Command, urls []string, n int) ([]string, func(), error) {
	urls = slices.DeleteFunc(slices.Clone(urls), func(u string) bool { return u == "" })
	if len(urls) > 0 {
		for i, u := range urls {
			urls[i] = strings.TrimRight(u, "/")
		}
		return urls, func() {}, nil
	}
	m, err := bench.StartMesh(cmd.Context(), n, bench.Unthrottled)
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
