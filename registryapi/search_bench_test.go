package registryapi

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentmesh/mesh/internal/storetest"
	"github.com/agentmesh/mesh/store"
)

// benchAgents is how many agents the search benchmark registers:
// MESH_BENCH_AGENTS, default 100,000.
func benchAgents() int {
	if n, err := strconv.Atoi(os.Getenv("MESH_BENCH_AGENTS")); err == nil && n > 0 {
		return n
	}
	return 100_000
}

// benchWord is word i of a synthetic vocabulary; a Zipf draw makes a few
// words common and most rare, as in real descriptions.
func benchWord(i uint64) string { return "w" + strconv.FormatUint(i, 36) }

// benchVocabulary draws words of a synthetic vocabulary, a few common
// and most rare, as in real descriptions.
type benchVocabulary struct{ zipf *rand.Zipf }

func newBenchVocabulary() *benchVocabulary {
	return &benchVocabulary{rand.NewZipf(rand.New(rand.NewPCG(1, 2)), 1.1, 1, 20_000)}
}

func (v *benchVocabulary) words(k int) []string {
	out := make([]string, k)
	for i := range out {
		out[i] = benchWord(v.zipf.Uint64())
	}
	return out
}

// benchStore is a store of n registered agents (agent-<i>), each with two
// capabilities and a card of ten words and a price, drawn from v.
func benchStore(b *testing.B, n int, v *benchVocabulary) *store.DB {
	db := storetest.DB(b)
	for start := 0; start < n; start += 5000 {
		err := db.Update(func(tx *store.Txn) error {
			for i := start; i < min(start+5000, n); i++ {
				a := &Agent{ID: fmt.Sprintf("agent-%d", i), Reg: uint64(i + 1), Capabilities: v.words(2),
					Card: &DiscoveryCard{Name: "Agent " + strconv.Itoa(i), Description: fmt.Sprint(v.words(10)),
						Pricing: []PriceRow{{Unit: unitRequest, Amount: uint64(i), Currency: currencyLamprt}}}}
				if err := tx.SetJSON(agentKey(a.ID), a); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	return db
}

// percentiles reports the p50 and p99 of took, in milliseconds, under
// names prefixed with what.
func percentiles(b *testing.B, what string, took []time.Duration) {
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, what+"p50-ms")
	b.ReportMetric(float64(took[len(took)*99/100].Microseconds())/1000, what+"p99-ms")
}

// BenchmarkSearch fills a store with agents (capabilities and a card of
// ten words each), times the index build from it (as at a node's start)
// and then searches two-word queries. It reports the build time, the
// index's memory per agent and the p50/p99 of one search.
func BenchmarkSearch(b *testing.B) {
	n := benchAgents()
	v := newBenchVocabulary()
	db := benchStore(b, n, v)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	x := newSearchIndex()
	t0 := time.Now()
	var rows atomic.Int64
	if err := x.rebuild(context.Background(), db, &rows); err != nil {
		b.Fatal(err)
	}
	build := time.Since(t0)
	runtime.GC()
	runtime.ReadMemStats(&after)
	queries := make([][]string, 1000)
	for i := range queries {
		queries[i] = v.words(2)
	}
	var took []time.Duration
	b.ResetTimer()
	for i := range b.N {
		t := time.Now()
		x.search(searchQuery{terms: queries[i%len(queries)]}, 0, 10)
		took = append(took, time.Since(t))
	}
	b.StopTimer()
	b.ReportMetric(float64(n), "agents")
	b.ReportMetric(build.Seconds(), "build-s")
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(n), "index-B/agent")
	percentiles(b, "", took)
	runtime.KeepAlive(x)
}
