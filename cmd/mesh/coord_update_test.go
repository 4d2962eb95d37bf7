package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentmesh/mesh/coord/update"
	"github.com/agentmesh/mesh/internal/testkit"
)

// TestCoordSelfUpdateRestarts: mesh coord, asked to update to a newer
// published release, replaces its executable, runs it in place and is
// back, as the new version, on the same port.
func TestCoordSelfUpdateRestarts(t *testing.T) { // not parallel: it runs processes, against real-time bounds
	testkit.Slow(t, "mesh coord processes")
	old := buildMesh(t)
	newer := filepath.Join(t.TempDir(), "mesh-new")
	if out, err := exec.Command("go", "build", "-ldflags", "-X github.com/agentmesh/mesh/coord.Version=go-99.0.0",
		"-o", newer, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	bin, _ := os.ReadFile(newer)
	sum := sha256.Sum256(bin)
	release := append([]byte(fmt.Sprintf("mesh-release go-99.0.0 %s\n", hex.EncodeToString(sum[:]))), bin...)
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/"+update.Artifact() {
			http.NotFound(w, r)
			return
		}
		w.Write(release)
	}))
	defer site.Close()

	exe := filepath.Join(t.TempDir(), "mesh")
	oldBin, _ := os.ReadFile(old)
	if err := os.WriteFile(exe, oldBin, 0o755); err != nil {
		t.Fatal(err)
	}
	proj := t.TempDir()
	os.WriteFile(filepath.Join(proj, "cluster.yaml"), []byte("id: self-update\n"), 0o644)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command(exe, "coord", "--dir", proj, "--port", fmt.Sprint(port), "--site-url", site.URL, "--insecure-site",
		"--registry", filepath.Join(t.TempDir(), "ports.json"))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	url := fmt.Sprintf("http://127.0.0.1:%d", port)

	waitVersion(t, url, "go-0.1.0")
	res, err := http.Post(url+"/self-update", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	var up struct{ Updated bool }
	json.NewDecoder(res.Body).Decode(&up)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !up.Updated {
		t.Fatalf("self-update: %d %+v", res.StatusCode, up)
	}
	waitVersion(t, url, "go-99.0.0")
	if got, _ := os.ReadFile(exe); string(got) != string(bin) {
		t.Fatal("the executable is not the release")
	}
}

// waitVersion waits, for 30 s, until the daemon at url answers /health
// with version.
func waitVersion(t *testing.T, url, version string) {
	t.Helper()
	testkit.Eventually(t, 30*time.Second, func() bool {
		res, err := http.Get(url + "/health")
		if err != nil {
			return false
		}
		defer res.Body.Close()
		var h struct{ Version string }
		json.NewDecoder(res.Body).Decode(&h)
		return h.Version == version
	}, "%s/health never said version %q", url, version)
}
