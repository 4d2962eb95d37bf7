package node

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/mesh/internal/admission"
	"github.com/agentmesh/mesh/internal/testkit"
)

// benchNode starts a node on disk with the default durability (an fsync
// per directory write, as `mesh node` runs) and returns its bridge: routing,
// metrics and the registry, as every request meets them. Its write budgets
// are lifted: the benchmarks register as fast as the log takes it.
func benchNode(b *testing.B) *Node {
	cfg := testConfig(b, b.TempDir())
	cfg.SyncWrites, cfg.Budgets = true, admission.Config{}
	return startNode(b, cfg)
}

func benchRegister(b *testing.B, n *Node, id string) {
	body := fmt.Sprintf(`{"agent_id":%q,"capabilities":["echo","search"],"endpoint":"https://a.example"}`, id)
	rec := httptest.NewRecorder()
	n.Handler().ServeHTTP(rec, httptest.NewRequest("POST", "/v1/agents/register", strings.NewReader(body)))
	if rec.Code != 201 {
		b.Fatalf("register %s: %d %s", id, rec.Code, rec.Body)
	}
}

// BenchmarkBridgeRegister: POST /v1/agents/register (new ids) through the
// node's bridge, each committed durably.
func BenchmarkBridgeRegister(b *testing.B) {
	n := benchNode(b)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		benchRegister(b, n, fmt.Sprintf("bench-%d", i))
		i++
	}
}

// BenchmarkWriteWithoutDirectory: how long a client waits for the 503 of
// a write on a node whose directory is gone (the answer comes at once, not
// after the forward timeout), and of a lookup of an agent it lacks.
func BenchmarkWriteWithoutDirectory(b *testing.B) {
	boot := startNode(b, testConfig(b, b.TempDir()))
	cfg := testConfig(b, b.TempDir())
	cfg.Role, cfg.Bootstrap = RoleNode, boot.P2PAddrs()
	n := startNode(b, cfg)
	testkit.Eventually(b, 10*time.Second, func() bool { return n.host.Connected(boot.host.ID()) }, "the node never reached the directory")
	boot.Close()
	testkit.Eventually(b, 10*time.Second, func() bool { return !n.host.Connected(n.view.directory()) }, "the node still sees the directory")
	for _, c := range []struct{ name, method, path, body string }{
		{"register", "POST", "/v1/agents/register", `{"agent_id":"lost","capabilities":[],"endpoint":"https://l.example"}`},
		{"unknown-agent", "GET", "/v1/agents/unknown", ""},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				rec := httptest.NewRecorder()
				n.Handler().ServeHTTP(rec, httptest.NewRequest(c.method, c.path, strings.NewReader(c.body)))
				if rec.Code != 503 && rec.Code != 404 {
					b.Fatalf("%s %s: %d %s", c.method, c.path, rec.Code, rec.Body)
				}
			}
		})
	}
}
