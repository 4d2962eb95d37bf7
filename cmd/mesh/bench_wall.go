package main

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentmesh/mesh/internal/bench"
)

func benchFanoutCmd() *cobra.Command {
	var o bench.FanoutOptions
	c := &cobra.Command{
		Use:   "wall-fanout",
		Short: "Deliveries per second on one node: one sender, many receivers",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bench.RaiseFileLimit()
			m, err := bench.StartMesh(cmd.Context(), 1, bench.Unthrottled)
			if err != nil {
				return err
			}
			defer m.Close()
			fmt.Fprintf(os.Stderr, "%d receivers, %d-byte messages, %d in flight, %s\n", o.Receivers, o.Size, o.Window, o.Duration)
			res, err := bench.Fanout(cmd.Context(), m.Nodes[0].URL(), o)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), res)
			return nil
		},
	}
	f := c.Flags()
	f.IntVar(&o.Receivers, "receivers", 1000, "receiving sockets")
	f.IntVar(&o.Size, "size", 512, "payload bytes")
	f.DurationVar(&o.Duration, "duration", 10*time.Second, "sending time")
	// A streaming sender keeps several messages in flight; 64 stays well
	// below a socket's send queue (256), so no receiver is dropped.
	f.IntVar(&o.Window, "window", 64, "messages in flight (sent, not yet acked)")
	return c
}

func benchLatencyCmd() *cobra.Command {
	var nodes int
	var o bench.LatencyOptions
	c := &cobra.Command{
		Use:   "wall-latency",
		Short: "Send-to-receive latency across nodes: sender on the first, a receiver on each other",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			m, err := bench.StartMesh(cmd.Context(), nodes, bench.Unthrottled)
			if err != nil {
				return err
			}
			defer m.Close()
			var bases []string
			for _, n := range m.Nodes[1:] { // the bootstrap only relays the directory
				bases = append(bases, n.URL())
			}
			fmt.Fprintf(os.Stderr, "sender on 1 node, receivers on %d others, %d msg/s for %s\n", len(bases)-1, o.Rate, o.Duration)
			res, err := bench.Latency(cmd.Context(), bases, o)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "cross-node latency:", res)
			return nil
		},
	}
	f := c.Flags()
	f.IntVar(&nodes, "nodes", 4, "nodes in the mesh, the bootstrap included (sender and receivers use the others)")
	f.IntVar(&o.Rate, "rate", 200, "messages per second")
	f.DurationVar(&o.Duration, "duration", 10*time.Second, "sending time")
	f.IntVar(&o.Size, "size", 512, "payload bytes")
	return c
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
				m, err := bench.StartMesh(cmd.Context(), n, nil)
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
