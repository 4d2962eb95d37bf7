package node

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/agentmesh/mesh/internal/testkit"
)

// BenchmarkSearchVisible: on a directory of MESH_BENCH_AGENTS agents
// (default 100,000) followed by a second node, the time from a
// registration sent to the directory until a search on the other node
// finds it, p50 and p99.
func BenchmarkSearchVisible(b *testing.B) {
	dir := benchDirectory(b, benchAgents())
	jc := testConfig(b, b.TempDir())
	jc.Role, jc.Bootstrap = RoleNode, dir.P2PAddrs()
	jc.SearchRate, jc.SearchBurst = 1_000_000, 1_000 // the benchmark polls: no budget
	other := startNode(b, jc)
	testkit.Eventually(b, 10*time.Minute, func() bool {
		_, caught, _ := other.replica.Status()
		return caught && other.clog.Seq() == dir.clog.Seq()
	}, "condition not met in time")

	var took []time.Duration
	b.ResetTimer()
	for i := range b.N {
		word := "fresh" + strconv.Itoa(i)
		start := time.Now()
		if st, body := rawCall(b, dir, "POST", "/v1/agents/register", `{"agent_id":"`+word+`","capabilities":["`+word+`"]}`); st != 201 {
			b.Fatalf("register: %d %s", st, body)
		}
		testkit.Eventually(b, time.Minute, func() bool {
			_, v := call(b, other, "POST", "/v1/search", `{"query":"`+word+`"}`)
			res, _ := v["results"].([]any)
			return len(res) == 1
		}, "condition not met in time")

		took = append(took, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "visible_p50_ms")
	b.ReportMetric(float64(took[len(took)*99/100].Microseconds())/1000, "visible_p99_ms")
}
