package coord_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentmesh/mesh/coord"
	"github.com/agentmesh/mesh/internal/clock"
)

// TestOneDaemonPerProject: a second daemon on a project a live daemon runs
// on fails at once, naming the first's pid and port, and writes nothing:
// the port registry and the debug log stay as the first left them, and
// each cron firing runs once. When the first stops, the project is free.
func TestOneDaemonPerProject(t *testing.T) { // not parallel: its ports were free a moment ago
	dir := project(t)
	(&harness{t: t, dir: dir}).write("cluster.yaml", "id: locked\ncrons_owner: test-box\ncrons:\n  - id: tick\n    schedule: \"* * * * *\"\n    cmd: echo fired >> fired.log\n")
	base := freeRange(t, 2)
	reg := filepath.Join(t.TempDir(), "ports.json")
	clk := clock.NewManual(t0)
	daemon := func() (*coord.Daemon, error) {
		cfg := coord.DefaultConfig()
		cfg.Dir, cfg.Registry, cfg.PortMin, cfg.PortMax, cfg.Clock, cfg.DeviceID = dir, reg, base, base+1, clk, "test-box"
		d, err := coord.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d, d.Start(context.Background())
	}
	first, err := daemon()
	if err != nil {
		t.Fatal(err)
	}
	registry, _ := os.ReadFile(reg)
	debug, _ := os.ReadFile(filepath.Join(dir, ".coord", "debug.jsonl"))

	second, err := daemon()
	want := fmt.Sprintf("pid %d, port %d (%s)", os.Getpid(), base, first.URL())
	if !errors.Is(err, coord.ErrRunning) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("the second daemon: %v, want ErrRunning naming %s", err, want)
	}
	second.Close()
	if b, _ := os.ReadFile(reg); string(b) != string(registry) {
		t.Fatalf("the registry was rewritten:\n%s\nwas\n%s", b, registry)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, ".coord", "debug.jsonl")); string(b) != string(debug) {
		t.Fatalf("the debug log was rewritten:\n%s\nwas\n%s", b, debug)
	}

	// Two firings (09:01, 09:02): two runs, not four.
	h := &harness{t: t, dir: dir, clk: clk, d: first, url: first.URL()}
	var r runs
	for _, n := range []int{1, 2} {
		h.advanceUntil(fmt.Sprintf("run %d of tick", n), func() bool {
			h.get("/crons/tick/runs", &r)
			return len(r.Runs) == n && r.Runs[0].Status == "succeeded"
		})
	}
	if got := h.read("fired.log"); got != "fired\nfired\n" {
		t.Fatalf("fired.log %q", got)
	}

	first.Close()
	third, err := daemon()
	if err != nil || third.URL() != first.URL() {
		t.Fatalf("after the first stopped: %v %s", err, third.URL())
	}
}
