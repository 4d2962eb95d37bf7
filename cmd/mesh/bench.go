package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentmesh/mesh/internal/bench"
	"github.com/agentmesh/mesh/internal/loadgen"
	"github.com/agentmesh/mesh/node"
)

func benchCmd() *cobra.Command {
	c := &cobra.Command{Use: "bench", Short: "Measure a node's performance"}
	c.AddCommand(benchGetAgentCmd(), benchFanoutCmd(), benchLatencyCmd(), benchStreamCmd(), benchMemoryCmd(), benchClientsCmd(), benchFloodCmd(), benchMeshCmd(), benchWriteFloodCmd(), benchQuorumCmd())
	return c
}

func benchGetAgentCmd() *cobra.Command {
	var url string
	var agents, conc int
	var dur time.Duration
	c := &cobra.Command{
		Use:   "get-agent",
		Short: "Drive GET /v1/agents/<id> over HTTP and report requests/s and latency",
		Long: `Registers --agents agents, then drives GET /v1/agents/<id> over real HTTP for
--duration with --concurrency connections. Without --url it starts an
in-memory node on a loopback port in this process, without write budgets.
A running node takes 100 registrations at once from one address, then 5 a
second (its --budget-client): the bench waits as told (Retry-After), so
start the node with --budget-client 0 to register many agents quickly.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if agents < 1 || conc < 1 || dur <= 0 {
				return fmt.Errorf("--agents and --concurrency must be at least 1 and --duration positive")
			}
			ctx := cmd.Context()
			if url == "" {
				n, err := startBenchNode(ctx, bench.Unmetered)
				if err != nil {
					return err
				}
				defer n.Close()
				url = n.URL()
			}
			// Ids of this run only, so that runs against one node do not collide.
			prefix := fmt.Sprintf("bench-%x", time.Now().UnixNano())
			fmt.Fprintf(os.Stderr, "registering %d agents at %s\n", agents, url)
			for i := range agents {
				body := fmt.Sprintf(`{"agent_id":"%s-%d","capabilities":["echo"],"endpoint":"https://bench.example/%d"}`, prefix, i, i)
				if err := loadgen.Post(ctx, url+"/v1/agents/register", body); err != nil {
					return err
				}
			}
			fmt.Fprintf(os.Stderr, "GET /v1/agents/<id> for %s with %d connections\n", dur, conc)
			res := loadgen.Run(ctx, loadgen.Options{
				Concurrency: conc, Duration: dur,
				Request: func(w, i int) (*http.Request, error) {
					return http.NewRequest("GET", fmt.Sprintf("%s/v1/agents/%s-%d", url, prefix, (w*7919+i)%agents), nil)
				},
				Progress: func(done int64) { fmt.Fprintf(os.Stderr, "  %d requests\n", done) },
			})
			fmt.Fprintln(cmd.OutOrStdout(), res)
			if res.Errors > 0 {
				return fmt.Errorf("%d requests failed", res.Errors)
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&url, "url", "", "node base URL; empty starts an in-memory node")
	f.IntVar(&agents, "agents", 1000, "agents to register first")
	f.IntVar(&conc, "concurrency", 16, "parallel connections")
	f.DurationVar(&dur, "duration", 10*time.Second, "measured duration")
	return c
}

// startBenchNode starts an in-memory node on a loopback port, with
// DefaultConfig as tweaked.
func startBenchNode(ctx context.Context, tweaks ...func(*node.Config)) (*node.Node, error) {
	cfg := node.DefaultConfig()
	cfg.InMemory, cfg.DataDir, cfg.HTTPAddr = true, "", "127.0.0.1:0"
	for _, tweak := range tweaks {
		tweak(&cfg)
	}
	n, err := node.New(cfg)
	if err != nil {
		return nil, err
	}
	return n, n.Start(ctx)
}

func benchWriteFloodCmd() *cobra.Command {
	var o bench.WriteFloodOptions
	c := &cobra.Command{
		Use:     "write-flood",
		Aliases: []string{"flood"},
		Short:   "Measure honest registrations while one address, a rogue node or many addresses flood the directory",
		Long: `Starts a directory and two nodes in this process (in-memory stores, default
write budgets) and, for --duration each, measures honest registrations
through one node (--honest-rate a second, each from an address of its own)
while: nothing floods; one address floods the other node with registrations
(--flooders in flight); a rogue peer forwards registrations to the directory
at full speed, each naming a client of its own invention; many addresses
register on the directory at full speed, each once. Reports, per phase, the
flood's requests a second sent and taken, the honest registrations' p50,
p99 and failures, and the writes a second the directory's log took.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Duration <= 0 || o.Flooders < 1 || o.HonestRate <= 0 {
				return fmt.Errorf("--duration, --flooders and --honest-rate must be positive")
			}
			bench.RaiseFileLimit()
			phases, err := bench.WriteFlood(cmd.Context(), o)
			for _, p := range phases {
				fmt.Fprintln(cmd.OutOrStdout(), p)
			}
			return err
		},
	}
	f := c.Flags()
	f.DurationVar(&o.Duration, "duration", 10*time.Second, "length of each phase")
	f.IntVar(&o.Flooders, "flooders", 64, "flood requests kept in flight")
	f.Float64Var(&o.HonestRate, "honest-rate", 20, "honest registrations a second, each from its own address")
	return c
}

func benchQuorumCmd() *cobra.Command {
	o := bench.QuorumOptions{Size: 3, Concurrency: 16, Duration: 5 * time.Second, Rounds: 3}
	c := &cobra.Command{
		Use:   "quorum",
		Short: "Compare registrations through a lone directory and through a quorum, fsync on",
		Long: `Starts a lone directory and a quorum of --size bootstrap nodes, in this
process on this machine's disk (--dir, a temporary directory by default) with
fsync on and no write budgets, and registers new agents from --concurrency
clients for --duration through the lone directory, the quorum's leader and one
of its followers in turn, --rounds times. Reports each one's registrations a
second, p50 and p99 and the CPU this process spent a registration, the
quorum's rate and p99 as shares of the lone directory's in each round, and
the median share and CPU over the rounds.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Size < 1 || o.Concurrency < 1 || o.Duration <= 0 || o.Rounds < 1 {
				return fmt.Errorf("--size, --concurrency and --rounds must be at least 1 and --duration positive")
			}
			rounds, err := bench.Quorum(cmd.Context(), o)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			var leader, follower []float64
			cpu := make([][]float64, 3) // ms a registration: lone, to the leader, through a follower
			for i, r := range rounds {
				for j, s := range []bench.QuorumSetup{r.Lone, r.Leader, r.Follower} {
					cpu[j] = append(cpu[j], float64(s.CPU)/float64(time.Millisecond))
				}
				fmt.Fprintf(w, "round %d\n  lone directory: %s\n  quorum of %d, to the leader: %s\n  quorum of %d, through a follower: %s\n",
					i+1, setup(r.Lone), o.Size, setup(r.Leader), o.Size, setup(r.Follower))
				leader = append(leader, r.Leader.PerSecond/r.Lone.PerSecond)
				follower = append(follower, r.Follower.PerSecond/r.Lone.PerSecond)
				fmt.Fprintf(w, "  to the leader %.2f of the lone directory's rate (p99 %.2f times its), through a follower %.2f (p99 %.2f times)\n",
					leader[i], float64(r.Leader.P99)/float64(r.Lone.P99), follower[i], float64(r.Follower.P99)/float64(r.Lone.P99))
				if n := r.Lone.Errors + r.Leader.Errors + r.Follower.Errors; n > 0 {
					return fmt.Errorf("round %d: %d registrations failed", i+1, n)
				}
			}
			fmt.Fprintf(w, "median of %d rounds: to the leader %.2f of the lone directory's rate, through a follower %.2f\n",
				len(rounds), median(leader), median(follower))
			if median(cpu[0]) > 0 {
				fmt.Fprintf(w, "median CPU a registration (every node and client in this process): lone %.2f ms, to the leader %.2f ms, through a follower %.2f ms\n",
					median(cpu[0]), median(cpu[1]), median(cpu[2]))
			}
			return nil
		},
	}
	f := c.Flags()
	f.IntVar(&o.Size, "size", o.Size, "members of the quorum")
	f.IntVar(&o.Concurrency, "concurrency", o.Concurrency, "clients registering at once")
	f.DurationVar(&o.Duration, "duration", o.Duration, "how long each setup is measured in a round")
	f.IntVar(&o.Rounds, "rounds", o.Rounds, "rounds: the setups take turns, so that a machine's changing load weighs on each alike")
	f.StringVar(&o.Dir, "dir", "", "where the nodes keep their stores; a temporary directory by default")
	return c
}

// setup is a setup's line of bench quorum: its rate and latencies, and the
// CPU a registration took, when it was read.
func setup(s bench.QuorumSetup) string {
	if s.CPU == 0 {
		return s.Result.String()
	}
	return fmt.Sprintf("%s, CPU %.2f ms a registration", s.Result, float64(s.CPU)/float64(time.Millisecond))
}

// median of xs (the upper one of an even count).
func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	return s[len(s)/2]
}
