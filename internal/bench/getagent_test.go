package bench

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
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
	ctx := context.Background()
	m, err := StartMesh(ctx, 1, func(cfg *node.Config) { Unmetered(cfg); cfg.Cards.Refresh = 0 }) // as get-agent starts it
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	stored, err := registerAgents(ctx, m.Nodes[0].URL(), "read", 1000)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		h    http.Handler
	}{{"node", m.Nodes[0].Handler()}, {"net-http", serveStored(stored)}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			cpu := loadgen.ProcessCPU()
			defer func() { b.ReportMetric(float64(loadgen.ProcessCPU()-cpu)/float64(b.N), "cpu-ns/op") }()
			b.RunParallel(func(pb *testing.PB) {
				reqs := make([]*http.Request, len(stored))
				for i, a := range stored {
					reqs[i] = httptest.NewRequest("GET", "/v1/agents/"+a.ID, nil)
				}
				w := &sink{header: http.Header{}}
				for i := 0; pb.Next(); i++ {
					k := i % len(reqs)
					w.reset()
					c.h.ServeHTTP(w, reqs[k])
					if w.status != http.StatusOK || w.n != len(stored[k].Body) {
						panic(fmt.Sprintf("GET %s: status %d, %d bytes", stored[k].ID, w.status, w.n))
					}
				}
			})
		})
	}
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
