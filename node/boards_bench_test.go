package node

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/agentmesh/mesh/internal/admission"
	"github.com/agentmesh/mesh/internal/testkit"
	"github.com/agentmesh/mesh/wall"
)

// benchPosts is the live posts of the benchmarks' board:
// MESH_BENCH_POSTS, default 100,000.
func benchPosts() int {
	if n, err := strconv.Atoi(os.Getenv("MESH_BENCH_POSTS")); err == nil && n > 0 {
		return n
	}
	return 100_000
}

// benchSpread is the side of the square the benchmark's posts are
// spread over, in degrees of latitude: MESH_BENCH_SPREAD_KM (default 300
// km, a region; 50 is a city, where a 10 km circle holds a tenth of them).
func benchSpread() float64 {
	if km, err := strconv.ParseFloat(os.Getenv("MESH_BENCH_SPREAD_KM"), 64); err == nil && km > 0 {
		return km / 111.2
	}
	return 300 / 111.2
}

// benchBoardConfig is a bench node's config: no write budget, quotas
// above the benchmark's posts.
func benchBoardConfig(b *testing.B, cfg Config) Config {
	cfg.Budgets = admission.Config{}
	cfg.BoardQuota = wall.Quota{}
	return cfg
}

// fillBoard creates a public cluster with a board on n and n posts in
// it, spread at random over a square around (48, 2) (benchSpread), in
// parallel.
func fillBoard(b *testing.B, node *Node, n int) boardCluster {
	v := createClusterB(b, node)
	cl := boardCluster{id: v["cluster_id"].(string), token: v["token"].(string), admin: v["admin_token"].(string)}
	for _, req := range [][3]string{{"PATCH", "", `{"boards_enabled":true}`}, {"POST", "/boards", `{"slug":"big"}`}} {
		if st, body := rawCall(b, node, req[0], cl.path(req[1]), req[2], "x-cluster-token", cl.admin); st >= 300 {
			b.Fatalf("%s %s: %d %s", req[0], req[1], st, body)
		}
	}
	side := benchSpread()
	var wg sync.WaitGroup
	work := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range work {
				lat, lon := 48+(rand.Float64()-0.5)*side, 2+(rand.Float64()-0.5)*side*1.5
				body := fmt.Sprintf(`{"title":"post %d","body":"for sale","ttl":"1y","props":{"where":{"lat":%f,"lon":%f,"label":"x"},"lang":"fr"}}`, i, lat, lon)
				if st, resp := rawCall(b, node, "POST", cl.path("/boards/big/posts?agent=bench"), body); st != 201 {
					b.Errorf("post %d: %d %s", i, st, resp)
					return
				}
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	return cl
}

func createClusterB(b *testing.B, n *Node) map[string]any {
	st, body := rawCall(b, n, "POST", "/v1/clusters", `{"visibility":"public"}`)
	var v map[string]any
	if st != 201 || json.Unmarshal([]byte(body), &v) != nil {
		b.Fatalf("create cluster: %d %s", st, body)
	}
	return v
}

func reportPercentiles(b *testing.B, took []time.Duration, name string) {
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, name+"_p50_ms")
	b.ReportMetric(float64(took[len(took)*99/100].Microseconds())/1000, name+"_p99_ms")
}

// BenchmarkBoardsNear: GET posts?near=…&km=10 on a board of
// MESH_BENCH_POSTS live posts (default 100,000) on one node, p50 and p99.
func BenchmarkBoardsNear(b *testing.B) {
	n := startNode(b, benchBoardConfig(b, testConfig(b, b.TempDir())))
	cl := fillBoard(b, n, benchPosts())
	if st, body := rawCall(b, n, "GET", cl.path("/boards/big/posts?limit=1"), ""); st != 200 { // builds the index
		b.Fatalf("first read: %d %s", st, body)
	}
	var took []time.Duration
	for b.Loop() {
		side := benchSpread() * 0.7
		path := fmt.Sprintf("/boards/big/posts?near=%f,%f&km=10", 48+(rand.Float64()-0.5)*side, 2+(rand.Float64()-0.5)*side*1.5)
		start := time.Now()
		if st, body := rawCall(b, n, "GET", cl.path(path), ""); st != 200 {
			b.Fatalf("near: %d %s", st, body)
		}
		took = append(took, time.Since(start))
	}
	reportPercentiles(b, took, "near")
}

// BenchmarkBoardsVisible: on a bootstrap and two nodes, the time from a
// post sent to one node until another serves it, p50 and p99.
func BenchmarkBoardsVisible(b *testing.B) {
	boot := startNode(b, benchBoardConfig(b, testConfig(b, b.TempDir())))
	join := func() *Node {
		cfg := benchBoardConfig(b, testConfig(b, b.TempDir()))
		cfg.Role, cfg.Bootstrap = RoleNode, boot.P2PAddrs()
		return startNode(b, cfg)
	}
	writer, reader := join(), join()
	cl := fillBoard(b, writer, 1)
	testkit.Eventually(b, time.Minute, func() bool { return reader.clog.Seq() == boot.clog.Seq() }, "condition not met in time")
	var took []time.Duration
	for b.Loop() {
		start := time.Now()
		st, body := rawCall(b, writer, "POST", cl.path("/boards/big/posts?agent=bench"), `{"title":"fresh","ttl":"24h"}`)
		var v struct{ Post struct{ ID string } }
		if st != 201 || json.Unmarshal([]byte(body), &v) != nil {
			b.Fatalf("post: %d %s", st, body)
		}
		testkit.Eventually(b, time.Minute, func() bool {
			st, _ := rawCall(b, reader, "GET", cl.path("/boards/big/posts/"+v.Post.ID), "")
			return st == 200
		}, "condition not met in time")

		took = append(took, time.Since(start))
	}
	reportPercentiles(b, took, "visible")
}
