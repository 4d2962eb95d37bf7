package bench

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/agentmesh/mesh/internal/loadgen"
	"github.com/agentmesh/mesh/node"
)

// BenchmarkReadPath is GET /v1/agents/<id> in this process, without the
// network: through a node's whole bridge (node), and through get-agent's
// baseline, net/http's ServeMux answering the node's stored answers
// (net-http). Both take the same requests and write into the same writer,
// so that the difference in ns/op and allocs/op is what the node's read
// path adds to what net/http's server pays in both. cpu-ns/op is the
// process's CPU time a read (its every goroutine, the collector's too),
// which other work on a shared machine moves far less than ns/op.
func BenchmarkReadPath(b *testing.B) {
	stored, targets := readPathTargets(b)
	for _, c := range targets {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			cpu := loadgen.ProcessCPU()
			defer func() { b.ReportMetric(float64(loadgen.ProcessCPU()-cpu)/float64(b.N), "cpu-ns/op") }()
			b.RunParallel(func(pb *testing.PB) {
				reqs := readRequests(stored)
				w := &sink{header: http.Header{}}
				for i := 0; pb.Next(); i++ {
					k := i % len(reqs)
					w.reset()
					c.h.ServeHTTP(w, reqs[k])
					w.check(stored[k])
				}
			})
		})
	}
}

// BenchmarkReadPathCold is BenchmarkReadPath with the processor's caches
// cold, as a read over the network finds them after the other work of
// its process and machine: before each read it reads a buffer larger than
// a core's cache, then the request's fields (net/http has just written
// them), and times the read alone. cold-ns/op is the median read: what
// the node pays beyond net/http here is the lines of memory its read path
// touches, which BenchmarkReadPath's warm caches do not show. Run it with
// -cpu 1, and compare node and net-http within a run: on the development
// machine a run's reads all come out some five times slower in one run of
// three or so (as the buffer's pages happen to be mapped, it seems), both
// alike.
func BenchmarkReadPathCold(b *testing.B) {
	stored, targets := readPathTargets(b)
	evict := make([]byte, 6<<20) // 1.5 times a core's L2 on the development machine
	var sum byte
	for _, c := range targets {
		b.Run(c.name, func(b *testing.B) {
			reqs := readRequests(stored)
			w := &sink{header: http.Header{}}
			took := make([]float64, 0, b.N)
			for i := range b.N {
				k := i * 7919 % len(reqs)
				for j := 0; j < len(evict); j += 64 {
					sum += evict[j]
				}
				r := reqs[k]
				sum += byte(len(r.Method) + len(r.URL.Path) + len(r.RemoteAddr) + len(r.Host) + len(r.Header))
				w.reset()
				start := time.Now()
				c.h.ServeHTTP(w, r)
				took = append(took, float64(time.Since(start)))
				w.check(stored[k])
			}
			b.ReportMetric(Median(took), "cold-ns/op")
		})
	}
	evict[0] = sum // the reads are used
}

// readPathTargets starts a node as get-agent does, registers 1,000 agents
// and reads their answers: the handlers BenchmarkReadPath and
// BenchmarkReadPathCold drive, the node's bridge and the baseline.
func readPathTargets(b *testing.B) ([]storedAnswer, []readTarget) {
	ctx := context.Background()
	m, err := StartMesh(ctx, 1, func(cfg *node.Config) { Unmetered(cfg); cfg.Cards.Refresh = 0 }) // as get-agent starts it
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(m.Close)
	stored, err := registerAgents(ctx, m.Nodes[0].URL(), "read", 1000)
	if err != nil {
		b.Fatal(err)
	}
	return stored, []readTarget{{"node", m.Nodes[0].Handler()}, {"net-http", serveStored(stored)}}
}

type readTarget struct {
	name string
	h    http.Handler
}

// readRequests are a GET of each stored answer's agent.
func readRequests(stored []storedAnswer) []*http.Request {
	reqs := make([]*http.Request, len(stored))
	for i, a := range stored {
		reqs[i] = httptest.NewRequest("GET", "/v1/agents/"+a.ID, nil)
	}
	return reqs
}

// sink is a ResponseWriter that keeps an answer's status and length.
type sink struct {
	header    http.Header
	status, n int
}

func (s *sink) reset() { clear(s.header); s.status, s.n = 0, 0 }

func (s *sink) Header() http.Header { return s.header }

func (s *sink) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
}

// check panics unless the answer is a's, in status and length.
func (s *sink) check(a storedAnswer) {
	if s.status != http.StatusOK || s.n != len(a.Body) {
		panic(fmt.Sprintf("GET %s: status %d, %d bytes", a.ID, s.status, s.n))
	}
}

func (s *sink) Write(b []byte) (int, error) {
	s.WriteHeader(http.StatusOK)
	s.n += len(b)
	return len(b), nil
}

// TestPidCPU: the CPU time read for a process from /proc is what it has
// used (this process's own, as getrusage gives it, to a few of /proc's
// ticks).
func TestPidCPU(t *testing.T) {
	for start := loadgen.ProcessCPU(); loadgen.ProcessCPU()-start < 50*time.Millisecond; {
	}
	got, want := pidCPU(os.Getpid()), loadgen.ProcessCPU()
	if got <= 0 || got-want > 50*time.Millisecond || want-got > 50*time.Millisecond {
		t.Fatalf("pidCPU %s, getrusage %s", got, want)
	}
	if pidCPU(0) != 0 {
		t.Fatal("CPU read for no process")
	}
}

// TestSliced: a run is cut into equal turns of at most the slice, or kept
// whole.
func TestSliced(t *testing.T) {
	s := time.Second
	for _, c := range []struct {
		d, slice time.Duration
		want     []time.Duration
	}{
		{10 * s, 0, []time.Duration{10 * s}},
		{10 * s, 20 * s, []time.Duration{10 * s}},
		{10 * s, s, []time.Duration{s, s, s, s, s, s, s, s, s, s}},
		{10 * s, 3 * s, []time.Duration{2500 * time.Millisecond, 2500 * time.Millisecond, 2500 * time.Millisecond, 2500 * time.Millisecond}},
	} {
		if got := sliced(c.d, c.slice); !slices.Equal(got, c.want) {
			t.Errorf("sliced(%s, %s) = %v, want %v", c.d, c.slice, got, c.want)
		}
	}
}
