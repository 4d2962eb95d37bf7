package node

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gagliardetto/solana-go"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/testkit"
	"github.com/agentmesh/mesh/interop"
	"github.com/agentmesh/mesh/interop/soltest"
	"github.com/agentmesh/mesh/p2p"
	"github.com/agentmesh/mesh/wall"
)

// TestOpenAPIDocumentIsTrue: the document a node serves at /openapi.json
// describes exactly the routes a node serves, and every documented
// operation, sent to real nodes, is answered as the document says.
func TestOpenAPIDocumentIsTrue(t *testing.T) {
	t.Parallel()
	chain := soltest.New(t)
	provider := interop.NewWallet()
	// The directory takes one search a minute from an address, so that a
	// second one shows the 429.
	m := newMeshWith(t, func(c *Config) { c.SearchRate, c.SearchBurst = 1, 1 })
	n := m.joinWith(func(c *Config) {
		c.Agent = apiAgent("api-agent", chain, provider.Address(), interop.ModeX402, interop.ModeDeposit)
	})
	// An agent that takes deposits only answers an unpaid call with a
	// plain Error, not an x402 challenge.
	prepaid := m.joinWith(func(c *Config) { c.Agent = apiAgent("api-prepaid", chain, provider.Address(), interop.ModeDeposit) })
	for _, a := range []*Node{n, prepaid} {
		testkit.Eventually(t, 15*time.Second, a.AgentRegistered, "agent never registered")
		m.waitCaughtUp(a)
	}

	t.Run("routes", func(t *testing.T) {
		documented := docOps(loadAPIDoc(t))
		served := map[string]string{} // operation to the pattern that serves it
		for _, srv := range []*Node{m.boot, n} {
			for _, p := range srv.mux.Patterns() {
				served[routeOp(p, n.Agent().SkillIDs())] = p
			}
		}
		for op, p := range served {
			if !documented[op] {
				t.Errorf("route %q is served but not in the document", p)
			}
		}
		for op := range documented {
			if _, ok := served[op]; !ok {
				t.Errorf("documented operation %s is not served", op)
			}
		}
	})
	t.Run("answers", func(t *testing.T) {
		h := newAPIHarness(t, m, n)
		registryCases(h)
		searchCases(h)
		clusterCases(h)
		boardCases(h)
		nodeCases(h)
		agentCases(h, chain, provider.Address())
		pageCases(h)
		h.run(apiCase{name: "a priced skill of a prepaid-only agent", node: prepaid, method: "POST", path: "/v1/echo", body: `{"x":1}`,
			status: http.StatusPaymentRequired, code: "payment_required"})
		h.checkCoverage()
	})
}

// apiAgent is an embedded agent with a priced skill (echo) and a free one
// (ping), paid in the given modes; with x402, echo is also priced in USDC
// (x402 v2) through a fee payer of the agent's, and a third skill (usdc)
// is priced only in USDC.
func apiAgent(id string, chain *soltest.Chain, wallet string, modes ...string) *AgentConfig {
	echo := func(_ context.Context, in json.RawMessage) (any, error) { return map[string]any{"echo": in}, nil }
	cfg := &AgentConfig{ID: id, AgentConfig: interop.AgentConfig{
		Card: interop.Card{Name: "API", Description: "answers the OpenAPI test"},
		Skills: []interop.Skill{
			{ID: "echo", Name: "Echo", Pricing: interop.Prices{interop.Lamports(5000, interop.NetworkDevnet)}, Handler: echo},
			{ID: "ping", Name: "Ping", Handler: echo},
		},
		Payment: &interop.PaymentConfig{Network: interop.NetworkDevnet, Wallet: wallet, RPCURL: chain.URL,
			Modes: modes},
	}}
	if slices.Contains(modes, interop.ModeX402) {
		usdc := interop.Token(10_000, interop.CurrencyUSDC, "", interop.NetworkDevnet)
		cfg.Skills[0].Pricing = append(cfg.Skills[0].Pricing, usdc)
		cfg.Skills = append(cfg.Skills, interop.Skill{ID: "usdc", Name: "Priced in USDC only", Pricing: interop.Prices{usdc}, Handler: echo})
		cfg.Payment.FeePayer = interop.NewWallet()
	}
	return cfg
}

func pubkeyOf(k ed25519.PrivateKey) string {
	return identity.EncodePublicKey(k.Public().(ed25519.PublicKey))
}

func registryCases(h *apiHarness) {
	key, other := identity.GenerateKey(), identity.GenerateKey()
	reg := `{"agent_id":"oa-1","capabilities":["echo"],"endpoint":"https://oa-1.example","pubkey":"` + pubkeyOf(key) + `",` +
		`"card":{"name":"OA","tags":["test"],"skills":[{"id":"echo"}],"pricing":[{"unit":"request","amount":5000,"currency":"lamports","network":"chain-devnet"}]}}`
	h.run(apiCase{name: "register a free id", method: "POST", path: "/v1/agents/register", body: reg, sign: key, status: 201})
	v := h.run(apiCase{name: "register again as the owner", method: "POST", path: "/v1/agents/register", body: reg, sign: key, status: 200})
	h.run(apiCase{name: "register another's id", method: "POST", path: "/v1/agents/register",
		body: `{"agent_id":"oa-1","pubkey":"` + pubkeyOf(other) + `"}`, sign: other, status: 409, code: "agent_id_taken"})
	h.run(apiCase{name: "register with a forged signature", method: "POST", path: "/v1/agents/register", body: `{"agent_id":"oa-2"}`,
		hdr: []string{identity.SigHeaderName, "v1 nope 1 n sig"}, status: 401, code: "invalid_signature"})
	h.run(apiCase{name: "register without an id", method: "POST", path: "/v1/agents/register", body: `{}`,
		status: 400, code: "invalid_request", invalid: true})
	legacy := h.run(apiCase{name: "legacy register", method: "POST", path: "/agents/register", body: `{"agent_id":"oa-legacy"}`, status: 201})

	apiKey, _ := v["api_key"].(string)
	h.run(apiCase{name: "token", method: "POST", path: "/v1/agents/token",
		body: `{"agent_id":"oa-1","api_key":"` + apiKey + `"}`, status: 200})
	h.run(apiCase{name: "token with a wrong key", method: "POST", path: "/v1/agents/token",
		body: `{"agent_id":"oa-1","api_key":"mk_nope"}`, status: 401, code: "invalid_credentials"})
	h.run(apiCase{name: "token without api_key", method: "POST", path: "/v1/agents/token",
		body: `{"agent_id":"oa-1"}`, status: 400, code: "invalid_request", invalid: true})
	legacyKey, _ := legacy["api_key"].(string)
	tok := h.run(apiCase{name: "legacy token", method: "POST", path: "/agents/token",
		body: `{"agent_id":"oa-legacy","api_key":"` + legacyKey + `"}`, status: 200})
	token, _ := tok["token"].(string)
	bearer := "Bearer " + token

	h.run(apiCase{name: "heartbeat", method: "POST", path: "/v1/agents/me/heartbeat", body: `{"status":"idle"}`,
		hdr: []string{"Authorization", bearer}, status: 200})
	h.run(apiCase{name: "heartbeat with a forged token", method: "POST", path: "/v1/agents/me/heartbeat",
		hdr: []string{"Authorization", "Bearer mt1.nope"}, status: 401, code: "invalid_token"})
	h.run(apiCase{name: "heartbeat without a token", method: "POST", path: "/v1/agents/me/heartbeat",
		status: 401, code: "token_required", invalid: true})
	h.m.waitCaughtUp(h.node)

	for _, p := range []string{"/v1/agents/%s", "/agents/%s", "/v1/agents/%s/identity", "/v1/agents/%s/reputation"} {
		h.run(apiCase{name: "GET " + p, method: "GET", path: fmt.Sprintf(p, "oa-1"), status: 200})
		h.run(apiCase{name: "GET " + p + " of nobody", method: "GET", path: fmt.Sprintf(p, "nobody"), status: 404, code: "agent_not_found"})
		h.run(apiCase{name: "GET " + p + " by alias", method: "GET", path: fmt.Sprintf(p, aliasOf(key)), status: 200})
		h.run(apiCase{name: "GET " + p + " by a malformed alias", method: "GET", path: fmt.Sprintf(p, "did:mesh:z6Mk"), status: 400, code: "invalid_alias"})
		h.run(apiCase{name: "GET " + p + " by an alias nobody holds", method: "GET", path: fmt.Sprintf(p, aliasOf(other)), status: 404, code: "agent_not_found"})
	}
	h.run(apiCase{name: "register an id in the alias namespace", method: "POST", path: "/v1/agents/register",
		body: `{"agent_id":"` + aliasOf(other) + `","pubkey":"` + pubkeyOf(other) + `"}`, sign: other, status: 400, code: "invalid_request", invalid: true})

	report := `{"success":true,"latency_ms":300,"quality":5}`
	h.run(apiCase{name: "feedback", method: "POST", path: "/v1/agents/oa-1/feedback", body: report, sign: other, status: 200})
	h.run(apiCase{name: "feedback on itself", method: "POST", path: "/v1/agents/oa-1/feedback", body: report, sign: key,
		status: 403, code: "self_rating"})
	h.run(apiCase{name: "feedback unsigned", method: "POST", path: "/v1/agents/oa-1/feedback", body: report,
		status: 401, code: "signature_required", invalid: true})
	h.run(apiCase{name: "feedback without success", method: "POST", path: "/v1/agents/oa-1/feedback", body: `{"quality":3}`, sign: other,
		status: 400, code: "invalid_request", invalid: true})

	h.run(apiCase{name: "catalog import", method: "POST", path: "/v1/admin/catalog",
		body: `{"listings":[{"agent_id":"listed-1","name":"Listed","url":"https://listed.example","capabilities":["translate"]}]}`,
		sign: h.m.boot.key, status: 200})
	h.run(apiCase{name: "catalog import by another key", method: "POST", path: "/v1/admin/catalog",
		body: `{"listings":[{"agent_id":"listed-2"}]}`, sign: other, status: 403, code: "not_admin"})

	h.run(apiCase{name: "deregister", method: "DELETE", path: "/v1/agents/me", hdr: []string{"Authorization", bearer}, status: 200})
	h.run(apiCase{name: "deregister again", method: "DELETE", path: "/v1/agents/me", hdr: []string{"Authorization", bearer},
		status: 404, code: "agent_not_found"})
}

func searchCases(h *apiHarness) {
	v := h.run(apiCase{name: "search", method: "POST", path: "/v1/search",
		body: `{"query":"echo test","capabilities":["echo"],"online":true,"limit":5}`, status: 200})
	if res, _ := v["results"].([]any); len(res) == 0 {
		h.t.Errorf("the search found nothing, so its results were not validated: %v", v)
	}
	v = h.run(apiCase{name: "search over the limit", method: "POST", path: "/v1/search", body: `{"query":"echo","limit":99}`, status: 200})
	if notes, _ := v["notes"].([]any); len(notes) != 1 {
		h.t.Errorf("a limit over 50 is not noted: %v", v)
	}
	h.run(apiCase{name: "search by filters alone", method: "POST", path: "/v1/search", body: `{"capabilities":["echo"]}`, status: 200})
	h.run(apiCase{name: "search with a negative limit", method: "POST", path: "/v1/search", body: `{"limit":-1}`,
		status: 400, code: "invalid_request", invalid: true})
	h.run(apiCase{name: "search with a made-up cursor", method: "POST", path: "/v1/search", body: `{"query":"echo","cursor":"zzz"}`,
		status: 400, code: "invalid_cursor"})
	h.run(apiCase{name: "search by price without a rate", method: "POST", path: "/v1/search", body: `{"query":"echo","max_price_usd":0.01}`,
		status: 503, code: "price_rate_unknown"})
	h.run(apiCase{name: "search at the directory", node: h.m.boot, method: "POST", path: "/v1/search", body: `{"query":"translate"}`, status: 200})
	h.run(apiCase{name: "search over the budget", node: h.m.boot, method: "POST", path: "/v1/search", body: `{"query":"translate"}`,
		status: 429, code: "search_rate_limited"})
}

func clusterCases(h *apiHarness) {
	pub := h.run(apiCase{name: "create a public cluster", method: "POST", path: "/v1/clusters",
		body: `{"name":"OpenAPI Square","visibility":"public","topic":"#api"}`, status: 201})
	priv := h.run(apiCase{name: "create a private cluster", method: "POST", path: "/v1/clusters", status: 201})
	h.run(apiCase{name: "create with a bad visibility", method: "POST", path: "/v1/clusters", body: `{"visibility":"secret"}`,
		status: 400, code: "invalid_request", invalid: true})
	h.run(apiCase{name: "list clusters", method: "GET", path: "/v1/clusters", status: 200})
	slug, _ := pub["slug"].(string)
	h.run(apiCase{name: "get a cluster by slug", method: "GET", path: "/v1/clusters/" + slug, status: 200})
	privID, _ := priv["cluster_id"].(string)
	h.run(apiCase{name: "get a private cluster", method: "GET", path: "/v1/clusters/" + privID, status: 404, code: "cluster_not_found"})
	h.run(apiCase{name: "get an unknown cluster", method: "GET", path: "/v1/clusters/c_nope", status: 404, code: "cluster_not_found"})

	upgrade := []string{"Connection", "Upgrade", "Upgrade", "websocket", "Sec-WebSocket-Version", "13", "Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="}
	h.run(apiCase{name: "join a wall", method: "GET", path: "/v1/clusters/" + slug + "/ws?agent=alice&vis=ghost", hdr: upgrade, status: 101})
	pubID, _ := pub["cluster_id"].(string)
	member := identity.GenerateKey()
	did := identity.DIDFromPublicKey(member.Public().(ed25519.PublicKey))
	ch, _ := h.run(apiCase{name: "a connect challenge", method: "GET", path: "/v1/clusters/" + slug + "/challenge", status: 200})["challenge"].(string)
	h.run(apiCase{name: "a challenge of an unknown cluster", method: "GET", path: "/v1/clusters/c_nope/challenge", status: 404, code: "cluster_not_found"})
	h.run(apiCase{name: "join a wall proving a did", method: "GET", path: "/v1/clusters/" + slug + "/ws?agent=bob&did=" + did + "&challenge=" + ch,
		hdr: append(upgrade, identity.SigHeaderName, wall.SignConnect(member, pubID, "bob", ch, h.m.clock.Now())), status: 101})
	h.run(apiCase{name: "join a wall with another's proof", method: "GET",
		path: "/v1/clusters/" + slug + "/ws?agent=bob&did=" + did + "&challenge=" + ch + "&sig=" + url.QueryEscape(wall.SignConnect(identity.GenerateKey(), pubID, "bob", ch, h.m.clock.Now())),
		hdr:  upgrade, status: 401, code: "did_mismatch"})
	h.run(apiCase{name: "join a wall with a proof and no challenge", method: "GET",
		path: "/v1/clusters/" + slug + "/ws?agent=bob&did=" + did + "&sig=" + url.QueryEscape(wall.SignConnect(member, pubID, "bob", ch, h.m.clock.Now())),
		hdr:  upgrade, status: 401, code: "invalid_challenge"})
	h.run(apiCase{name: "spectate a wall", method: "GET", path: "/v1/clusters/" + slug + "/ws?spectate=1", hdr: upgrade, status: 101})
	h.run(apiCase{name: "spectate a private wall", method: "GET", path: "/v1/clusters/" + privID + "/ws?spectate=1&token=" + url.QueryEscape(priv["token"].(string)),
		hdr: upgrade, status: 400, code: "invalid_request"})
	h.run(apiCase{name: "the clusters page", method: "GET", path: "/clusters", status: 200})
	h.run(apiCase{name: "the clusters as JSON", method: "GET", path: "/clusters", hdr: []string{"Accept", "application/json"}, status: 200})
	h.run(apiCase{name: "a cluster's page", method: "GET", path: "/clusters/" + slug, status: 200})
	h.run(apiCase{name: "a cluster's page as JSON", method: "GET", path: "/clusters/" + pubID, hdr: []string{"Accept", "application/json"}, status: 200})
	h.run(apiCase{name: "a private cluster's page", method: "GET", path: "/clusters/" + privID, status: 404})
	h.run(apiCase{name: "the page of private clusters", method: "GET", path: "/join", status: 200})
	h.run(apiCase{name: "a private cluster's page as JSON", method: "GET", path: "/clusters/" + privID, hdr: []string{"Accept", "application/json"},
		status: 404, code: "cluster_not_found"})
	h.run(apiCase{name: "the pages' script", method: "GET", path: "/assets/wall/cluster.js", status: 200})
	h.run(apiCase{name: "the map's land", method: "GET", path: "/assets/wall/land.svg", status: 200})
	h.run(apiCase{name: "a cluster's boards without boards", method: "GET", path: "/clusters/" + slug + "/boards", status: 404, code: "not_found"})
	h.run(apiCase{name: "the boards of a private cluster", method: "GET", path: "/clusters/" + privID + "/boards", status: 404, code: "cluster_not_found"})
	h.run(apiCase{name: "no such asset", method: "GET", path: "/assets/wall/nope.js", status: 404, code: "not_found"})
	h.run(apiCase{name: "join a wall over plain HTTP", method: "GET", path: "/v1/clusters/" + slug + "/ws?agent=alice",
		status: 426, code: "websocket_required", invalid: true})
	h.run(apiCase{name: "join a wall without a handle", method: "GET", path: "/v1/clusters/" + slug + "/ws", hdr: upgrade,
		status: 400, code: "invalid_request"})
	h.run(apiCase{name: "join a private wall without its token", method: "GET", path: "/v1/clusters/" + privID + "/ws?agent=alice", hdr: upgrade,
		status: 401, code: "token_required"})
	h.run(apiCase{name: "join an unknown wall", method: "GET", path: "/v1/clusters/c_nope/ws?agent=alice", hdr: upgrade,
		status: 404, code: "cluster_not_found"})

	ck, _ := priv["token"].(string)
	h.run(apiCase{name: "history", method: "GET", path: "/v1/clusters/" + privID + "/history?limit=10",
		hdr: []string{"X-Cluster-Token", ck}, status: 200})
	h.run(apiCase{name: "history without a token", method: "GET", path: "/v1/clusters/" + privID + "/history",
		status: 401, code: "owner_token_required", invalid: true})
	h.run(apiCase{name: "history with a bad limit", method: "GET", path: "/v1/clusters/" + privID + "/history?limit=0",
		hdr: []string{"X-Cluster-Token", ck}, status: 400, code: "invalid_request", invalid: true})

	pubAdmin := []string{"X-Cluster-Token", pub["admin_token"].(string)}
	h.run(apiCase{name: "rename a cluster", method: "PATCH", path: "/v1/clusters/" + pubID, body: `{"name":"OpenAPI Plaza"}`, hdr: pubAdmin, status: 200})
	h.run(apiCase{name: "a renamed cluster by its former slug", method: "GET", path: "/v1/clusters/" + slug, status: 200})
	h.run(apiCase{name: "a renamed cluster's page by its former slug", method: "GET", path: "/clusters/" + slug, status: 301})
	h.run(apiCase{name: "make a cluster private", method: "PATCH", path: "/v1/clusters/" + pubID, body: `{"visibility":"private"}`, hdr: pubAdmin, status: 200})
	h.run(apiCase{name: "make it public again", method: "PATCH", path: "/v1/clusters/" + pubID, body: `{"visibility":"public","name":"OpenAPI Square"}`,
		hdr: pubAdmin, status: 200})
	h.run(apiCase{name: "a visibility it has", method: "PATCH", path: "/v1/clusters/" + pubID, body: `{"visibility":"public"}`, hdr: pubAdmin, status: 200})
	h.run(apiCase{name: "another visibility", method: "PATCH", path: "/v1/clusters/" + pubID, body: `{"visibility":"secret"}`, hdr: pubAdmin,
		status: 400, code: "invalid_request", invalid: true})

	ak, _ := priv["admin_token"].(string)
	h.run(apiCase{name: "delete with the member token", method: "DELETE", path: "/v1/clusters/" + privID,
		hdr: []string{"X-Cluster-Token", ck}, status: 401, code: "admin_token_required"})
	h.run(apiCase{name: "delete", method: "DELETE", path: "/v1/clusters/" + privID, hdr: []string{"Authorization", "Bearer " + ak}, status: 200})
	h.run(apiCase{name: "delete again", method: "DELETE", path: "/v1/clusters/" + privID + "?token=" + ak,
		status: 404, code: "cluster_not_found"})
}

func nodeCases(h *apiHarness) {
	h.run(apiCase{name: "health", method: "GET", path: "/health", status: 200})
	h.run(apiCase{name: "health of the directory", node: h.m.boot, method: "GET", path: "/health", status: 200})
	h.run(apiCase{name: "metrics", method: "GET", path: "/metrics", status: 200})
	h.run(apiCase{name: "the document", method: "GET", path: "/openapi.json", status: 200})
	h.run(apiCase{name: "quorum", method: "GET", path: "/v1/admin/quorum", status: 200})
	h.run(apiCase{name: "quorum at the directory", node: h.m.boot, method: "GET", path: "/v1/admin/quorum", status: 200})
	boot := h.m.boot
	h.run(apiCase{name: "add a member to a lone directory", method: "POST", path: "/v1/admin/quorum/members",
		body: `{"addr":"` + boot.P2PAddrs()[0] + `"}`, sign: boot.key, status: 409, code: "not_a_quorum"})
	h.run(apiCase{name: "add a member unsigned", method: "POST", path: "/v1/admin/quorum/members",
		body: `{"addr":"` + boot.P2PAddrs()[0] + `"}`, status: 401, code: "signature_required", invalid: true})
	h.run(apiCase{name: "remove a member of a lone directory", method: "DELETE", path: "/v1/admin/quorum/members/" + boot.host.ID().String(),
		sign: boot.key, status: 409, code: "not_a_quorum"})
	h.run(apiCase{name: "remove a member by another key", method: "DELETE", path: "/v1/admin/quorum/members/" + boot.host.ID().String(),
		sign: identity.GenerateKey(), status: 403, code: "not_admin"})
}

func agentCases(h *apiHarness, chain *soltest.Chain, wallet string) {
	caller := identity.GenerateKey()
	h.run(apiCase{name: "card", method: "GET", path: "/.well-known/agent-card.json", status: 200})
	h.run(apiCase{name: "card at the older path", method: "GET", path: "/.well-known/agent.json", status: 200})
	h.run(apiCase{name: "card for an A2A 1.0 client", method: "GET", path: "/.well-known/agent-card.json", hdr: []string{"A2A-Version", "1.0"}, status: 200})
	h.run(apiCase{name: "whoami", method: "GET", path: "/v1/whoami", sign: caller, status: 200})
	h.run(apiCase{name: "whoami unsigned", method: "GET", path: "/v1/whoami", status: 401, code: "signature_required", invalid: true})

	h.run(apiCase{name: "a free skill", method: "POST", path: "/v1/ping", body: `{"x":1}`, status: 200})
	h.run(apiCase{name: "a priced skill unpaid", method: "POST", path: "/v1/echo", body: `{"x":1}`, sign: caller,
		status: http.StatusPaymentRequired, code: "payment_required"})
	h.run(apiCase{name: "a skill priced only in tokens unpaid", method: "POST", path: "/v1/usdc", body: `{"x":1}`,
		status: http.StatusPaymentRequired, code: "payment_required"})
	h.run(apiCase{name: "a skill priced only in tokens with the seed's proof", method: "POST", path: "/v1/usdc", body: `{"x":1}`,
		hdr:    []string{"X-Payment-Proof", "5VERv8NMvzbJMEkV8xnrLkEaWRtSz9CosKDYjCJjBRnbJLgp8uirBgmQpjKhoR4tjF3ZpRzrFmBV6UjKdiSZkQUW"},
		status: http.StatusPaymentRequired, code: "payment_scheme_unsupported"})
	h.run(apiCase{name: "a priced skill with a malformed proof", method: "POST", path: "/v1/echo", body: `{"x":1}`,
		hdr: []string{"X-Payment-Proof", "nope"}, status: http.StatusPaymentRequired, code: "payment_proof_malformed"})
	h.run(apiCase{name: "a priced skill with a malformed x402 v2 payment", method: "POST", path: "/v1/echo", body: `{"x":1}`,
		hdr: []string{"PAYMENT-SIGNATURE", "bm9wZQ=="}, status: http.StatusPaymentRequired, code: "payment_payload_malformed"})
	h.run(apiCase{name: "a priced skill with an x402 v1 payment on another network", method: "POST", path: "/v1/echo", body: `{"x":1}`,
		hdr: []string{"X-PAYMENT", interop.EncodeHeader(map[string]any{"x402Version": 1, "scheme": "exact", "network": "base",
			"payload": map[string]string{"transaction": "AQID"}})}, status: http.StatusPaymentRequired, code: "payment_scheme_unsupported"})
	h.run(apiCase{name: "a skill sent no JSON", method: "POST", path: "/v1/echo", body: `nope`,
		status: 400, code: "invalid_json", invalid: true})
	h.run(apiCase{name: "a skill with an unknown balance", method: "POST", path: "/v1/echo", body: `{"x":1}`, sign: caller,
		hdr: []string{"X-Api-Key", "tk_nope"}, status: 401, code: "api_key_unknown"})

	// A call paid on chain by this project's client, then replayed with
	// its proof: the cached answer, with the payment headers.
	payer := interop.NewWallet()
	chain.Fund(payer.PublicKey(), solana.LAMPORTS_PER_SOL)
	c := &interop.Client{Key: caller, Wallet: payer, Chain: interop.NewChain(chain.URL, "", 5*time.Second),
		MaxLamports: 10_000, Now: h.m.clock.Now}
	defer c.Chain.Close()
	res, _, err := c.CallAgent(context.Background(), h.node.URL(), "api-agent", "echo", []byte(`{"x":2}`))
	if err != nil || res.Signature == "" {
		h.t.Fatalf("paid call: %v %+v", err, res)
	}
	h.run(apiCase{name: "a paid call replayed", method: "POST", path: "/v1/echo", body: `{"x":2}`, sign: caller,
		hdr: []string{"X-Payment-Proof", res.Signature}, status: 200})

	top := h.run(apiCase{name: "topup", method: "POST", path: "/v1/topup", body: `{"payer_address":"` + wallet + `"}`, sign: caller, status: 201})
	h.run(apiCase{name: "topup from a bad address", method: "POST", path: "/v1/topup", body: `{"payer_address":"nope"}`, sign: caller,
		status: 400, code: "invalid_request"})
	h.run(apiCase{name: "topup unsigned", method: "POST", path: "/v1/topup", body: `{"payer_address":"` + wallet + `"}`,
		status: 401, code: "signature_required", invalid: true})
	key, _ := top["api_key"].(string)
	h.run(apiCase{name: "balance", method: "GET", path: "/v1/balance", sign: caller, hdr: []string{"X-Api-Key", key}, status: 200})
	h.run(apiCase{name: "balance unsigned", method: "GET", path: "/v1/balance", hdr: []string{"X-Api-Key", key},
		status: 401, code: "signature_required", invalid: true})

	send := `{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"kind":"message","messageId":"m1","role":"user",` +
		`"parts":[{"kind":"data","data":{"skill":"ping","input":{"x":1}}}]}}}`
	h.run(apiCase{name: "A2A message/send", method: "POST", path: "/", body: send, status: 200})
	h.run(apiCase{name: "A2A message/send to a priced skill", method: "POST", path: "/", body: strings.Replace(send, `"ping"`, `"echo"`, 1), status: 200})
	h.run(apiCase{name: "A2A unknown task", method: "POST", path: "/", body: `{"jsonrpc":"2.0","id":"2","method":"tasks/get","params":{"id":"nope"}}`,
		status: 200, code: "-32001"})
	h.run(apiCase{name: "A2A not JSON", method: "POST", path: "/", body: `nope`, status: 200, code: "-32700", invalid: true})
	sendV1 := `{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m1","role":"ROLE_USER",` +
		`"parts":[{"data":{"skill":"echo","input":{"x":1}}}]}}}`
	a2a1 := []string{"A2A-Version", "1.0", "A2A-Extensions", interop.X402A2AExtension}
	task := h.run(apiCase{name: "A2A 1.0 SendMessage to a priced skill", method: "POST", path: "/", body: sendV1, hdr: a2a1, status: 200})
	ctxID, _ := task["result"].(map[string]any)["task"].(map[string]any)["contextId"].(string)
	h.run(apiCase{name: "A2A 1.0 ListTasks", method: "POST", path: "/", hdr: a2a1, status: 200,
		body: `{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{"contextId":"` + ctxID + `","includeArtifacts":true}}`})
	h.run(apiCase{name: "A2A 1.0 GetTask of an unknown task", method: "POST", path: "/", hdr: a2a1, status: 200, code: "-32001",
		body: `{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"nope"}}`})
	h.run(apiCase{name: "A2A version not spoken", method: "POST", path: "/", hdr: []string{"A2A-Version", "2.0"}, status: 200, code: "-32009",
		body: `{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"nope"}}`})
}

// TestOpenAPIQuorumAdmin: the quorum admin operations, on a directory run
// by a quorum (of one member), answer as the document says.
func TestOpenAPIQuorumAdmin(t *testing.T) { // not parallel: its Raft elections run in real time, and its members' ports fixed
	q := newQuorumMesh(t, 1, nil)
	h := newAPIHarness(t, q.mesh, q.boot)
	key := q.boot.key
	stranger, err := p2p.PeerID(identity.GenerateKey().Public().(ed25519.PublicKey))
	if err != nil {
		t.Fatal(err)
	}
	h.run(apiCase{name: "health of a member", method: "GET", path: "/health", status: 200})
	h.run(apiCase{name: "quorum", method: "GET", path: "/v1/admin/quorum", status: 200})
	h.run(apiCase{name: "add a member at a bad address", method: "POST", path: "/v1/admin/quorum/members", body: `{"addr":"nope"}`,
		sign: key, status: 400, code: "invalid_request"})
	h.run(apiCase{name: "remove a stranger", method: "DELETE", path: "/v1/admin/quorum/members/" + stranger.String(),
		sign: key, status: 404, code: "not_a_member"})
	h.run(apiCase{name: "remove a bad peer id", method: "DELETE", path: "/v1/admin/quorum/members/nope",
		sign: key, status: 400, code: "invalid_request"})
}

func boardCases(h *apiHarness) {
	c := h.run(apiCase{name: "create a cluster for boards", method: "POST", path: "/v1/clusters", body: `{"visibility":"public","name":"Boards"}`, status: 201})
	id, _ := c["cluster_id"].(string)
	ak, _ := c["admin_token"].(string)
	path, admin := "/v1/clusters/"+id, []string{"X-Cluster-Token", ak}
	h.run(apiCase{name: "a board before boards are enabled", method: "POST", path: path + "/boards", body: `{"slug":"market"}`, hdr: admin,
		status: 409, code: "boards_disabled"})
	h.run(apiCase{name: "enable boards and set props", method: "PATCH", path: path, hdr: admin,
		body: `{"boards_enabled":true,"props":{"where":{"lat":48.85,"lon":2.35,"label":"Paris"},"lang":"fr"}}`, status: 200})
	h.run(apiCase{name: "patch without the admin token", method: "PATCH", path: path, body: `{"boards_enabled":true}`,
		status: 401, code: "token_required", invalid: true})
	h.run(apiCase{name: "patch nothing", method: "PATCH", path: path, body: `{}`, hdr: admin, status: 400, code: "invalid_request", invalid: true})
	h.run(apiCase{name: "create a board", method: "POST", path: path + "/boards", hdr: admin, status: 201,
		body: `{"slug":"market","name":"Market","kind":"buysell","about":"Buy and sell.","props":{"entry":{"age_min":0,"require":["local"]},"limits":{"post_max_chars":100}}}`})
	h.run(apiCase{name: "create a board with a bad slug", method: "POST", path: path + "/boards", body: `{"slug":"Bad Slug"}`, hdr: admin,
		status: 400, code: "bad_slug", invalid: true})
	h.run(apiCase{name: "create a board twice", method: "POST", path: path + "/boards", body: `{"slug":"market"}`, hdr: admin,
		status: 409, code: "board_exists"})
	h.run(apiCase{name: "list boards", method: "GET", path: path + "/boards", status: 200})
	h.run(apiCase{name: "make a cluster with boards private", method: "PATCH", path: path, body: `{"visibility":"private"}`, hdr: admin,
		status: 409, code: "boards_present"})
	h.run(apiCase{name: "edit a board", method: "PATCH", path: path + "/boards/market", body: `{"about":"Buy, sell, swap.","props":{"lang":null}}`,
		hdr: admin, status: 200})
	post := h.run(apiCase{name: "post", method: "POST", path: path + "/boards/market/posts?agent=alice", status: 201,
		body: `{"title":"Bike","body":"Red.","ttl":"7d","file":{"url":"https://example.org/bike.jpg","mime":"image/jpeg"},"props":{"where":{"lat":48.86,"lon":2.34,"label":"Louvre"},"lang":"en"}}`})
	pid, _ := post["post"].(map[string]any)["id"].(string)
	h.run(apiCase{name: "post over post_max_chars", method: "POST", path: path + "/boards/market/posts?agent=alice",
		body: `{"title":"Long","ttl":"24h","body":"` + strings.Repeat("x", 101) + `"}`, status: 422, code: "post_max_chars"})
	h.run(apiCase{name: "post with a bad ttl", method: "POST", path: path + "/boards/market/posts?agent=alice", body: `{"title":"t","ttl":"2d"}`,
		status: 400, code: "bad_ttl", invalid: true})
	h.run(apiCase{name: "post without an agent", method: "POST", path: path + "/boards/market/posts", body: `{"title":"t","ttl":"7d"}`,
		status: 400, code: "bad_agent", invalid: true})
	h.run(apiCase{name: "a board and its posts", method: "GET", path: path + "/boards/market", status: 200})
	h.run(apiCase{name: "posts near a point", method: "GET", path: path + "/boards/market/posts?near=48.85,2.35&km=10&lang=en&limit=10", status: 200})
	h.run(apiCase{name: "posts near a bad point", method: "GET", path: path + "/boards/market/posts?near=91,0&km=10", status: 400, code: "bad_coordinates"})
	h.run(apiCase{name: "posts within no radius", method: "GET", path: path + "/boards/market/posts?near=1,2&km=0",
		status: 400, code: "bad_radius", invalid: true})
	h.run(apiCase{name: "a post", method: "GET", path: path + "/boards/market/posts/" + pid, status: 200})
	h.run(apiCase{name: "an unknown post", method: "GET", path: path + "/boards/market/posts/p_nope", status: 404, code: "post_not_found"})
	h.run(apiCase{name: "an unknown board", method: "GET", path: path + "/boards/nope", status: 404, code: "board_not_found"})
	h.run(apiCase{name: "delete a post as another", method: "DELETE", path: path + "/boards/market/posts/" + pid + "?agent=mallory",
		status: 403, code: "not_author"})
	h.run(apiCase{name: "delete a post as its author", method: "DELETE", path: path + "/boards/market/posts/" + pid + "?agent=alice", status: 200})
	h.run(apiCase{name: "create an age-gated board", method: "POST", path: path + "/boards", body: `{"slug":"adults","props":{"entry":{"age_min":18}}}`,
		hdr: admin, status: 201})
	h.run(apiCase{name: "an age-gated board's posts", method: "GET", path: path + "/boards/adults/posts", status: 403, code: "age_gated"})
	h.run(apiCase{name: "delete a board", method: "DELETE", path: path + "/boards/market", hdr: admin, status: 200})
	priv := h.run(apiCase{name: "create a private cluster for boards", method: "POST", path: "/v1/clusters", status: 201})
	privID, _ := priv["cluster_id"].(string)
	h.run(apiCase{name: "a private cluster's boards without its token", method: "GET", path: "/v1/clusters/" + privID + "/boards",
		status: 404, code: "cluster_not_found"})
}
