package main

import (
	"crypto/ed25519"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/testkit"
	"github.com/agentmesh/mesh/p2p"
)

// TestAnUnreachableBootstrapIsWarnedAbout: a node started with a wrong
// --bootstrap port says so on its console at warn, naming the address
// and the error, while it keeps trying; its help says what --bootstrap is.
func TestAnUnreachableBootstrapIsWarnedAbout(t *testing.T) { // not parallel: it runs processes
	bin := buildMesh(t)
	id, _ := p2p.PeerID(identity.GenerateKey().Public().(ed25519.PublicKey))
	addr := "/ip4/127.0.0.1/tcp/" + strconv.Itoa(testkit.Port(t)) // nothing listens there
	var stderr testkit.Buffer
	cmd := exec.Command(bin, "node", "--http", "127.0.0.1:0", "--no-sync", "--data", t.TempDir(),
		"--listen", "/ip4/127.0.0.1/tcp/0", "--bootstrap", addr+"/p2p/"+id.String())
	cmd.Env = append(os.Environ(), "MESH_CARD_REFRESH=0")
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	testkit.Eventually(t, 10*time.Second, func() bool {
		for _, l := range strings.Split(stderr.String(), "\n") {
			if strings.Contains(l, "level=WARN") && strings.Contains(l, "cannot reach the bootstrap peer") &&
				strings.Contains(l, addr) && strings.Contains(l, "connection refused") {
				return true
			}
		}
		return false
	}, "no warning names the bootstrap address and the error:\n%s", &stderr)
	out, _ := exec.Command(bin, "node", "--help").CombinedOutput()
	if strings.Contains(string(out), "the first is the directory") || !strings.Contains(string(out), "it finds the leader itself") {
		t.Fatalf("mesh node --help on --bootstrap:\n%s", out)
	}
}
