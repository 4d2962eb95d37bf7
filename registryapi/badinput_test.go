package registryapi

import (
	"crypto/ed25519"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/mesh/identity"
)

// endpoints lists every route of the registry surface with a concrete path.
var endpoints = []struct{ method, path string }{
	{"POST", "/v1/agents/register"},
	{"POST", "/v1/agents/token"},
	{"DELETE", "/v1/agents/me"},
	{"POST", "/v1/agents/me/heartbeat"},
	{"GET", "/v1/agents/target"},
	{"GET", "/v1/agents/target/identity"},
	{"POST", "/v1/agents/target/feedback"},
	{"GET", "/v1/agents/target/reputation"},
	{"POST", "/v1/admin/catalog"},
	{"POST", "/agents/register"},
	{"POST", "/agents/token"},
	{"GET", "/agents/target"},
}

var badBodies = []string{
	"", "{", "}", "[]", "null", "0", `"x"`, "{}{}", `{"a":1} trailing`,
	`{"agent_id":5}`, `{"agent_id":["x"]}`, `{"agent_id":""}`, `{"agent_id":"has space"}`, `{"agent_id":"me"}`,
	`{"agent_id":"` + strings.Repeat("a", 200) + `"}`, `{"agent_id":"ok","capabilities":"echo"}`,
	`{"agent_id":"ok","capabilities":[1,2]}`, `{"agent_id":"ok","capabilities":["` + strings.Repeat("c", 100) + `"]}`,
	`{"agent_id":"ok","capabilities":["a\u0000b"]}`, `{"agent_id":"ok","endpoint":"ftp://x"}`, `{"agent_id":"ok","endpoint":"not a url"}`,
	`{"agent_id":"ok","pubkey":"!!!"}`, `{"agent_id":"ok","pubkey":"AAAA"}`, `{"agent_id":"ok","pubkey":7}`,
	`{"agent_id":"ok","api_key":""}`, `{"agent_id":"ok","api_key":5}`, "\xff\xfe{}",
	`{"success":"yes","latency_ms":1}`, `{"latency_ms":1}`, `{"success":true,"latency_ms":-1}`,
	`{"success":true,"latency_ms":1.5}`, `{"success":true,"latency_ms":1,"quality":0}`, `{"success":true,"latency_ms":1,"quality":6}`,
	`{"success":true,"latency_ms":99999999999999999999}`, `{"status":5}`, `{"status":"` + strings.Repeat("s", 100) + `"}`,
	`{"listings":[]}`, `{"listings":[{"agent_id":"bad id"}]}`, `{"listings":"x"}`,
	strings.Repeat("[", 10000), `{"agent_id":"` + strings.Repeat("x", 70<<10) + `"}`,
}

// credentials are the ways a request can (fail to) authenticate; each
// returns the headers for a request with that body.
func credentials(h *harness, tok string) []struct {
	name string
	hdr  func(method, path, body string) []string
} {
	caller := identity.GenerateKey()
	sig := func(key ed25519.PrivateKey, at time.Time) func(method, path, body string) []string {
		return func(method, path, body string) []string {
			return []string{identity.SigHeaderName, identity.Sign(key, method, path, []byte(body), at)}
		}
	}
	fixed := func(hdr ...string) func(string, string, string) []string {
		return func(string, string, string) []string { return hdr }
	}
	replayed := identity.Sign(caller, "POST", "/v1/agents/target/feedback", []byte(goodReport), h.clock.Now())
	h.do("POST", "/v1/agents/target/feedback", goodReport, identity.SigHeaderName, replayed)
	expired, _ := h.tokens.Issue("target", 1, h.clock.Now().Add(-TokenTTL-time.Minute))
	foreign, _ := NewTokens(identity.GenerateKey()).Issue("target", 1, h.clock.Now())
	return []struct {
		name string
		hdr  func(method, path, body string) []string
	}{
		{"none", fixed()},
		{"sig", sig(caller, h.clock.Now())},
		{"admin", sig(h.admin, h.clock.Now())},
		{"bearer", fixed(bearer(tok)...)},
		{"stale sig", sig(caller, h.clock.Now().Add(-10*time.Minute))},
		{"future sig", sig(caller, h.clock.Now().Add(10*time.Minute))},
		{"replayed sig", fixed(identity.SigHeaderName, replayed)},
		{"garbage sig", fixed(identity.SigHeaderName, "v1 !!! 0 n ###")},
		{"expired bearer", fixed(bearer(expired)...)},
		{"foreign bearer", fixed(bearer(foreign)...)},
		{"garbage bearer", fixed("Authorization", "Bearer mt1.@@@.###")},
	}
}

// TestBadInputNeverServerError walks every endpoint through malformed
// bodies under every kind of credential (none, valid, stale, replayed or
// garbage Mesh-Sig, valid, expired, foreign or garbage bearer token): the
// answer is always a JSON 4xx (or a 2xx where the body does not matter),
// never a 5xx.
func TestBadInputNeverServerError(t *testing.T) {
	h := newHarness(t)
	key := identity.GenerateKey()
	_, tok := h.registerKeyed("target", key)
	for _, cred := range credentials(h, tok) {
		valid := cred.name == "sig" || cred.name == "admin" || cred.name == "bearer"
		for _, ep := range endpoints {
			for _, body := range append(badBodies, goodReport) {
				r := h.do(ep.method, ep.path, body, cred.hdr(ep.method, ep.path, body)...)
				if r.status >= 500 || (r.status >= 400 && (r.str("code") == "" || r.str("detail") == "")) {
					t.Fatalf("%s %s auth=%s body=%.60q: %d %s", ep.method, ep.path, cred.name, body, r.status, r.raw)
				}
				if ep.method == "POST" && valid && body != goodReport && r.status < 400 && !acceptsAnyBody(ep.path) {
					t.Fatalf("%s %s auth=%s accepted bad body %.60q: %s", ep.method, ep.path, cred.name, body, r.raw)
				}
				if !valid && cred.name != "none" && needsCredential(ep.path) && r.status < 400 {
					t.Fatalf("%s %s accepted auth=%s: %d %s", ep.method, ep.path, cred.name, r.status, r.raw)
				}
			}
		}
	}
	// The node still serves after all of that.
	h.registerPlain("after")
}

// needsCredential: endpoints that act for someone and so refuse bad
// credentials whatever the body.
func needsCredential(path string) bool {
	return strings.Contains(path, "/me") || strings.HasSuffix(path, "/feedback") || strings.HasPrefix(path, "/v1/admin/")
}

// acceptsAnyBody: the heartbeat body is optional and ignored when it is an
// object without a status.
func acceptsAnyBody(path string) bool { return strings.HasSuffix(path, "/heartbeat") }

func TestSpecificBadInputs(t *testing.T) {
	h := newHarness(t)
	_, tok := h.registerPlain("target")
	signedBy := func(key ed25519.PrivateKey) []string {
		return []string{identity.SigHeaderName, identity.Sign(key, "POST", "/v1/agents/target/feedback", []byte(goodReport), h.clock.Now())}
	}
	const badCap = "{\"success\":true,\"latency_ms\":1,\"capability\":\"\xff\"}"
	cases := []struct {
		method, path, body string
		hdr                []string
		status             int
		code               string
	}{
		{"POST", "/v1/agents/register", "{", nil, 400, "invalid_json"},
		{"POST", "/v1/agents/register", `{"agent_id":5}`, nil, 400, "invalid_json"},
		{"POST", "/v1/agents/register", `{"capabilities":[]}`, nil, 400, "invalid_request"},
		{"POST", "/v1/agents/register", `{"agent_id":"x","pubkey":"AAAA"}`, nil, 400, "invalid_request"},
		{"POST", "/v1/agents/register", "{\"agent_id\":\"x\",\"capabilities\":[\"ech\xf6\"]}", nil, 400, "invalid_json"},
		{"POST", "/v1/agents/register", `{"agent_id":"x","capabilities":["\ud800"]}`, nil, 400, "invalid_json"},
		{"POST", "/v1/agents/target/feedback", badCap, []string{identity.SigHeaderName, identity.Sign(identity.GenerateKey(), "POST", "/v1/agents/target/feedback", []byte(badCap), h.clock.Now())}, 400, "invalid_json"},
		{"POST", "/v1/agents/register", `{"agent_id":"x","pubkey":"%%%"}`, nil, 400, "invalid_request"},
		{"POST", "/v1/agents/register", `{"agent_id":"Register"}`, nil, 400, "invalid_request"}, // reserved in any case
		{"POST", "/v1/agents/register", `{"agent_id":"TOKEN"}`, nil, 400, "invalid_request"},
		{"POST", "/v1/agents/register", `{"agent_id":"` + strings.Repeat("x", 70<<10) + `"}`, nil, 413, "body_too_large"},
		{"POST", "/v1/agents/token", `{"agent_id":"target"}`, nil, 400, "invalid_request"},
		{"POST", "/v1/agents/me/heartbeat", `{"status":3}`, bearer(tok), 400, "invalid_json"},
		{"POST", "/v1/agents/me/heartbeat", "", []string{"Authorization", "Basic abc"}, 401, "token_required"},
		{"POST", "/v1/agents/me/heartbeat", "", []string{"Authorization", "Bearer mt1."}, 401, "invalid_token"},
		{"POST", "/v1/agents/me/heartbeat", "", []string{"Authorization", "Bearer mt1.x.y.z"}, 401, "invalid_token"},
		{"POST", "/v1/agents/target/feedback", goodReport, []string{identity.SigHeaderName, "v1 a b c d"}, 401, "invalid_signature"},
		{"POST", "/v1/agents/target/feedback", goodReport, []string{identity.SigHeaderName, "v2"}, 401, "invalid_signature"},
		{"POST", "/v1/agents/target/feedback", goodReport, append(signedBy(identity.GenerateKey()), signedBy(identity.GenerateKey())...), 401, "invalid_signature"},
		{"GET", "/v1/agents/" + strings.Repeat("a", 200), "", nil, 404, "agent_not_found"},
		{"GET", "/v1/agents/a%20b", "", nil, 404, "agent_not_found"},
		{"PUT", "/v1/agents/target", "", nil, 405, "method_not_allowed"},
		{"GET", "/v1/nothing", "", nil, 404, "not_found"},
	}
	for _, c := range cases {
		r := h.do(c.method, c.path, c.body, c.hdr...)
		if r.status != c.status || r.str("code") != c.code || r.str("detail") == "" {
			t.Errorf("%s %s %.40q: got %d %s, want %d %s", c.method, c.path, c.body, r.status, r.raw, c.status, c.code)
		}
	}
}

// FuzzRegistryRequest feeds arbitrary bodies, signed by a real key or
// carrying arbitrary Mesh-Sig and Authorization headers, to every
// endpoint: no input may produce a 5xx, a panic or a non-JSON answer.
func FuzzRegistryRequest(f *testing.F) {
	for i := range endpoints {
		f.Add(uint8(i), []byte(goodReport), true, "", "")
		f.Add(uint8(i), []byte(`{"agent_id":"a1","capabilities":["x"]}`), false, "v1 AAAA 0 n AAAA", "Bearer mt1.e30.AAAA")
	}
	for _, b := range badBodies[:20] {
		f.Add(uint8(0), []byte(b), true, "", "")
	}
	h := newHarness(f)
	h.registerKeyed("target", identity.GenerateKey())
	handler := h.srv.Config.Handler
	caller := identity.GenerateKey()
	f.Fuzz(func(t *testing.T, ep uint8, body []byte, sign bool, sigHeader, auth string) {
		e := endpoints[int(ep)%len(endpoints)]
		req := httptest.NewRequest(e.method, e.path, strings.NewReader(string(body)))
		if sign {
			sigHeader = identity.Sign(caller, e.method, e.path, body, h.clock.Now())
		}
		if sigHeader != "" {
			req.Header.Set(identity.SigHeaderName, sigHeader)
		}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("%s %s %q: %d %s", e.method, e.path, body, rec.Code, rec.Body)
		}
		var v map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil || (rec.Code >= 400 && v["code"] == nil) {
			t.Fatalf("%s %s %q: %d non-JSON error %q", e.method, e.path, body, rec.Code, rec.Body)
		}
	})
}
