package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentmesh/mesh/internal/bench"
	"github.com/agentmesh/mesh/node"
)

func benchCmd() *cobra.Command {
	c := &cobra.Command{Use: "bench", Short: "Measure a node's performance"}
	c.AddCommand(benchGetAgentCmd(), benchFanoutCmd(), benchLatencyCmd(), benchStreamCmd(), benchMemoryCmd(), benchClientsCmd(), benchFloodCmd(), benchMeshCmd(), benchWriteFloodCmd(), benchCardMemoryCmd(), benchServeBytesCmd(), benchSearchCrowdCmd(), benchQuorumCmd())
	return c
}

func benchGetAgentCmd() *cobra.Command {
	o := bench.GetAgentOptions{Agents: 1000, Concurrency: 16, Duration: 4 * time.Second, Rounds: 5, Slice: time.Second}
	c := &cobra.Command{
		Use:   "get-agent",
		Short: "Drive GET /v1/agents/<id> over HTTP against plain net/http writing the same bytes",
		Long: `Registers --agents agents, reads each one's answer to GET /v1/agents/<id>
once, and starts the baseline in a process of its own: plain net/http
answering each id with those same bytes. Then drives GET /v1/agents/<id>
over real HTTP with --concurrency connections, against the node and the
baseline, --rounds times each for --duration: a round drives the two in
turns of --slice (node, baseline, baseline, node, ...), so that both meet
the same seconds of a shared machine, and pools each one's turns; each
round has processes of its own (the baseline started afresh, and the node
run again on its data when the bench started it): on a shared machine two
processes of one program can differ for their whole life. It
prints requests/s, p50, p99 and max of each run and the node's
throughput and p99 as multiples of the baseline's. Without --url it starts a node (mesh
node, without write budgets) in a process of its own too. A running node
takes 100 registrations at once from one address, then 5 a second (its
--budget-client): the bench waits as told (Retry-After), so start the
node with --budget-client 0 to register many agents quickly.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Agents < 1 || o.Concurrency < 1 || o.Duration <= 0 || o.Rounds < 1 || o.Slice < 0 {
				return fmt.Errorf("--agents, --concurrency and --rounds must be at least 1, --duration positive and --slice not negative")
			}
			return runInProcesses(cmd, "mesh-get-agent-", func(exe, dir string) (fmt.Stringer, error) {
				o.Exe, o.Dir, o.Progress = exe, dir, os.Stderr
				return bench.GetAgent(cmd.Context(), o)
			})
		},
	}
	f := c.Flags()
	f.StringVar(&o.URL, "url", "", "node base URL; empty starts a node in a process of its own")
	f.IntVar(&o.Agents, "agents", o.Agents, "agents to register first")
	f.IntVar(&o.Concurrency, "concurrency", o.Concurrency, "parallel connections")
	f.DurationVar(&o.Duration, "duration", o.Duration, "measured duration of each run")
	f.IntVar(&o.Rounds, "rounds", o.Rounds, "runs of the node and of the baseline, alternately")
	f.DurationVar(&o.Slice, "slice", o.Slice, "a run is driven in turns of this long, the node's and the baseline's alternately; 0 drives each run whole")
	return c
}

// runInProcesses runs a bench whose nodes run in processes of their own
// (this binary's), with their data under a temporary directory named
// after prefix, and prints its result.
func runInProcesses(cmd *cobra.Command, prefix string, run func(exe, dir string) (fmt.Stringer, error)) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	res, err := run(exe, dir)
	if err != nil {
		return err
	}
	fmt.Fprintln(cmd.OutOrStdout(), res)
	return nil
}

// benchServeBytesCmd is get-agent's baseline, in a process of its own.
func benchServeBytesCmd() *cobra.Command {
	var addr, file string
	c := &cobra.Command{
		Use:    "serve-bytes",
		Short:  "Serve GET /v1/agents/<id> with stored bytes (the baseline of get-agent)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return bench.ServeBytes(cmd.Context(), addr, file)
		},
	}
	c.Flags().StringVar(&addr, "http", "127.0.0.1:0", "listen address")
	c.Flags().StringVar(&file, "file", "", "the stored bytes: one JSON [id, bytes] a line")
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

func benchCardMemoryCmd() *cobra.Command {
	o := bench.CardMemoryOptions{Cards: 1000, CardSize: 30 << 10}
	c := &cobra.Command{
		Use:   "card-memory",
		Short: "Measure what agents' full cards cost a directory, and a node that joins it, in memory",
		Long: `Starts a directory (mesh node, fsync on, no write budgets) in a process of
its own, registers --cards agents through it from 8 clients, each signed and
handing over a full card of about --size bytes (words of a synthetic
vocabulary), reads each back (its record and its mirrored card), and reads
the growth of the directory's heap in use and resident set from its
/metrics; then starts a node that joins it, in another process, and
samples its memory every 50 ms until it holds the whole directory. Growth
is over an idle node's, and given as a multiple of the cards' bytes.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Cards < 1 || o.CardSize < 1 {
				return fmt.Errorf("--cards and --size must be at least 1")
			}
			return runInProcesses(cmd, "mesh-card-memory-", func(exe, dir string) (fmt.Stringer, error) {
				o.Exe, o.Dir = exe, dir
				return bench.CardMemory(cmd.Context(), o)
			})
		},
	}
	c.Flags().IntVar(&o.Cards, "cards", o.Cards, "agents to register, each with a full card")
	c.Flags().IntVar(&o.CardSize, "size", o.CardSize, "bytes of each card, about (at most 65536)")
	return c
}

func benchSearchCrowdCmd() *cobra.Command {
	o := bench.SearchCrowdOptions{Agents: 10752, CardSize: 2000, Crowd: 200, Rate: 2, Every: 500 * time.Millisecond, Duration: 30 * time.Second}
	c := &cobra.Command{
		Use:   "search-crowd",
		Short: "Time an honest client's searches alone and while many addresses search, each within its budget",
		Long: `Fills a node with --agents agents (cards of --card-size bytes of words of a
synthetic vocabulary),
then times an honest client's two-word searches, one every --every, for
--duration alone, and again while --crowd other client addresses each search
--rate times a second (the per-address budget: 120 a minute by default).
Without --url it starts a node (mesh node, without write budgets, trusting
127.0.0.1 as a proxy so that X-Forwarded-For names each client) in a process
of its own; a node given with --url must trust 127.0.0.1 likewise. Reports
the honest client's p50, p90 and refusals in both phases, and the crowd's
searches by status. The crowd asks the most a search may: 16 words, 50
results.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Agents < 1 || o.Crowd < 1 || o.Rate <= 0 || o.Every <= 0 || o.Duration <= 0 {
				return fmt.Errorf("--agents and --crowd must be at least 1; --rate, --every and --duration positive")
			}
			bench.RaiseFileLimit()
			return runInProcesses(cmd, "mesh-search-crowd-", func(exe, dir string) (fmt.Stringer, error) {
				o.Exe, o.Dir, o.Progress = exe, dir, os.Stderr
				return bench.SearchCrowd(cmd.Context(), o)
			})
		},
	}
	f := c.Flags()
	f.StringVar(&o.URL, "url", "", "node base URL (trusting 127.0.0.1 as a proxy); empty starts a node in a process of its own")
	f.IntVar(&o.Agents, "agents", o.Agents, "agents to register first")
	f.IntVar(&o.CardSize, "card-size", o.CardSize, "bytes of each agent's card, about")
	f.IntVar(&o.Crowd, "crowd", o.Crowd, "client addresses searching at once")
	f.Float64Var(&o.Rate, "rate", o.Rate, "searches a second of each crowd address")
	f.DurationVar(&o.Every, "every", o.Every, "time between the honest client's searches")
	f.DurationVar(&o.Duration, "duration", o.Duration, "length of each phase")
	return c
}

func benchQuorumCmd() *cobra.Command {
	o := bench.QuorumOptions{Size: 3, Concurrency: 16, Duration: 5 * time.Second, Rounds: 3}
	c := &cobra.Command{
		Use:   "quorum",
		Short: "Compare registrations through a lone directory and through a quorum, fsync on",
		Long: `Starts a lone directory and two quorums of --size bootstrap nodes, in
this process on this machine's disk (--dir, a temporary directory by default)
with fsync on and no write budgets, and registers new agents from --concurrency
clients for --duration through the lone directory, the leader of one quorum and
a follower of the other in turn (each setup's stores hold only what it wrote),
--rounds times. Reports the CPU this process spends a second with every node
idle, then each setup's registrations a second, p50 and p99, the CPU this
process spent a registration beyond its idle CPU and the agents the node held,
the quorum's rate and p99 as shares of the lone directory's in each round, and
the median share and CPU over the rounds.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Size < 1 || o.Concurrency < 1 || o.Duration <= 0 || o.Rounds < 1 {
				return fmt.Errorf("--size, --concurrency and --rounds must be at least 1 and --duration positive")
			}
			run, err := bench.Quorum(cmd.Context(), o)
			if err != nil {
				return err
			}
			rounds := run.Rounds
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "idle: every node started, this process spends %.1f ms of CPU a second; the CPU a registration below leaves it out\n", float64(run.Idle)/float64(time.Millisecond))
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
				len(rounds), bench.Median(leader), bench.Median(follower))
			if bench.Median(cpu[0]) > 0 {
				fmt.Fprintf(w, "median CPU a registration (every node and client in this process, beyond its idle CPU): lone %.2f ms, to the leader %.2f ms, through a follower %.2f ms\n",
					bench.Median(cpu[0]), bench.Median(cpu[1]), bench.Median(cpu[2]))
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

// setup is a setup's line of bench quorum: its rate and latencies, the
// CPU a registration took and the agents its node held after, when read.
func setup(s bench.QuorumSetup) string {
	line := s.Result.String()
	if s.CPU > 0 {
		line += fmt.Sprintf(", CPU %.2f ms a registration", float64(s.CPU)/float64(time.Millisecond))
	}
	if s.Agents >= 0 {
		line += fmt.Sprintf(", %d agents held", s.Agents)
	}
	return line
}
