package registryapi

import (
	"crypto/ed25519"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/cmdlog"
	"github.com/agentmesh/mesh/internal/httpx"
	"github.com/agentmesh/mesh/internal/storetest"
	"github.com/agentmesh/mesh/store"
)

// clock is a settable test clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// harness is one registry served over real HTTP on loopback.
type harness struct {
	t      testing.TB
	srv    *httptest.Server
	clock  *clock
	dir    *Directory
	admin  ed25519.PrivateKey
	tokens *Tokens // issues the harness's bearer tokens
	log    *cmdlog.Log
	api    *API
}

// seq is the last committed log entry.
func (h *harness) seq() uint64 { return h.log.Seq() }

func newHarness(t testing.TB) *harness {
	t.Helper()
	return newHarnessOn(t, storetest.DB(t))
}

func newHarnessOn(t testing.TB, db *store.DB, opts ...func(*Config)) *harness {
	t.Helper()
	log, err := cmdlog.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := NewDirectory(log)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, dir: dir, log: log, admin: identity.GenerateKey(), tokens: NewTokens(identity.GenerateKey()),
		clock: &clock{now: time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)}}
	cfg := Config{
		Directory: dir, Log: cmdlog.NewLocal(log), Tokens: h.tokens,
		PublicURL: "https://mesh.test", Now: h.clock.Now,
		Admins: []ed25519.PublicKey{h.admin.Public().(ed25519.PublicKey)},
	}
	for _, o := range opts {
		o(&cfg)
	}
	api, err := NewAPI(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.api = api
	mux := httpx.NewMux()
	api.Routes(mux)
	h.srv = httptest.NewServer(httpx.Recover(nil, mux))
	t.Cleanup(h.srv.Close)
	return h
}

// reply is a decoded response.
type reply struct {
	status int
	hdr    http.Header
	body   map[string]any
	raw    string
}

func (r reply) str(k string) string { s, _ := r.body[k].(string); return s }

// do sends a request; hdr is alternating header names and values.
func (h *harness) do(method, path, body string, hdr ...string) reply {
	h.t.Helper()
	req, err := http.NewRequest(method, h.srv.URL+path, strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := h.srv.Client().Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := reply{status: resp.StatusCode, hdr: resp.Header, raw: string(raw)}
	if err := json.Unmarshal(raw, &r.body); err != nil {
		h.t.Fatalf("%s %s: status %d, body is not a JSON object: %q", method, path, resp.StatusCode, raw)
	}
	return r
}

// signed sends a request carrying a Mesh-Sig by key over exactly body.
func (h *harness) signed(key ed25519.PrivateKey, method, path, body string, hdr ...string) reply {
	h.t.Helper()
	sig := identity.Sign(key, method, path, []byte(body), h.clock.Now())
	return h.do(method, path, body, append(hdr, identity.SigHeaderName, sig)...)
}

// want fails the test unless r has the status (and, for errors, the code).
func (h *harness) want(r reply, status int, code string) reply {
	h.t.Helper()
	if r.status != status || (code != "" && r.str("code") != code) {
		h.t.Fatalf("got %d %s, want %d %s", r.status, r.raw, status, code)
	}
	if r.status >= 400 && r.str("detail") == "" {
		h.t.Fatalf("error without detail: %s", r.raw)
	}
	return r
}

func jsonBody(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// registerKeyed registers id bound to key and returns its api_key and token.
func (h *harness) registerKeyed(id string, key ed25519.PrivateKey) (apiKey, token string) {
	h.t.Helper()
	body := jsonBody(map[string]any{"agent_id": id, "capabilities": []string{"echo"},
		"endpoint": "https://" + id + ".example", "pubkey": identity.EncodePublicKey(key.Public().(ed25519.PublicKey))})
	r := h.want(h.signed(key, "POST", "/v1/agents/register", body), 201, "")
	return r.str("api_key"), h.token(id, r.str("api_key"))
}

// registerPlain registers id without a key.
func (h *harness) registerPlain(id string) (apiKey, token string) {
	h.t.Helper()
	r := h.want(h.do("POST", "/v1/agents/register", jsonBody(map[string]any{"agent_id": id, "capabilities": []string{"x"}})), 201, "")
	return r.str("api_key"), h.token(id, r.str("api_key"))
}

func (h *harness) token(id, apiKey string) string {
	h.t.Helper()
	r := h.want(h.do("POST", "/v1/agents/token", jsonBody(map[string]string{"agent_id": id, "api_key": apiKey})), 200, "")
	return r.str("token")
}

func bearer(tok string) []string { return []string{"Authorization", "Bearer " + tok} }
