package node

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/testkit"
	"github.com/agentmesh/mesh/registryapi"
)

// TestEndpointCredentialsNeverSentNorShown: a registration whose endpoint
// carries credentials (user:password@) is refused; a row an earlier
// release took with some is probed without them (no Basic auth), and no
// answer of any node shows them.
func TestEndpointCredentialsNeverSentNorShown(t *testing.T) {
	m := newMeshWith(t, probing)
	b := m.join()
	var mu sync.Mutex
	var auth []string
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auth = append(auth, r.Header.Get("Authorization"))
		mu.Unlock()
		w.Write([]byte(`{"name":"Creds","skills":[{"id":"echo","name":"Echo"}]}`))
	}))
	defer agent.Close()
	endpoint := strings.Replace(agent.URL, "http://", "http://user:s3cret@", 1)

	key := identity.GenerateKey()
	body := `{"agent_id":"creds-1","capabilities":["echo"],"endpoint":"` + endpoint + `"}`
	if st, v := m.signedCall(b, key, "POST", "/v1/agents/register", body); st != 400 || v["code"] != "invalid_request" || !strings.Contains(v["detail"].(string), "credentials") {
		t.Fatalf("a registration with credentials in its endpoint: %d %v", st, v)
	}

	op := registryapi.Command{At: m.clock.Now().UnixNano(), Register: &registryapi.RegisterOp{
		AgentID: "creds-1", Capabilities: []string{"echo"}, Endpoint: endpoint, APIKeyHash: "x"}}
	if _, err := m.boot.orderer.Propose(context.Background(), registryapi.Kind, op.At, op); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 15*time.Second, func() bool {
		m.waitCaughtUp(b)
		st, _ := rawCall(t, b, "GET", "/agent/creds-1/.well-known/agent.json", "")
		return st == 200
	}, "the fetched card never reached the replica")
	mu.Lock()
	for _, a := range auth {
		if a != "" {
			t.Fatalf("the probe sent Authorization %q", a)
		}
	}
	mu.Unlock()
	for _, n := range []*Node{m.boot, b} {
		for _, path := range []string{"/v1/agents/creds-1", "/v1/agents/creds-1/identity", "/agent/creds-1", "/agent/creds-1/.well-known/agent.json"} {
			st, text := rawCall(t, n, "GET", path, "", "Accept", "application/json")
			if st != 200 || strings.Contains(text, "s3cret") || !strings.Contains(text, agent.URL) {
				t.Fatalf("GET %s on %s: %d %s", path, n.URL(), st, text)
			}
		}
		st, text := rawCall(t, n, "POST", "/v1/search", `{"query":"creds"}`)
		if st != 200 || strings.Contains(text, "s3cret") || !strings.Contains(text, "creds-1") {
			t.Fatalf("search on %s: %d %s", n.URL(), st, text)
		}
		if st, html := agentPage(t, n, "creds-1"); st != 200 || strings.Contains(html, "s3cret") {
			t.Fatalf("page on %s: %d %s", n.URL(), st, html)
		}
	}
}
