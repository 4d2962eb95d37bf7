package node

import (
	"testing"
	"time"

	"github.com/agentmesh/mesh/internal/loadgen"
	"github.com/agentmesh/mesh/registryapi"
)

// BenchmarkRestartServing: a directory holding MESH_BENCH_AGENTS agents
// (100,000 by default), each with a discovery card of twelve words,
// restarts: the time from the start until it answers /health, an agent's
// record and a search (at first 503 index_building while the index builds
// in the background), and until a search is answered with results.
//
//	MESH_BENCH_AGENTS=1000000 go test ./node -run XXX -bench RestartServing -benchtime 1x -timeout 60m
func BenchmarkRestartServing(b *testing.B) {
	agents := benchAgents()
	words := loadgen.NewWords(3)
	cfg := testConfig(b, b.TempDir())
	dir := benchDirectoryOn(b, cfg, agents, func(int) *registryapi.DiscoveryCard {
		return &registryapi.DiscoveryCard{Name: words.Text(2), Description: words.Text(10)}
	})
	dir.Close()
	cfg.PublicURL = ""
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		n := startNode(b, cfg)
		started := time.Since(start)
		at := func(path, body string, ok func(int) bool) time.Duration {
			for {
				method := "GET"
				if body != "" {
					method = "POST"
				}
				if resp, _ := send(b, n, method, path, body); ok(resp.StatusCode) {
					return time.Since(start)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
		health := at("/health", "", func(st int) bool { return st == 200 })
		read := at("/v1/agents/agent-7", "", func(st int) bool { return st == 200 })
		query := `{"query":"` + words.Text(2) + `"}`
		answered := at("/v1/search", query, func(st int) bool { return st == 200 || st == 503 })
		searched := at("/v1/search", query, func(st int) bool { return st == 200 })
		b.Logf("%d agents: Start returned after %s; /health 200 after %s, an agent after %s, a search answered after %s, with results after %s",
			agents, started.Round(time.Millisecond), health.Round(time.Millisecond), read.Round(time.Millisecond),
			answered.Round(time.Millisecond), searched.Round(time.Millisecond))
		n.Close()
	}
}
