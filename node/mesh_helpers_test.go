package node

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/testkit"
	"github.com/agentmesh/mesh/registryapi"
)

// testClock is a clock shared by the nodes of a test mesh.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func newTestClock() *testClock { return &testClock{now: time.Now()} }

func (c *testClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// mesh is a set of nodes on loopback in this process.
type mesh struct {
	t     testing.TB
	clock *testClock
	boot  *Node
}

func newMesh(t testing.TB) *mesh { return newMeshWith(t, nil) }

// newMeshWith is newMesh, with tweak (if set) editing the bootstrap's
// config.
func newMeshWith(t testing.TB, tweak func(*Config)) *mesh {
	m := &mesh{t: t, clock: newTestClock()}
	cfg := m.config(t.TempDir(), RoleBootstrap)
	if tweak != nil {
		tweak(&cfg)
	}
	m.boot = m.start(cfg)
	return m
}

func (m *mesh) config(dir, role string) Config {
	cfg := testConfig(m.t, dir)
	cfg.Role = role
	cfg.Now = m.clock.Now
	if role == RoleNode {
		cfg.Bootstrap = m.boot.P2PAddrs()
	}
	return cfg
}

func (m *mesh) start(cfg Config) *Node {
	m.t.Helper()
	return startNode(m.t, cfg)
}

// join starts a node that replicates the bootstrap's directory and waits
// until it has caught up.
func (m *mesh) join() *Node {
	m.t.Helper()
	return m.joinWith(nil)
}

// joinWith is join, with tweak (if set) editing the node's config.
func (m *mesh) joinWith(tweak func(*Config)) *Node {
	m.t.Helper()
	cfg := m.config(m.t.TempDir(), RoleNode)
	if tweak != nil {
		tweak(&cfg)
	}
	n := m.start(cfg)
	m.waitCaughtUp(n)
	return n
}

func (m *mesh) waitCaughtUp(n *Node) {
	m.t.Helper()
	testkit.Eventually(m.t, 15*time.Second, func() bool {
		_, h := call(m.t, n, "GET", "/health", "")
		d := h["directory"].(map[string]any)
		return d["caught_up"] == true && d["seq"] == float64(m.boot.clog.Seq())
	}, "node %s never caught up", n.URL())

}

// signedCall sends a request signed by key with the mesh's clock.
func (m *mesh) signedCall(n *Node, key ed25519.PrivateKey, method, path, body string, hdr ...string) (int, map[string]any) {
	m.t.Helper()
	sig := identity.Sign(key, method, path, []byte(body), m.clock.Now())
	return call(m.t, n, method, path, body, append(hdr, identity.SigHeaderName, sig)...)
}

// register registers id bound to key through n and returns its api key.
func (m *mesh) register(n *Node, id string, key ed25519.PrivateKey) string {
	m.t.Helper()
	return m.registerAt(n, id, key, m.clock.Now())
}

// registerAt registers id bound to key through n, signed at the given
// time, and returns its api key.
func (m *mesh) registerAt(n *Node, id string, key ed25519.PrivateKey, at time.Time) string {
	m.t.Helper()
	body, _ := json.Marshal(map[string]any{"agent_id": id, "capabilities": []string{"echo"},
		"endpoint": "https://" + id + ".example", "pubkey": identity.EncodePublicKey(key.Public().(ed25519.PublicKey))})
	sig := identity.Sign(key, "POST", "/v1/agents/register", body, at)
	st, v := call(m.t, n, "POST", "/v1/agents/register", string(body), identity.SigHeaderName, sig)
	if st != 201 {
		m.t.Fatalf("register %s on %s: %d %v", id, n.URL(), st, v)
	}
	return v["api_key"].(string)
}

// deleteAgent deletes agent id through n.
func (m *mesh) deleteAgent(n *Node, id, apiKey string) {
	m.t.Helper()
	if st, v := call(m.t, n, "DELETE", "/v1/agents/me", "", "Authorization", "Bearer "+m.token(n, id, apiKey)); st != 200 {
		m.t.Fatalf("delete %s on %s: %d %v", id, n.URL(), st, v)
	}
}

func (m *mesh) token(n *Node, id, apiKey string) string {
	m.t.Helper()
	st, v := call(m.t, n, "POST", "/v1/agents/token", `{"agent_id":"`+id+`","api_key":"`+apiKey+`"}`)
	if st != 200 {
		m.t.Fatalf("token on %s: %d %v", n.URL(), st, v)
	}
	return v["token"].(string)
}

// rawCall returns status and raw body.
func rawCall(t testing.TB, n *Node, method, path, body string, hdr ...string) (int, string) {
	t.Helper()
	resp, b := send(t, n, method, path, body, hdr...)
	return resp.StatusCode, string(b)
}

// localRecord is the record of agent id that n holds as a DHT server.
func localRecord(n *Node, id string) (*registryapi.AgentRecord, error) {
	return localRecordAt(n, registryapi.IDRecordKey(id))
}

// localRecordAt is the record under key that n holds as a DHT server.
func localRecordAt(n *Node, key string) (*registryapi.AgentRecord, error) {
	val, err := n.host.LocalValue(context.Background(), key)
	if err != nil {
		return nil, err
	}
	return n.validator.Parse(key, val)
}

// metric is the value of one series on n's /metrics (0 when absent).
func metric(t *testing.T, n *Node, series string) float64 {
	t.Helper()
	_, body := rawCall(t, n, "GET", "/metrics", "")
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}
