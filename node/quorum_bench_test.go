package node

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/admission"
	"github.com/agentmesh/mesh/internal/loadgen"
	"github.com/agentmesh/mesh/internal/testkit"
	"github.com/agentmesh/mesh/p2p"
	"github.com/agentmesh/mesh/registryapi"
)

// Benchmarks of the directory on a quorum (issue 11's figures):
//
//	go test ./node -run XXX -bench 'Quorum|LateJoiner' -benchtime 2000x
//	MESH_BENCH_AGENTS=1000000 go test ./node -run XXX -bench LateJoiner -benchtime 1x -timeout 30m

// benchQuorum starts size members on disk, fsync on (size 0: a lone
// directory), and an ordinary node in front; it returns the leader and
// the ordinary node.
func benchQuorum(b *testing.B, size int, timings RaftTimings) (members []*Node, cfgs []Config, ord *Node) {
	b.Helper()
	var addrs []string
	keys := make([]ed25519.PrivateKey, max(size, 1))
	for i := range keys {
		keys[i] = identity.GenerateKey()
		id, _ := p2p.PeerID(keys[i].Public().(ed25519.PublicKey))
		addrs = append(addrs, "/ip4/127.0.0.1/tcp/"+strconv.Itoa(testkit.Port(b))+"/p2p/"+id.String())
	}
	for i := range keys {
		cfg := testConfig(b, b.TempDir())
		cfg.Role, cfg.Key, cfg.SyncWrites, cfg.Raft = RoleBootstrap, keys[i], true, timings
		cfg.Budgets = admission.Config{} // the benchmark measures the log, not the write budgets
		cfg.Listen = []string{strings.Split(addrs[i], "/p2p/")[0]}
		if size > 0 {
			cfg.Quorum = addrs
		}
		cfgs = append(cfgs, cfg)
		members = append(members, startNode(b, cfg))
	}
	cfg := testConfig(b, b.TempDir())
	cfg.Role, cfg.Bootstrap, cfg.SyncWrites = RoleNode, addrs, true
	cfg.Budgets = admission.Config{}
	ord = startNode(b, cfg)
	testkit.Eventually(b, 30*time.Second, func() bool { return benchLeader(members) != nil && ord.view.source() != "" }, "condition not met in time")
	return members, cfgs, ord
}

func benchLeader(members []*Node) *Node {
	for _, m := range members {
		if m != nil && (m.quorum == nil || m.quorum.IsLeader()) {
			return m
		}
	}
	return nil
}

var benchIDs atomic.Int64

func registerHTTP(base string) (time.Duration, error) {
	id := "b-" + strconv.FormatInt(benchIDs.Add(1), 10)
	start := time.Now()
	resp, err := http.Post(base+"/v1/agents/register", "application/json",
		strings.NewReader(`{"agent_id":"`+id+`","capabilities":["echo"],"endpoint":"https://`+id+`.example"}`))
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		return 0, fmt.Errorf("register: %d", resp.StatusCode)
	}
	return time.Since(start), nil
}

// BenchmarkQuorumRegister: registrations through a lone directory and a
// quorum of 3, sent to the directory (the leader) and through an ordinary
// node, 16 clients at once, fsync on: throughput, latency and the CPU
// this process spent a registration (every node's).
func BenchmarkQuorumRegister(b *testing.B) {
	for _, size := range []int{0, 3} {
		name := "single"
		if size > 0 {
			name = "quorum3"
		}
		b.Run(name, func(b *testing.B) {
			members, _, ord := benchQuorum(b, size, DefaultRaftTimings())
			for _, via := range []string{"leader", "forwarded"} {
				b.Run(via, func(b *testing.B) {
					base := benchLeader(members).URL()
					if via == "forwarded" {
						base = ord.URL()
					}
					var mu sync.Mutex
					var lat []time.Duration
					var next atomic.Int64
					cpu := loadgen.ProcessCPU()
					start := time.Now()
					var wg sync.WaitGroup
					for range 16 {
						wg.Go(func() {
							for next.Add(1) <= int64(b.N) {
								d, err := registerHTTP(base)
								if err != nil {
									b.Error(err)
									return
								}
								mu.Lock()
								lat = append(lat, d)
								mu.Unlock()
							}
						})
					}
					wg.Wait()
					took, used := time.Since(start), loadgen.ProcessCPU()-cpu
					slices.Sort(lat)
					if len(lat) > 0 {
						b.ReportMetric(float64(len(lat))/took.Seconds(), "regs/s")
						b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50_ms")
						b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99_ms")
						if cpu > 0 {
							b.ReportMetric(float64(used.Microseconds())/1000/float64(len(lat)), "cpu_ms/reg")
						}
					}
				})
			}
		})
	}
}

// BenchmarkQuorumFailover: the leader of 3 is stopped (its process would
// be killed: no goodbye reaches the others) under a write load through an
// ordinary node; the time until a write succeeds again, median of 10.
func BenchmarkQuorumFailover(b *testing.B) {
	members, cfgs, ord := benchQuorum(b, 3, DefaultRaftTimings())
	var took []time.Duration
	for range 10 {
		l := benchLeader(members)
		i := slices.Index(members, l)
		l.host.Libp2p().Close() // the network goes first, as with SIGKILL
		start := time.Now()
		l.Close()
		for {
			if _, err := registerHTTP(ord.URL()); err == nil {
				break
			}
			if time.Since(start) > 30*time.Second {
				b.Fatal("writes did not resume")
			}
		}
		took = append(took, time.Since(start))
		members[i] = startNode(b, cfgs[i])
		testkit.Eventually(b, 30*time.Second, func() bool { return members[i].clog.Seq() >= benchLeader(members).clog.Seq() }, "condition not met in time")
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Milliseconds()), "failover_median_ms")
	b.ReportMetric(float64(took[len(took)-1].Milliseconds()), "failover_max_ms")
}

// benchAgents is MESH_BENCH_AGENTS, default 100,000.
func benchAgents() int {
	if v, err := strconv.Atoi(os.Getenv("MESH_BENCH_AGENTS")); err == nil && v > 0 {
		return v
	}
	return 100_000
}

// benchDirectory starts a lone directory holding agents agents,
// registered straight through its proposer.
func benchDirectory(b *testing.B, agents int) *Node {
	return benchDirectoryOn(b, testConfig(b, b.TempDir()), agents, nil)
}

// benchDirectoryOn is benchDirectory on cfg, with card(i) (if set) the
// discovery card of the i-th agent.
func benchDirectoryOn(b *testing.B, cfg Config, agents int, card func(int) *registryapi.DiscoveryCard) *Node {
	cfg.Role = RoleBootstrap
	cfg.Budgets = admission.Config{} // a million registrations as fast as the log takes them
	dir := startNode(b, cfg)
	ctx := context.Background()
	fill := time.Now()
	for i := range agents {
		id := "agent-" + strconv.Itoa(i)
		op := registryapi.Command{At: time.Now().UnixNano(), Register: &registryapi.RegisterOp{
			AgentID: id, Capabilities: []string{"echo", "search"}, Endpoint: "https://" + id + ".example", APIKeyHash: fmt.Sprintf("%x", sha256.Sum256([]byte(id)))}}
		if card != nil {
			op.Register.Card = card(i)
		}
		if _, err := dir.orderer.Propose(ctx, registryapi.Kind, op.At, op); err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("%d agents registered in %s", agents, time.Since(fill).Round(time.Millisecond))
	return dir
}

// BenchmarkLateJoiner: a node joins a directory of MESH_BENCH_AGENTS
// agents (default 100,000) whose change log was compacted: the time until
// it holds a complete replica, and the snapshot's size.
func BenchmarkLateJoiner(b *testing.B) {
	agents := benchAgents()
	dir := benchDirectory(b, agents)
	if err := dir.clog.Compact(1000); err != nil {
		b.Fatal(err)
	}
	snap, _ := dir.clog.Snapshot()
	size, _ := snap.WriteTo(io.Discard)
	snap.Close()
	b.ResetTimer()
	for range b.N {
		jc := testConfig(b, b.TempDir())
		jc.Role, jc.Bootstrap = RoleNode, dir.P2PAddrs()
		start := time.Now()
		j := startNode(b, jc)
		testkit.Eventually(b, 10*time.Minute, func() bool {
			_, caught, _ := j.replica.Status()
			return caught && j.clog.Seq() == dir.clog.Seq()
		}, "condition not met in time")

		b.ReportMetric(time.Since(start).Seconds(), "join_s")
		j.Close()
	}
	b.ReportMetric(float64(size)/(1<<20), "snapshot_MiB")
	b.ReportMetric(float64(agents), "agents")
}
