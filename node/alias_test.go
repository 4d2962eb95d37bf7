package node

import (
	"crypto/ed25519"
	"testing"
	"time"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/testkit"
	"github.com/agentmesh/mesh/registryapi"
)

func aliasOf(key ed25519.PrivateKey) string {
	return registryapi.AliasOf(identity.DIDFromPublicKey(key.Public().(ed25519.PublicKey)))
}

// TestMeshAlias: an agent's did:mesh alias resolves to it on every node of
// the mesh (the bootstrap and two others), in every read by id and in
// feedback, and its deregistration makes the alias 404 everywhere.
func TestMeshAlias(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	b, c := m.join(), m.join()
	key := identity.GenerateKey()
	apiKey := m.register(b, "aliased", key)
	alias := aliasOf(key)
	nodes := []*Node{m.boot, b, c}
	for _, n := range nodes {
		m.waitCaughtUp(n)
		for _, p := range []string{"/v1/agents/" + alias, "/v1/agents/" + alias + "/identity", "/agents/" + alias} {
			if st, v := call(t, n, "GET", p, ""); st != 200 || v["agent_id"] != "aliased" || v["did_mesh"] != alias {
				t.Fatalf("%s on %s: %d %v", p, n.URL(), st, v)
			}
		}
		if st, v := call(t, n, "GET", "/agent/"+alias, "", "Accept", "application/json"); st != 200 || v["agent_id"] != "aliased" {
			t.Fatalf("the public address by alias on %s: %d %v", n.URL(), st, v)
		}
	}
	if st, v := m.signedCall(c, identity.GenerateKey(), "POST", "/v1/agents/"+alias+"/feedback", `{"success":true}`); st != 200 || v["counted"] != true {
		t.Fatalf("feedback by alias through c: %d %v", st, v)
	}
	if st, v := call(t, c, "GET", "/v1/agents/"+alias+"/reputation", ""); st != 200 || v["agent"] != "aliased" || v["n"] != 1.0 {
		t.Fatalf("reputation by alias on c: %d %v", st, v)
	}
	st, v := call(t, b, "POST", "/v1/search", `{"query":"aliased"}`)
	if res, _ := v["results"].([]any); st != 200 || len(res) != 1 || res[0].(map[string]any)["did_mesh"] != alias {
		t.Fatalf("search on b: %d %v", st, v)
	}

	m.deleteAgent(c, "aliased", apiKey)
	for _, n := range nodes {
		testkit.Eventually(t, 5*time.Second, func() bool {
			st, v := call(t, n, "GET", "/v1/agents/"+alias, "")
			return st == 404 && v["code"] == "agent_not_found"
		}, "the alias of a deregistered agent still answers on %s", n.URL())
	}
	if st, v := call(t, b, "GET", "/v1/agents/did:mesh:z6Mkbad", ""); st != 400 || v["code"] != "invalid_alias" {
		t.Fatalf("a malformed alias: %d %v", st, v)
	}
}
