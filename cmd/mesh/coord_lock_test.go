package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentmesh/mesh/coord/portreg"
	"github.com/agentmesh/mesh/internal/testkit"
)

// TestCoordOneDaemonPerProject: with real processes, a second mesh coord
// on a project a live daemon runs on exits non-zero at once, naming the
// running daemon's pid and port, and leaves the port registry and the
// debug log as they were; once the first is killed (SIGKILL: no clean
// release), the next daemon takes the project over, and a clean stop lets
// it go.
func TestCoordOneDaemonPerProject(t *testing.T) { // not parallel: it runs processes, against real-time bounds
	bin := buildMesh(t)
	proj := t.TempDir()
	os.WriteFile(filepath.Join(proj, "cluster.yaml"), []byte("id: one-daemon\n"), 0o644)
	reg := filepath.Join(t.TempDir(), "ports.json")
	coord := func(port int) *exec.Cmd {
		return exec.Command(bin, "coord", "--dir", proj, "--registry", reg, "--port", fmt.Sprint(port))
	}
	start := func(port int) *exec.Cmd {
		t.Helper()
		cmd := coord(port)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		waitVersion(t, fmt.Sprintf("http://127.0.0.1:%d", port), "go-0.1.0")
		return cmd
	}
	p1, p2 := testkit.Port(t), testkit.Port(t)
	first := start(p1)
	registry, _ := os.ReadFile(reg)
	debug, _ := os.ReadFile(filepath.Join(proj, ".coord", "debug.jsonl"))

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	second := exec.CommandContext(ctx, bin, "coord", "--dir", proj, "--registry", reg, "--port", fmt.Sprint(p2))
	out, err := second.CombinedOutput()
	want := fmt.Sprintf("pid %d, port %d (http://127.0.0.1:%d)", first.Process.Pid, p1, p1)
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), want) {
		t.Fatalf("the second daemon: %v\n%s\nwant exit status 1 naming %s", err, out, want)
	}
	if b, _ := os.ReadFile(reg); string(b) != string(registry) {
		t.Fatalf("the registry was rewritten:\n%s\nwas\n%s", b, registry)
	}
	// The first daemon may go on appending; what it wrote stays.
	if b, _ := os.ReadFile(filepath.Join(proj, ".coord", "debug.jsonl")); !strings.HasPrefix(string(b), string(debug)) {
		t.Fatalf("the debug log was rewritten:\n%s\nwas\n%s", b, debug)
	}

	first.Process.Signal(syscall.SIGKILL)
	first.Wait()
	third := start(p2)
	r, err := portreg.Read(reg)
	if e := r.Clusters["one-daemon"]; err != nil || e == nil || e.PID != third.Process.Pid || e.Port != p2 {
		t.Fatalf("registry after the takeover: %+v %v", e, err)
	}
	var held struct{ PID, Port int }
	b, _ := os.ReadFile(filepath.Join(proj, ".coord", "daemon.lock"))
	if json.Unmarshal(b, &held) != nil || held.PID != third.Process.Pid || held.Port != p2 {
		t.Fatalf("lock file %s", b)
	}
	third.Process.Signal(syscall.SIGTERM)
	if err := third.Wait(); err != nil {
		t.Fatalf("a clean stop: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(proj, ".coord", "daemon.lock")); len(b) != 0 {
		t.Fatalf("the lock file still names a daemon: %s", b)
	}
}
