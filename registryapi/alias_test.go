package registryapi

import (
	"context"
	"crypto/ed25519"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/storetest"
	"github.com/agentmesh/mesh/internal/testkit"
)

func aliasOfKey(key ed25519.PrivateKey) string {
	return AliasOf(identity.DIDFromPublicKey(key.Public().(ed25519.PublicKey)))
}

// TestAliasResolves: did:mesh:<key> answers, on every read by id, for
// the agent registered with that key, and follows the key: a rotation
// moves it at once, a deregistration makes it 404.
func TestAliasResolves(t *testing.T) {
	h := newHarness(t)
	key := identity.GenerateKey()
	_, tok := h.registerKeyed("aliased", key)
	alias := aliasOfKey(key)
	if !strings.HasPrefix(alias, "did:mesh:z6Mk") {
		t.Fatalf("alias %q", alias)
	}
	for _, p := range []string{"/v1/agents/%s", "/agents/%s", "/v1/agents/%s/identity", "/v1/agents/%s/reputation", "/agent/%s"} {
		r := h.want(h.do("GET", strings.Replace(p, "%s", alias, 1), "", "Accept", "application/json"), 200, "")
		if id := r.str("agent_id") + r.str("agent"); id != "aliased" {
			t.Fatalf("%s: %s", p, r.raw)
		}
		if p != "/v1/agents/%s/reputation" && r.str("did_mesh") != alias {
			t.Fatalf("%s: did_mesh %q, want %q", p, r.str("did_mesh"), alias)
		}
	}
	// Feedback through the alias is on the agent.
	h.want(h.signed(identity.GenerateKey(), "POST", "/v1/agents/"+alias+"/feedback", `{"success":true}`), 200, "")
	if r := h.want(h.do("GET", "/v1/agents/aliased/reputation", ""), 200, ""); r.body["n"] != float64(1) {
		t.Fatalf("reputation after feedback by alias: %s", r.raw)
	}

	// A rotation: the new key's alias names the agent, the old one nobody.
	next := identity.GenerateKey()
	body := jsonBody(map[string]any{"agent_id": "aliased", "pubkey": identity.EncodePublicKey(next.Public().(ed25519.PublicKey))})
	h.want(h.signed(next, "POST", "/v1/agents/register", body, bearer(tok)...), 200, "")
	h.want(h.do("GET", "/v1/agents/"+alias, ""), 404, "agent_not_found")
	h.want(h.do("GET", "/v1/agents/"+aliasOfKey(next), ""), 200, "")

	h.want(h.do("DELETE", "/v1/agents/me", "", bearer(tok)...), 200, "")
	h.want(h.do("GET", "/v1/agents/"+aliasOfKey(next), ""), 404, "agent_not_found")
	h.want(h.do("GET", "/v1/agents/"+aliasOfKey(next)+"/identity", ""), 404, "agent_not_found")
}

// TestAliasServesOnlyItsKey: an alias resolved to an id (here by a
// fallback as behind as a DHT server that missed a tombstone) whose agent
// holds another key now answers 404 on every read, and feedback sent
// through it is on nobody: never the id's new owner.
func TestAliasServesOnlyItsKey(t *testing.T) {
	former := identity.GenerateKey()
	formerDID := identity.DIDFromPublicKey(former.Public().(ed25519.PublicKey))
	h := newHarnessOn(t, storetest.DB(t), func(c *Config) {
		c.KeyFallback = func(_ context.Context, did string) (string, error) {
			if did == formerDID {
				return "reused", nil // the former owner's record, under its did
			}
			return "", ErrAgentNotFound
		}
	})
	h.registerKeyed("reused", identity.GenerateKey())
	alias := aliasOfKey(former)
	for _, p := range []string{"/v1/agents/%s", "/agents/%s", "/v1/agents/%s/identity", "/v1/agents/%s/reputation", "/agent/%s",
		"/agent/%s/.well-known/agent.json"} {
		h.want(h.do("GET", strings.Replace(p, "%s", alias, 1), "", "Accept", "application/json"), 404, "agent_not_found")
	}
	h.want(h.signed(identity.GenerateKey(), "POST", "/v1/agents/"+alias+"/feedback", goodReport), 404, "agent_not_found")
	if r := h.want(h.do("GET", "/v1/agents/reused/reputation", ""), 200, ""); r.body["n"] != float64(0) {
		t.Fatalf("the id's new owner got the feedback sent to the former owner's alias: %s", r.raw)
	}
}

// TestAliasBadInput: a malformed alias is 400 invalid_alias, a key no
// agent holds 404, and no id in the alias's namespace can be registered
// or listed.
func TestAliasBadInput(t *testing.T) {
	h := newHarness(t)
	for _, bad := range []string{
		"did:mesh:", "did:mesh:nope", "did:mesh:z", "did:mesh:z0OIl", // not base58
		"did:mesh:zQ3shokFTS3brHcDQrn82RUDfCZESWL1ZdCEJwekUDPQiYBme", // a secp256k1 key
		"DID:MESH:" + strings.TrimPrefix(aliasOfKey(identity.GenerateKey()), "did:mesh:"),
		"did:mesh:" + strings.Repeat("z", 200),
	} {
		h.want(h.do("GET", "/v1/agents/"+bad, ""), 400, "invalid_alias")
	}
	h.want(h.do("GET", "/v1/agents/"+aliasOfKey(identity.GenerateKey()), ""), 404, "agent_not_found")
	// A registered agent without a key has no alias.
	h.registerPlain("keyless")
	if r := h.want(h.do("GET", "/v1/agents/keyless", ""), 200, ""); r.body["did_mesh"] != nil {
		t.Fatalf("did_mesh of a keyless agent: %s", r.raw)
	}

	key := identity.GenerateKey()
	for _, id := range []string{aliasOfKey(key), "DID:Mesh:x", "did:mesh:"} {
		body := jsonBody(map[string]any{"agent_id": id, "pubkey": identity.EncodePublicKey(key.Public().(ed25519.PublicKey))})
		h.want(h.signed(key, "POST", "/v1/agents/register", body), 400, "invalid_request")
		h.want(h.signed(h.admin, "POST", "/v1/admin/catalog", jsonBody(map[string]any{"listings": []map[string]any{{"agent_id": id}}})),
			400, "invalid_request")
	}
	// did:meshy is not the namespace.
	h.want(h.do("POST", "/v1/agents/register", `{"agent_id":"did:meshy:1"}`), 201, "")
}

// TestAliasFallbackBounded: a node that asks beyond its replica (one still
// catching up) looks an alias up once however many ask at once, at most
// aliasLookups at a time in all, and answers an alias that led nowhere
// from memory for aliasMissTTL, remembering at most maxAliasMisses.
func TestAliasFallbackBounded(t *testing.T) {
	var calls, inFlight, most atomic.Int64
	release := make(chan struct{})
	registered := map[string]string{}
	lookup := func(ctx context.Context, did string) (string, error) {
		calls.Add(1)
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		<-release
		if id, ok := registered[did]; ok {
			return id, nil
		}
		return "", ErrAgentNotFound
	}
	x := newAliases()
	now := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	known := aliasOfKey(identity.GenerateKey())
	registered["did:key:"+strings.TrimPrefix(known, AliasPrefix)] = "known"

	// 50 requests for one alias, and 100 for as many others, at once.
	var wg sync.WaitGroup
	results := make(chan string, 50)
	for range 50 {
		wg.Go(func() {
			id, _ := x.fallback(context.Background(), known, "did:key:"+strings.TrimPrefix(known, AliasPrefix), now, lookup)
			results <- id
		})
	}
	misses := make([]string, 100)
	for i := range misses {
		misses[i] = aliasOfKey(identity.GenerateKey())
		wg.Go(func() { x.fallback(context.Background(), misses[i], "did:key:x", now, lookup) })
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return inFlight.Load() >= aliasLookups }, "the lookups never all started")
	close(release)
	wg.Wait()
	close(results)
	for id := range results {
		if id != "known" {
			t.Fatalf("a request for the alias got %q", id)
		}
	}
	if most.Load() > aliasLookups {
		t.Fatalf("%d lookups at once, over %d", most.Load(), aliasLookups)
	}
	if c := calls.Load(); c > 101 {
		t.Fatalf("%d lookups for 101 aliases", c)
	}

	// Misses are answered from memory until aliasMissTTL has passed.
	before := calls.Load()
	for _, a := range misses {
		if _, err := x.fallback(context.Background(), a, "did:key:x", now.Add(aliasMissTTL-time.Second), lookup); !isNotFound(err) {
			t.Fatalf("a remembered miss: %v", err)
		}
	}
	if calls.Load() != before {
		t.Fatalf("remembered misses were looked up again: %d lookups", calls.Load()-before)
	}
	x.fallback(context.Background(), misses[0], "did:key:x", now.Add(aliasMissTTL), lookup)
	if calls.Load() != before+1 {
		t.Fatalf("a lapsed miss was not looked up again")
	}

	// The memory is bounded.
	for i := range maxAliasMisses + 100 {
		x.miss(AliasPrefix+string(rune('a'+i%26))+strings.Repeat("x", i/26), now)
	}
	if n := len(x.misses); n > maxAliasMisses {
		t.Fatalf("%d misses remembered, over %d", n, maxAliasMisses)
	}
}
