package registryapi

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/cmdlog"
	"github.com/agentmesh/mesh/internal/httpx"
	"github.com/agentmesh/mesh/internal/site"
)

// BenchmarkPages: the pages a visitor opens first, on a node holding
// MESH_BENCH_AGENTS agents (default 100,000), a twentieth of them online:
// the home page (the agents online now), the agents page searching two
// words, and the agents page listing everyone (a search by no word).
// It reports the p50 and p99 of each, served in process (no network),
// and each page's weight in bytes.
func BenchmarkPages(b *testing.B) {
	n := benchAgents()
	v := newBenchVocabulary()
	db := benchStore(b, n, v)
	log, err := cmdlog.Open(db)
	if err != nil {
		b.Fatal(err)
	}
	dir, err := NewDirectory(log)
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	for i := 0; i < n; i += 20 {
		if _, err := dir.Heartbeat("agent-"+strconv.Itoa(i), uint64(i+1), now, ""); err != nil {
			b.Fatal(err)
		}
	}
	s := site.New(site.Info{Node: "12D3KooW…bench", Role: "bootstrap", Version: "bench"}, nil)
	api, err := NewAPI(Config{Directory: dir, Log: cmdlog.NewLocal(log), Tokens: NewTokens(identity.GenerateKey()),
		SolUSD: NewSolUSD(SolUSDConfig{Fixed: 150}), Site: s, PublicURL: "https://mesh.example"})
	if err != nil {
		b.Fatal(err)
	}
	mux := httpx.NewMux()
	api.Routes(mux)
	s.Routes(mux, s.NewHome(site.HomeConfig{Agents: api.OnlineAgents,
		Clusters: func(*http.Request, int) ([]site.ClusterLink, error) { return nil, nil }}))
	searches := make([]string, 1000)
	for i := range searches {
		searches[i] = "/agents?q=" + url.QueryEscape(strings.Join(v.words(2), " "))
	}
	pages := []struct {
		name string
		path func(int) string
	}{
		{"home-", func(int) string { return "/" }},
		{"search-", func(i int) string { return searches[i%len(searches)] }},
		{"all-", func(int) string { return "/agents" }},
	}
	took := make([][]time.Duration, len(pages))
	weight := make([]int, len(pages))
	b.ResetTimer()
	for i := range b.N {
		for p, page := range pages {
			r := httptest.NewRequest("GET", page.path(i), nil)
			r.Header.Set("Accept", "text/html")
			w := httptest.NewRecorder()
			t := time.Now()
			mux.ServeHTTP(w, r)
			took[p] = append(took[p], time.Since(t))
			if w.Code != http.StatusOK {
				b.Fatalf("%s: %d %s", page.path(i), w.Code, w.Body)
			}
			weight[p] = max(weight[p], w.Body.Len())
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(n), "agents")
	for p, page := range pages {
		percentiles(b, page.name, took[p])
		b.ReportMetric(float64(weight[p]), page.name+"bytes")
	}
}
