package main

import (
	"bufio"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/mesh/internal/testkit"
)

// buildMesh compiles the mesh command into a temporary directory, for a
// test that runs it as processes (skipped by go test -short).
func buildMesh(t testing.TB) string {
	t.Helper()
	testkit.Slow(t, "mesh processes")
	bin := filepath.Join(t.TempDir(), "mesh")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// startMeshNode runs `mesh node` as a user would and returns its URL, read
// from what it prints, and the running process.
func startMeshNode(t testing.TB, bin string, args ...string) (string, *exec.Cmd, *bufio.Scanner) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"node", "--http", "127.0.0.1:0", "--no-sync"}, args...)...)
	// Tests reach loopback only: no probes of the example endpoints
	// agents register (through the env fallback, as an operator may set it).
	cmd.Env = append(os.Environ(), "MESH_CARD_REFRESH=0")
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := bufio.NewScanner(stdout)
	deadline := time.AfterFunc(30*time.Second, func() { cmd.Process.Kill() })
	defer deadline.Stop()
	for lines.Scan() {
		if url, ok := strings.CutPrefix(strings.TrimSpace(lines.Text()), "http  "); ok {
			return url, cmd, lines
		}
	}
	t.Fatal("mesh node exited without printing its address")
	return "", nil, nil
}

// walkthrough extracts the README's marked shell block.
func walkthrough(t *testing.T) string {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "<!-- walkthrough")
	if !ok {
		t.Fatal("README has no walkthrough marker")
	}
	_, rest, _ = strings.Cut(rest, "```sh\n")
	block, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatal("walkthrough block not closed")
	}
	return block
}

// TestREADMEWalkthrough runs the README's curl walk-through, as written,
// against `mesh node`, then stops the node with Ctrl-C.
func TestREADMEWalkthrough(t *testing.T) { // not parallel: it runs processes, against real-time bounds
	for _, tool := range []string{"bash", "curl", "jq"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("MESH_REQUIRE_TOOLS") == "1" {
				t.Fatalf("MESH_REQUIRE_TOOLS=1 but the README walk-through needs %s (apt-get install %s)", tool, tool)
			}
			t.Skipf("%s is not installed: skipping the README walk-through (set MESH_REQUIRE_TOOLS=1 to make this a failure)", tool)
		}
	}
	bin := buildMesh(t)
	url, node, lines := startMeshNode(t, bin, "--data", filepath.Join(t.TempDir(), "data"))

	sh := exec.Command("bash", "-euo", "pipefail", "-c", walkthrough(t))
	sh.Dir = t.TempDir()
	sh.Env = append(os.Environ(), "NODE="+url, "PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := sh.CombinedOutput()
	if err != nil {
		t.Fatalf("walk-through failed: %v\n%s", err, out)
	}
	for _, want := range []string{`did:key:z6Mk`, `"status":"registered"`, `"status":"ok"`, `"online":true`,
		`"verified":true`, `"status":"recorded"`, `"counted":true`, `"agent":"echo-1","n":1`, `"status":"deleted"`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("walk-through output lacks %s:\n%s", want, out)
		}
	}
	resp, err := http.Get(url + "/v1/agents/echo-1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("agent still there after the walk-through: %d", resp.StatusCode)
	}

	// Ctrl-C stops the node cleanly. Read its output to the end before Wait.
	node.Process.Signal(os.Interrupt)
	rest := make(chan string, 1)
	go func() {
		var b strings.Builder
		for lines.Scan() {
			b.WriteString(lines.Text() + "\n")
		}
		rest <- b.String()
	}()
	select {
	case r := <-rest:
		if !strings.Contains(r, "shutting down") {
			t.Errorf("node output after SIGINT: %q", r)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("node did not stop on SIGINT")
	}
	if err := node.Wait(); err != nil {
		t.Fatalf("node exited with %v", err)
	}
}
