package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentmesh/mesh/internal/admission"
	"github.com/agentmesh/mesh/node"
)

// Mesh is a bootstrap node and others joined to it, in this process.
type Mesh struct {
	Nodes []*node.Node // Nodes[0] is the bootstrap
}

// Unthrottled lifts a node's per-socket and per-cluster send limits: the
// wall benches measure what the node delivers, not its limits on a client.
func Unthrottled(cfg *node.Config) {
	cfg.WallSocketRate, cfg.WallRoomRate = 0, 0
}

// Unmetered lifts a node's write budgets: the registry benches register
// agents as fast as they can from one address, to measure the node, not
// its admission control.
func Unmetered(cfg *node.Config) {
	cfg.Budgets = admission.Config{}
}

// StartMesh starts n nodes (n >= 1) with in-memory stores on loopback and
// waits until every node has caught up with the directory.
func StartMesh(ctx context.Context, n int, tweak func(*node.Config)) (*Mesh, error) {
	m := &Mesh{}
	for i := range n {
		cfg := node.DefaultConfig()
		cfg.InMemory, cfg.DataDir, cfg.HTTPAddr = true, "", "127.0.0.1:0"
		cfg.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
		if i > 0 {
			cfg.Bootstrap = m.Nodes[0].P2PAddrs()
		}
		if tweak != nil {
			tweak(&cfg)
		}
		if err := m.start(ctx, cfg); err != nil {
			return nil, err
		}
	}
	for _, nd := range m.Nodes[1:] {
		if err := waitCaughtUp(ctx, nd); err != nil {
			m.Close()
			return nil, err
		}
	}
	return m, nil
}

// start starts one more node; when it fails, it stops them all.
func (m *Mesh) start(ctx context.Context, cfg node.Config) error {
	nd, err := node.New(cfg)
	if err == nil {
		err = nd.Start(ctx)
	}
	if err != nil {
		m.Close()
		return fmt.Errorf("node %d: %w", len(m.Nodes), err)
	}
	m.Nodes = append(m.Nodes, nd)
	return nil
}

// Close stops every node.
func (m *Mesh) Close() {
	for _, nd := range slices.Backward(m.Nodes) {
		nd.Close()
	}
}

func waitCaughtUp(ctx context.Context, nd *node.Node) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		var h struct {
			Directory struct {
				CaughtUp bool `json:"caught_up"`
			} `json:"directory"`
		}
		if err := getJSON(ctx, nd.URL()+"/health", &h); err == nil && h.Directory.CaughtUp {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("node %s never caught up with the directory", nd.URL())
}

func getJSON(ctx context.Context, url string, v any) error {
	b, err := getBytes(ctx, url)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// postJSON posts body and decodes a 2xx answer into v.
func postJSON(ctx context.Context, url, body string, hdr http.Header, v any) (int, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode/100 != 2 {
		return resp.StatusCode, fmt.Errorf("POST %s: %d %s", url, resp.StatusCode, b)
	}
	if v != nil {
		return resp.StatusCode, json.Unmarshal(b, v)
	}
	return resp.StatusCode, nil
}

// Cluster is a public cluster a bench made, to delete when it is done.
type Cluster struct {
	ID    string
	base  string
	admin string
}

// CreateCluster creates a public cluster through the node at base.
func CreateCluster(ctx context.Context, base string) (*Cluster, error) {
	var v struct {
		ID    string `json:"cluster_id"`
		Admin string `json:"admin_token"`
	}
	if _, err := postJSON(ctx, base+"/v1/clusters", `{"visibility":"public","name":"bench"}`, nil, &v); err != nil {
		return nil, err
	}
	if v.ID == "" {
		return nil, errors.New("no cluster id in the create response")
	}
	return &Cluster{ID: v.ID, base: base, admin: v.Admin}, nil
}

// Delete deletes the cluster, so that benches against a running node
// leave nothing in its catalog.
func (c *Cluster) Delete() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodDelete, c.base+"/v1/clusters/"+c.ID, nil)
	req.Header.Set("X-Cluster-Token", c.admin)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
}

// metrics reads the values of the named unlabelled series from the
// /metrics of the node at base.
func metrics(ctx context.Context, base string, names ...string) (map[string]float64, error) {
	body, err := getBytes(ctx, base+"/metrics")
	if err != nil {
		return nil, err
	}
	got := map[string]float64{}
	for line := range strings.Lines(string(body)) {
		name, v, ok := strings.Cut(strings.TrimSuffix(line, "\n"), " ")
		if !ok || !slices.Contains(names, name) {
			continue
		}
		if got[name], err = strconv.ParseFloat(v, 64); err != nil {
			return nil, fmt.Errorf("%s/metrics: %s: %w", base, name, err)
		}
	}
	for _, n := range names {
		if _, ok := got[n]; !ok {
			return nil, fmt.Errorf("no %s in %s/metrics", n, base)
		}
	}
	return got, nil
}

// Percentiles of sorted durations.
type Percentiles struct {
	N             int
	P50, P99, Max time.Duration
}

func percentiles(d []time.Duration) Percentiles {
	if len(d) == 0 {
		return Percentiles{}
	}
	slices.Sort(d)
	at := func(p float64) time.Duration { return d[min(len(d)-1, int(p*float64(len(d))))] }
	return Percentiles{N: len(d), P50: at(0.50), P99: at(0.99), Max: d[len(d)-1]}
}

func (p Percentiles) String() string {
	return fmt.Sprintf("n=%d p50 %s p99 %s max %s", p.N, p.P50.Round(time.Microsecond), p.P99.Round(time.Microsecond), p.Max.Round(time.Microsecond))
}
