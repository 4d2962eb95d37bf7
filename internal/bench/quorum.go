package bench

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/loadgen"
	"github.com/agentmesh/mesh/node"
	"github.com/agentmesh/mesh/p2p"
)

// QuorumOptions configures Quorum.
type QuorumOptions struct {
	// Size is the number of members of the quorum (3 or 5).
	Size int
	// Concurrency is the number of clients registering at once, each
	// with its own connection; Duration how long each setup is measured
	// in each of Rounds rounds.
	Concurrency int
	Duration    time.Duration
	Rounds      int
	// Dir holds the nodes' stores (on disk, fsync on, as `mesh node`
	// keeps them); a directory of its own under the system's temporary
	// one when empty, removed after.
	Dir string
}

// QuorumRun is what Quorum measured.
type QuorumRun struct {
	// Idle is the CPU this process spent a second with every node idle,
	// before the rounds: the Raft heartbeats, probes and timers of the
	// nodes not measured, which go on while a setup is, and which
	// QuorumSetup.CPU leaves out.
	Idle   time.Duration
	Rounds []QuorumRound
}

// QuorumRound is one round of Quorum: the registrations through each
// setup, measured one after the other.
type QuorumRound struct {
	Lone, Leader, Follower QuorumSetup
}

// QuorumSetup is what one setup did in a round.
type QuorumSetup struct {
	loadgen.Result
	// CPU is the CPU time this process (every node and the clients) spent
	// a registration meanwhile beyond its idle CPU (QuorumRun.Idle; 0: not
	// read): unlike the rate, it hardly moves with the machine's load.
	CPU time.Duration
	// Agents is how many agents the node written to held after the round
	// (-1: not read): the setup's registrations of this round and the
	// rounds before, and no other's.
	Agents int64
}

// Quorum measures registrations (unsigned, each a new agent) through a
// lone directory, and through a quorum of o.Size members sent to its
// leader and to a follower, on this machine's disk with fsync on: what a
// quorum costs a directory's writes. The writes to the leader and those
// through a follower go to two quorums of their own, so that each
// setup's stores hold what it wrote, as the lone directory's do (a write
// costs more as the stores grow). All run at once, idle when not
// measured; the setups take turns, o.Rounds times, so that a machine
// whose load changes meanwhile weighs on each alike.
func Quorum(ctx context.Context, o QuorumOptions) (QuorumRun, error) {
	var run QuorumRun
	if o.Dir == "" {
		dir, err := os.MkdirTemp("", "mesh-bench-quorum-")
		if err != nil {
			return run, err
		}
		defer os.RemoveAll(dir)
		o.Dir = dir
	}
	lone, err := startDiskNodes(ctx, filepath.Join(o.Dir, "lone"), 1, false)
	if err != nil {
		return run, err
	}
	defer lone.Close()
	leader, stop, err := startQuorum(ctx, filepath.Join(o.Dir, "quorum"), o.Size, true)
	if err != nil {
		return run, err
	}
	defer stop()
	follower, stop, err := startQuorum(ctx, filepath.Join(o.Dir, "quorum-follower"), o.Size, false)
	if err != nil {
		return run, err
	}
	defer stop()
	run.Idle = idleCPU(ctx)
	for range o.Rounds {
		run.Rounds = append(run.Rounds, QuorumRound{
			Lone:     registrations(ctx, lone.Nodes[0].URL(), o, run.Idle),
			Leader:   registrations(ctx, leader.URL(), o, run.Idle),
			Follower: registrations(ctx, follower.URL(), o, run.Idle),
		})
	}
	return run, nil
}

// idleCPU is the CPU this process spends a second while nothing is
// asked of it, once the nodes it started settled (0: not read).
func idleCPU(ctx context.Context) time.Duration {
	const settle, measure = time.Second, 3 * time.Second
	select {
	case <-time.After(settle):
	case <-ctx.Done():
		return 0
	}
	cpu := loadgen.ProcessCPU()
	select {
	case <-time.After(measure):
	case <-ctx.Done():
		return 0
	}
	if cpu == 0 {
		return 0
	}
	return (loadgen.ProcessCPU() - cpu) * time.Second / measure
}

// registrations registers new agents through base from o.Concurrency
// clients for o.Duration; idle is the process's idle CPU a second.
func registrations(ctx context.Context, base string, o QuorumOptions, idle time.Duration) QuorumSetup {
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	cpu := loadgen.ProcessCPU()
	r := loadgen.Run(ctx, loadgen.Options{
		Concurrency: o.Concurrency, Duration: o.Duration,
		Request: func(w, i int) (*http.Request, error) {
			id := fmt.Sprintf("q-%s-%d-%d", run, w, i)
			req, err := http.NewRequest("POST", base+"/v1/agents/register",
				strings.NewReader(`{"agent_id":"`+id+`","capabilities":["bench"],"endpoint":"https://`+id+`.example"}`))
			req.Header.Set("Content-Type", "application/json")
			return req, err
		},
	})
	s := QuorumSetup{Result: r, Agents: -1}
	if used := loadgen.ProcessCPU() - cpu; cpu > 0 && r.Requests > 0 {
		used -= time.Duration(float64(idle) * r.Elapsed.Seconds())
		s.CPU = max(used/time.Duration(r.Requests), time.Microsecond)
	}
	var h struct {
		Directory struct {
			Agents int64 `json:"agents"`
		} `json:"directory"`
	}
	if getJSON(ctx, base+"/health", &h) == nil {
		s.Agents = h.Directory.Agents
	}
	return s
}

// startDiskNodes starts n bootstrap nodes with stores under dir, fsync
// on, without write budgets: a lone directory, or (quorum) the members of
// a new quorum, who elect a leader.
func startDiskNodes(ctx context.Context, dir string, n int, quorum bool) (*Mesh, error) {
	keys := make([]ed25519.PrivateKey, n)
	var addrs []string
	for i := range keys {
		keys[i] = identity.GenerateKey()
		id, _ := p2p.PeerID(keys[i].Public().(ed25519.PublicKey))
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		addrs = append(addrs, "/ip4/127.0.0.1/tcp/"+strconv.Itoa(port)+"/p2p/"+id.String())
	}
	m := &Mesh{}
	for i := range keys {
		cfg := node.DefaultConfig()
		cfg.DataDir, cfg.HTTPAddr, cfg.SyncWrites = filepath.Join(dir, strconv.Itoa(i)), "127.0.0.1:0", true
		cfg.Role, cfg.Key = node.RoleBootstrap, keys[i]
		cfg.Listen = []string{strings.Split(addrs[i], "/p2p/")[0]}
		cfg.Cards.Refresh = 0 // no probes of the example endpoints
		if quorum {
			cfg.Quorum = addrs
		}
		Unmetered(&cfg)
		if err := m.start(ctx, cfg); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// startQuorum starts a quorum of size members with stores under dir, and
// names its leader (or a follower, !leader) once elected.
func startQuorum(ctx context.Context, dir string, size int, leader bool) (*node.Node, func(), error) {
	members, err := startDiskNodes(ctx, dir, size, true)
	if err != nil {
		return nil, nil, err
	}
	l, f, err := roles(ctx, members.Nodes)
	if err != nil {
		members.Close()
		return nil, nil, err
	}
	if leader {
		return l, members.Close, nil
	}
	return f, members.Close, nil
}

// roles waits for members to elect a leader, and names it and a follower.
func roles(ctx context.Context, members []*node.Node) (leader, follower *node.Node, err error) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		leader, follower = nil, nil
		for _, m := range members {
			var h struct {
				Quorum struct {
					State string `json:"state"`
				} `json:"quorum"`
			}
			if getJSON(ctx, m.URL()+"/health", &h) != nil {
				continue
			}
			if h.Quorum.State == "Leader" {
				leader = m
			} else {
				follower = m
			}
		}
		if leader != nil && follower != nil {
			return leader, follower, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil, nil, fmt.Errorf("the quorum of %d elected no leader in 30 s", len(members))
}

// freePort is a TCP port on loopback that was free a moment ago: the
// members of a quorum must know each other's addresses before they start.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
