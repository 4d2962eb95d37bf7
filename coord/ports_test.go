package coord_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/agentmesh/mesh/coord"
	"github.com/agentmesh/mesh/coord/portreg"
)

// freeRange finds n consecutive ports that are free on loopback now.
func freeRange(t *testing.T, n int) int {
	t.Helper()
	for base := 20000 + (int(uintptrOf(t)) % 20000); base < 60000; base += n {
		ok := true
		for p := base; p < base+n && ok; p++ {
			ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
			if err != nil {
				ok = false
				continue
			}
			ln.Close()
		}
		if ok {
			return base
		}
	}
	t.Fatal("no free port range")
	return 0
}

func uintptrOf(t *testing.T) uintptr {
	var x uintptr
	for _, c := range t.Name() {
		x = x*31 + uintptr(c)
	}
	return x
}

// clusterProject is a project whose cluster has id and, when port is not
// 0, architect.port.
func clusterProject(t *testing.T, id string, port int) string {
	dir := t.TempDir()
	y := "id: " + id + "\n"
	if port != 0 {
		y += fmt.Sprintf("architect:\n  port: %d\n", port)
	}
	(&harness{t: t, dir: dir}).write("cluster.yaml", y)
	return dir
}

// TestTwoDaemonsCompeteForPorts: daemons of two clusters on one registry
// take the first free ports in turn; a port another live cluster holds is
// never taken, even when asked for explicitly; a cluster that comes back
// gets its sticky port again; a stopped cluster's sticky port goes to
// others only when nothing else is free.
func TestTwoDaemonsCompeteForPorts(t *testing.T) { // not parallel: its ports were free a moment ago
	base := freeRange(t, 3)
	reg := filepath.Join(t.TempDir(), "registry", "ports.json")
	run := func(id string, explicit, preferred int) (*coord.Daemon, error) {
		cfg := coord.DefaultConfig()
		cfg.Dir, cfg.Registry, cfg.PortMin, cfg.PortMax, cfg.Port = clusterProject(t, id, preferred), reg, base, base+2, explicit
		d, err := coord.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Start(context.Background()); err != nil {
			return nil, err
		}
		t.Cleanup(func() { d.Close() })
		return d, nil
	}
	port := func(d *coord.Daemon) int {
		_, p, _ := net.SplitHostPort(strings.TrimPrefix(d.URL(), "http://"))
		n, _ := strconv.Atoi(p)
		return n
	}
	a, err := run("alpha", 0, 0)
	if err != nil || port(a) != base || !strings.Contains(a.PortReason(), "first free port") {
		t.Fatalf("alpha: %v %v", a, err)
	}
	b, err := run("beta", 0, 0)
	if err != nil || port(b) != base+1 {
		t.Fatalf("beta: %v", err)
	}
	if _, err := run("gamma", base, 0); !errors.Is(err, portreg.ErrTaken) || !strings.Contains(err.Error(), `"alpha"`) {
		t.Fatalf("gamma asking for alpha's port: %v", err)
	}
	// A preferred port held by a live cluster is passed over.
	g, err := run("gamma", 0, base+1)
	if err != nil || port(g) != base+2 {
		t.Fatalf("gamma: %v", err)
	}
	g.Close()
	a.Close()
	b.Close()

	// beta comes back to its sticky port, though a lower one is free.
	b, err = run("beta", 0, 0)
	if err != nil || port(b) != base+1 || !strings.Contains(b.PortReason(), "sticky") {
		t.Fatalf("beta again: %v %s", err, b.PortReason())
	}
	// delta finds every free port sticky to a stopped cluster: it takes the
	// first and says whose it was.
	d, err := run("delta", 0, 0)
	if err != nil || port(d) != base || !strings.Contains(d.PortReason(), `sticky port of cluster "alpha"`) {
		t.Fatalf("delta: %v", err)
	}
	if e, err := run("epsilon", 0, 0); err != nil || port(e) != base+2 {
		t.Fatalf("epsilon: %v", err)
	}
	// The range is full of live clusters.
	if _, err := run("zeta", 0, 0); !errors.Is(err, portreg.ErrTaken) {
		t.Fatalf("zeta: %v", err)
	}
	r, err := portreg.Read(reg)
	if err != nil || r.Clusters["alpha"].Sticky != base || r.Clusters["alpha"].PID != 0 || r.Clusters["beta"].Port != base+1 {
		t.Fatalf("registry %+v %v", r, err)
	}
}

// TestDaemonsStartingTogether: daemons that choose at the same moment take
// different ports (the registry is locked while one chooses).
func TestDaemonsStartingTogether(t *testing.T) { // not parallel: its ports were free a moment ago
	base := freeRange(t, 4)
	reg := filepath.Join(t.TempDir(), "ports.json")
	urls := make(chan string, 4)
	var wg sync.WaitGroup
	for i := range 4 {
		cfg := coord.DefaultConfig()
		cfg.Dir, cfg.Registry, cfg.PortMin, cfg.PortMax = clusterProject(t, fmt.Sprintf("c%d", i), 0), reg, base, base+3
		wg.Go(func() {
			d, err := coord.New(cfg)
			if err == nil {
				err = d.Start(context.Background())
			}
			if err != nil {
				t.Error(err)
				return
			}
			t.Cleanup(func() { d.Close() })
			urls <- d.URL()
		})
	}
	wg.Wait()
	close(urls)
	seen := map[string]bool{}
	for u := range urls {
		seen[u] = true
	}
	if len(seen) != 4 {
		t.Fatalf("ports %v", seen)
	}
	r, err := portreg.Read(reg)
	if err != nil || len(r.Clusters) != 4 {
		t.Fatalf("registry %+v %v", r, err)
	}
}
