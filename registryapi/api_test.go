package registryapi

import (
	"crypto/ed25519"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/cmdlog"
)

func TestRegistrationFlow(t *testing.T) {
	h := newHarness(t)
	key := identity.GenerateKey()
	apiKey, tok := h.registerKeyed("echo-1", key)
	if !strings.HasPrefix(apiKey, "mk_") {
		t.Fatalf("api_key %q", apiKey)
	}
	hb := h.want(h.do("POST", "/v1/agents/me/heartbeat", "", bearer(tok)...), 200, "")
	if hb.body["online"] != true || hb.body["next_heartbeat_s"] != 300.0 {
		t.Fatalf("heartbeat reply %s", hb.raw)
	}
	g := h.want(h.do("GET", "/v1/agents/echo-1", ""), 200, "")
	did := identity.DIDFromPublicKey(key.Public().(ed25519.PublicKey))
	if g.str("did") != did || g.body["online"] != true || g.body["registered"] != true || g.body["live"] != true ||
		g.str("endpoint") != "https://echo-1.example" || g.str("handle") != "https://mesh.test/agent/echo-1" {
		t.Fatalf("GET agent %s", g.raw)
	}
	if _, ok := g.body["api_key_hash"]; ok {
		t.Fatal("GET agent leaks the api key hash")
	}
	id := h.want(h.do("GET", "/v1/agents/echo-1/identity", ""), 200, "")
	if id.str("did") != did || id.body["verified"] != true || id.str("handle") != "https://mesh.test/agent/echo-1" ||
		id.body["reputation"].(map[string]any)["n"] != 0.0 {
		t.Fatalf("identity %s", id.raw)
	}
}

func TestLegacyHubPaths(t *testing.T) {
	h := newHarness(t)
	r := h.want(h.do("POST", "/agents/register", `{"agent_id":"old-1","capabilities":["a"]}`), 201, "")
	tok := h.want(h.do("POST", "/agents/token", jsonBody(map[string]string{"agent_id": "old-1", "api_key": r.str("api_key")})), 200, "")
	if tok.str("token") == "" {
		t.Fatal("no token")
	}
	g := h.want(h.do("GET", "/agents/old-1", ""), 200, "")
	if g.body["online"] != false || g.body["registered"] != true {
		t.Fatalf("legacy GET before a heartbeat %s", g.raw)
	}
	h.want(h.do("POST", "/v1/agents/me/heartbeat", "", bearer(tok.str("token"))...), 200, "")
	if g := h.want(h.do("GET", "/agents/old-1", ""), 200, ""); g.body["online"] != true || g.body["live"] != true {
		t.Fatalf("legacy GET after a heartbeat %s", g.raw)
	}
	h.want(h.do("GET", "/agents/nobody", ""), 404, "agent_not_found")
}

// TestOnlineWindow: registering is not being online; a heartbeat is, for
// the online window; another brings it back. registered and live are
// booleans.
func TestOnlineWindow(t *testing.T) {
	h := newHarness(t)
	_, tok := h.registerPlain("a1")
	if g := h.do("GET", "/v1/agents/a1", ""); g.body["online"] != false || g.body["live"] != false || g.body["registered"] != true {
		t.Fatalf("online on registration alone: %s", g.raw)
	}
	if id := h.do("GET", "/v1/agents/a1/identity", ""); id.body["online"] != false || id.body["registered"] != true {
		t.Fatalf("identity online on registration alone: %s", id.raw)
	}
	h.want(h.do("POST", "/v1/agents/me/heartbeat", "", bearer(tok)...), 200, "")
	h.clock.Advance(DefaultOnlineWindow)
	if g := h.do("GET", "/v1/agents/a1", ""); g.body["online"] != true || g.body["live"] != true {
		t.Fatalf("offline at exactly the window after a heartbeat: %s", g.raw)
	}
	h.clock.Advance(time.Second)
	if g := h.do("GET", "/v1/agents/a1", ""); g.body["online"] != false || g.body["live"] != false {
		t.Fatalf("online after the window: %s", g.raw)
	}
	h.want(h.do("POST", "/v1/agents/me/heartbeat", `{"status":"busy"}`, bearer(tok)...), 200, "")
	if g := h.do("GET", "/v1/agents/a1", ""); g.body["online"] != true {
		t.Fatalf("heartbeat did not bring it back: %s", g.raw)
	}
}

func TestRegisterConflictAndOwnerUpdate(t *testing.T) {
	h := newHarness(t)
	key := identity.GenerateKey()
	oldKey, tok := h.registerKeyed("svc", key)

	// Another caller, unsigned or signed by another key: 409.
	h.want(h.do("POST", "/v1/agents/register", `{"agent_id":"svc","capabilities":[]}`), 409, "agent_id_taken")
	other := identity.GenerateKey()
	h.want(h.signed(other, "POST", "/v1/agents/register", `{"agent_id":"svc"}`), 409, "agent_id_taken")

	// The owner re-registers with its token: updated, api_key rotated.
	upd := h.want(h.do("POST", "/v1/agents/register", `{"agent_id":"svc","capabilities":["b"],"endpoint":"https://new.example"}`, bearer(tok)...), 200, "")
	if upd.body["created"] != false || upd.str("api_key") == oldKey {
		t.Fatalf("owner update %s", upd.raw)
	}
	h.want(h.do("POST", "/v1/agents/token", jsonBody(map[string]string{"agent_id": "svc", "api_key": oldKey})), 401, "invalid_credentials")
	h.token("svc", upd.str("api_key"))
	g := h.do("GET", "/v1/agents/svc", "")
	if g.str("endpoint") != "https://new.example" || g.str("pubkey") == "" {
		t.Fatalf("after update %s", g.raw)
	}
	// The owner re-registers by signing with its key (lost api_key recovery).
	h.want(h.signed(key, "POST", "/v1/agents/register", `{"agent_id":"svc"}`), 200, "")
	// A token of another agent does not prove ownership.
	_, tokB := h.registerPlain("b")
	h.want(h.do("POST", "/v1/agents/register", `{"agent_id":"svc"}`, bearer(tokB)...), 401, "invalid_token")
}

func TestPubkeyBinding(t *testing.T) {
	h := newHarness(t)
	key := identity.GenerateKey()
	pub := identity.EncodePublicKey(key.Public().(ed25519.PublicKey))
	body := jsonBody(map[string]any{"agent_id": "k1", "pubkey": pub})
	h.want(h.do("POST", "/v1/agents/register", body), 401, "signature_required")
	h.want(h.signed(identity.GenerateKey(), "POST", "/v1/agents/register", body), 401, "signature_key_mismatch")
	// Signed over another body: the signature does not verify.
	sig := identity.Sign(key, "POST", "/v1/agents/register", []byte(`{}`), h.clock.Now())
	h.want(h.do("POST", "/v1/agents/register", body, identity.SigHeaderName, sig), 401, "invalid_signature")
	h.want(h.signed(key, "POST", "/v1/agents/register", body), 201, "")
	// One key, one agent.
	h.want(h.signed(key, "POST", "/v1/agents/register", jsonBody(map[string]any{"agent_id": "k2", "pubkey": pub})), 409, "pubkey_in_use")
	// URL-safe, unpadded base64 of the same key is the same key.
	raw := strings.TrimRight(strings.NewReplacer("+", "-", "/", "_").Replace(pub), "=")
	h.want(h.signed(key, "POST", "/v1/agents/register", jsonBody(map[string]any{"agent_id": "k1", "pubkey": raw})), 200, "")
}

func TestDeleteAndFormerOwnerToken(t *testing.T) {
	h := newHarness(t)
	_, tokA := h.registerPlain("shared")
	h.want(h.do("DELETE", "/v1/agents/me", ""), 401, "token_required")
	h.want(h.do("DELETE", "/v1/agents/me", "", "Authorization", "Bearer junk"), 401, "invalid_token")
	d := h.want(h.do("DELETE", "/v1/agents/me", "", bearer(tokA)...), 200, "")
	if d.str("status") != "deleted" || d.str("agent_id") != "shared" || d.body["catalog_only"] != false {
		t.Fatalf("delete reply %s", d.raw)
	}
	h.want(h.do("GET", "/v1/agents/shared", ""), 404, "agent_not_found")
	h.want(h.do("GET", "/v1/agents/shared/identity", ""), 404, "agent_not_found")
	h.want(h.do("POST", "/v1/agents/me/heartbeat", "", bearer(tokA)...), 404, "agent_not_found")
	h.want(h.do("DELETE", "/v1/agents/me", "", bearer(tokA)...), 404, "agent_not_found")

	// The id is free again; the former owner's token never acts on the new owner.
	_, tokB := h.registerPlain("shared")
	h.want(h.do("POST", "/v1/agents/me/heartbeat", "", bearer(tokA)...), 404, "agent_not_found")
	h.want(h.do("DELETE", "/v1/agents/me", "", bearer(tokA)...), 404, "agent_not_found")
	h.want(h.do("POST", "/v1/agents/me/heartbeat", "", bearer(tokB)...), 200, "")
}

func TestDeleteCatalogOnly(t *testing.T) {
	h := newHarness(t)
	cat := `{"listings":[{"agent_id":"scraped-1","name":"Scraped","description":"from the old directory","url":"https://old.example/a"}]}`
	h.want(h.do("POST", "/v1/admin/catalog", cat), 401, "signature_required")
	h.want(h.signed(identity.GenerateKey(), "POST", "/v1/admin/catalog", cat), 403, "not_admin")
	h.want(h.signed(h.admin, "POST", "/v1/admin/catalog", cat), 200, "")
	// A listing alone is not a registered agent.
	h.want(h.do("GET", "/v1/agents/scraped-1", ""), 404, "agent_not_found")

	key := identity.GenerateKey()
	_, tok := h.registerKeyed("scraped-1", key)
	h.want(h.do("GET", "/v1/agents/scraped-1", ""), 200, "")
	h.want(h.do("POST", "/v1/agents/me/heartbeat", `{"status":"busy"}`, bearer(tok)...), 200, "")
	d := h.want(h.do("DELETE", "/v1/agents/me", "", bearer(tok)...), 200, "")
	if d.body["catalog_only"] != true {
		t.Fatalf("delete reply %s", d.raw)
	}
	h.want(h.do("GET", "/v1/agents/scraped-1", ""), 404, "agent_not_found")
	a, err := h.dir.Lookup("scraped-1")
	if err != nil || a.Listing == nil || a.Listing.Name != "Scraped" {
		t.Fatalf("listing lost: %+v %v", a, err)
	}
	if a.Registered() || a.Pubkey != "" || a.Endpoint != "" || a.APIKeyHash != "" {
		t.Fatalf("mesh fields kept: %+v", a)
	}
	if b, ok := h.dir.presence.get("scraped-1"); ok {
		t.Fatalf("availability status kept: %+v", b)
	}
	// The key is free for another registration.
	pub := identity.EncodePublicKey(key.Public().(ed25519.PublicKey))
	h.want(h.signed(key, "POST", "/v1/agents/register", jsonBody(map[string]any{"agent_id": "k9", "pubkey": pub})), 201, "")
}

func TestTokenLifetime(t *testing.T) {
	h := newHarness(t)
	apiKey, tok := h.registerPlain("t1")
	h.want(h.do("POST", "/v1/agents/token", jsonBody(map[string]string{"agent_id": "t1", "api_key": apiKey + "x"})), 401, "invalid_credentials")
	h.want(h.do("POST", "/v1/agents/token", jsonBody(map[string]string{"agent_id": "zz", "api_key": apiKey})), 404, "agent_not_found")
	h.clock.Advance(TokenTTL - time.Second)
	h.want(h.do("POST", "/v1/agents/me/heartbeat", "", bearer(tok)...), 200, "")
	h.clock.Advance(time.Second)
	h.want(h.do("POST", "/v1/agents/me/heartbeat", "", bearer(tok)...), 401, "token_expired")
	// A token signed by a directory this node does not trust is refused.
	foreign, _ := NewTokens(identity.GenerateKey()).Issue("t1", 1, h.clock.Now())
	h.want(h.do("POST", "/v1/agents/me/heartbeat", "", bearer(foreign)...), 401, "invalid_token")
	// Tampering with the claims breaks the signature.
	fresh := h.token("t1", apiKey)
	parts := strings.Split(fresh, ".")
	parts[1] = parts[1][:len(parts[1])-2] + "xx"
	h.want(h.do("POST", "/v1/agents/me/heartbeat", "", bearer(strings.Join(parts, "."))...), 401, "invalid_token")
}

// TestWriteRoutesAreRoutes: every write surface the budgets meter and
// nodes forward is a route of the API, and IsDirectoryWrite takes exactly
// those.
func TestWriteRoutesAreRoutes(t *testing.T) {
	mux := http.NewServeMux()
	api, err := NewAPI(Config{Directory: &Directory{}, Log: cmdlog.NewLocal(nil), Tokens: NewTokens(nil)})
	if err != nil {
		t.Fatal(err)
	}
	api.Routes(mux)
	for _, pattern := range ForwardedRoutes() {
		method, path, _ := strings.Cut(pattern, " ")
		r := httptest.NewRequest(method, strings.ReplaceAll(path, "{id}", "some-agent"), nil)
		if _, got := mux.Handler(r); got != pattern {
			t.Errorf("%s is forwarded but the API routes it to %q", pattern, got)
		}
		if _, write := WriteRoutes()[pattern]; IsDirectoryWrite(r) != write {
			t.Errorf("IsDirectoryWrite(%s) = %v", pattern, !write)
		}
	}
	for _, r := range []*http.Request{httptest.NewRequest("PUT", "/v1/agents/register", nil), httptest.NewRequest("POST", "/v1/agents/x/unknown", nil), httptest.NewRequest("POST", "/v1/clusters", nil)} {
		if IsDirectoryWrite(r) {
			t.Errorf("%s %s is forwarded", r.Method, r.URL.Path)
		}
	}
}
