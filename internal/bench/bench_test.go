package bench

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/agentmesh/mesh/internal/admission"
	"github.com/agentmesh/mesh/internal/testkit"
	"github.com/agentmesh/mesh/node"
)

// TestMain doubles as the client process of the memory measurement.
func TestMain(m *testing.M) {
	if url := os.Getenv("BENCH_CLIENTS_URL"); url != "" {
		n, _ := strconv.Atoi(os.Getenv("BENCH_CLIENTS_N"))
		if err := HoldClients(context.Background(), url, n, os.Stdout, os.Stdin); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestMeasurementsRun runs each measurement small: the figures are for
// `mesh bench`; here they must only come out and make sense.
func TestMeasurementsRun(t *testing.T) {
	testkit.Slow(t, "client processes")
	ctx := context.Background()
	m, err := StartMesh(ctx, 3, Unthrottled)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	base := m.Nodes[1].URL()

	fan, err := Fanout(ctx, base, FanoutOptions{Receivers: 20, Size: 64, Duration: 300 * time.Millisecond, Window: 4})
	if err != nil || fan.Messages == 0 || fan.Deliveries != 20*fan.Messages {
		t.Fatalf("fan-out: %v, %v (every receiver gets every message)", fan, err)
	}
	lat, err := Latency(ctx, []string{m.Nodes[1].URL(), m.Nodes[2].URL(), m.Nodes[0].URL()}, LatencyOptions{Rate: 50, Duration: 300 * time.Millisecond, Size: 64})
	if err != nil || lat.N < 20 || lat.P50 <= 0 || lat.P99 < lat.P50 || lat.Sent < 10 || len(lat.Received) != 2 {
		t.Fatalf("latency: %v, %v", lat, err)
	}
	for _, n := range lat.Received {
		if n != lat.Sent {
			t.Fatalf("latency: messages lost: %v", lat)
		}
	}
	st, err := Stream(ctx, []string{m.Nodes[1].URL(), m.Nodes[2].URL()}, StreamOptions{Burst: 50})
	if err != nil || st.Sent != 50 || st.Delivered != 50 || !st.InOrder || !st.Done || st.Errors != 0 || st.AckDelay.N != 50 {
		t.Fatalf("stream: %v, %v", st, err)
	}
	flood, err := PingFlood(ctx, base, FloodOptions{Sockets: 1, Duration: 300 * time.Millisecond})
	if err != nil || flood.Pings == 0 || flood.Connections == 0 || !flood.Healthy || flood.RSSPeak < flood.RSSBefore {
		t.Fatalf("flood: %v, %v", flood, err)
	}
	self, _ := os.Executable()
	mem, err := IdleMemory(ctx, base, 50, func(url string, n int) *exec.Cmd {
		cmd := exec.Command(self)
		cmd.Env = append(os.Environ(), "BENCH_CLIENTS_URL="+url, "BENCH_CLIENTS_N="+strconv.Itoa(n))
		return cmd
	})
	if err != nil || mem.Conns != 50 || mem.Open != 50 {
		t.Fatalf("memory: %v, %v", mem, err)
	}
	vis, err := Propagation(ctx, m, 3)
	if err != nil || vis.N != 3 || vis.Max <= 0 {
		t.Fatalf("propagation: %v, %v", vis, err)
	}
	dht, err := DHTLookups(ctx, m, 2)
	if err != nil || dht.N != 4 {
		t.Fatalf("DHT lookups: %v, %v", dht, err)
	}
	t.Log(fan, "|", lat, "|", st, "|", flood, "|", mem, "|", vis, "|", dht)
}

// TestWriteFloodRuns runs the write flood bench small: a client flooding a node, a
// rogue peer and a botnet on the directory are each held to their
// budgets, and the honest client on another node gets in throughout.
func TestWriteFloodRuns(t *testing.T) {
	budgets := func(cfg *node.Config) { // small, so that a short flood meets them, with -race too
		cfg.Budgets.Client = admission.Budget{Rate: 1, Burst: 5}
		cfg.Budgets.Node = admission.Budget{Rate: 20, Burst: 20} // above the honest rate
		cfg.Budgets.Directory = admission.Budget{Rate: 100, Burst: 100}
	}
	phases, err := WriteFlood(context.Background(), WriteFloodOptions{Duration: time.Second, Flooders: 8, HonestRate: 10, Tweak: budgets})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range phases {
		t.Log(p)
		if p.Honest.N == 0 || p.HonestFailed > 0 {
			t.Errorf("%s: the honest client did not get in: %v", p.Name, p)
		}
		if p.Name != "none" && (p.Sent == 0 || p.Taken >= p.Sent) {
			t.Errorf("%s: the flood was not held back: %v", p.Name, p)
		}
	}
}
