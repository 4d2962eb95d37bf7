package admission

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/agentmesh/mesh/internal/cmdlog"
	"github.com/agentmesh/mesh/internal/httpx"
)

// clock is a settable clock for an Admitter.
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

func newTestAdmitter(t *testing.T, cfg Config) (*Admitter, *clock) {
	t.Helper()
	a, err := New(cfg, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	c := &clock{now: time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)}
	a.now = c.Now
	return a, c
}

func TestParseBudget(t *testing.T) {
	for in, want := range map[string]Budget{
		"5/100": {Rate: 5, Burst: 100},
		"0.5/3": {Rate: 0.5, Burst: 3},
		"7":     {Rate: 7},
		"0":     {},
		" 2/4 ": {Rate: 2, Burst: 4},
	} {
		got, err := ParseBudget(in)
		if err != nil || got != want {
			t.Errorf("ParseBudget(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "x", "-1/5", "5/0", "5/x", "NaN", "Inf/3", "5/-2"} {
		if b, err := ParseBudget(in); err == nil {
			t.Errorf("ParseBudget(%q) = %+v, want an error", in, b)
		}
	}
	if s := (Budget{Rate: 7}).String(); s != "7/14" {
		t.Errorf("a budget without a burst shows as %q, want 7/14 (twice the rate)", s)
	}
}

// TestAdmitTakesAllOrNothing: a write refused by one budget takes no
// token from the others, and says when to retry.
func TestAdmitTakesAllOrNothing(t *testing.T) {
	a, c := newTestAdmitter(t, Config{Client: Budget{Rate: 1, Burst: 2}, Node: Budget{Rate: 1, Burst: 3}})
	node, client := Key{Node, "peer-1"}, Key{Client, "peer-1 198.51.100.7"}
	for i := range 2 {
		if err := a.Admit("register", node, client); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	err := a.Admit("register", node, client)
	var he *httpx.Error
	if !errors.As(err, &he) || he.Status != 429 || he.Code != "rate_limited" || he.RetryAfter <= 0 || he.RetryAfter > time.Second {
		t.Fatalf("third write from the client: %#v, want 429 rate_limited with a wait of at most 1 s", err)
	}
	// The refused write took nothing from the node's bucket: one token is left.
	if err := a.Admit("register", node, Key{Client, "peer-1 203.0.113.9"}); err != nil {
		t.Fatalf("another client of the node: %v", err)
	}
	err = a.Admit("register", node, Key{Client, "peer-1 192.0.2.1"})
	if !errors.As(err, &he) || he.Status != 503 || he.Code != "directory_busy" {
		t.Fatalf("a node over its budget: %v, want 503 directory_busy", err)
	}
	if n := testutil.ToFloat64(a.refused.WithLabelValues("register", Client)); n != 1 {
		t.Errorf("refusals counted for the client: %v, want 1", n)
	}
	if n := testutil.ToFloat64(a.refused.WithLabelValues("register", Node)); n != 1 {
		t.Errorf("refusals counted for the node: %v, want 1", n)
	}
	c.Advance(time.Second)
	if err := a.Admit("register", node, client); err != nil {
		t.Fatalf("a second later: %v", err)
	}
	// Unlimited budgets take nothing.
	for range 1000 {
		if err := a.Admit("register", Key{Credential, "agent:a"}, Key{Directory, ""}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestStatusShowsTheLastMinute(t *testing.T) {
	a, c := newTestAdmitter(t, Config{Client: Budget{Rate: 1, Burst: 1}, Directory: Budget{Rate: 1, Burst: 1}})
	if s := a.Status(); s.Shedding || s.DirectoryShedding {
		t.Fatalf("fresh: %+v", s)
	}
	a.Admit("feedback", Key{Client, "x"})
	a.Admit("feedback", Key{Client, "x"})
	if s := a.Status(); !s.Shedding || len(s.Budgets) != 1 || s.Budgets[0] != Client || s.DirectoryShedding {
		t.Fatalf("after a client refusal: %+v", s)
	}
	a.Admit("feedback", Key{Directory, ""})
	a.Admit("feedback", Key{Directory, ""})
	if s := a.Status(); !s.DirectoryShedding {
		t.Fatalf("after a refusal by the directory budget: %+v", s)
	}
	c.Advance(sheddingWindow + time.Second)
	if s := a.Status(); s.Shedding || s.DirectoryShedding {
		t.Fatalf("a minute later: %+v", s)
	}
	a.DirectoryShed()
	if s := a.Status(); s.Shedding || !s.DirectoryShedding {
		t.Fatalf("after the directory shed this node's write: %+v", s)
	}
}

func TestOriginKeys(t *testing.T) {
	a, _ := newTestAdmitter(t, Config{})
	dir, _ := newTestAdmitter(t, Config{})
	dir.SetDirectory("self")
	for _, tc := range []struct {
		a    *Admitter
		o    Origin
		want []Key
	}{
		{a, Origin{Client: "198.51.100.7"}, []Key{{Client, "198.51.100.7"}}},
		{a, Origin{Client: "198.51.100.7", Credential: "agent:a"}, []Key{{Credential, "agent:a"}}},
		{a, Origin{Client: "198.51.100.7", Peer: "p1"}, []Key{{Client, "p1 198.51.100.7"}}},
		{a, Origin{Client: "198.51.100.7", Peer: "p1", Credential: "agent:a"}, []Key{{Credential, "agent:a"}}},
		{a, Origin{Peer: "p1"}, nil},
		{dir, Origin{Client: "198.51.100.7"}, []Key{{Client, "198.51.100.7"}, {Node, "self"}}},
		{dir, Origin{Client: "198.51.100.7", Credential: "agent:a"}, []Key{{Credential, "agent:a"}, {Node, "self"}}},
		{dir, Origin{Client: "198.51.100.7", Peer: "p1"}, []Key{{Client, "p1 198.51.100.7"}}},
	} {
		if got := tc.a.keys(tc.o); !slices.Equal(got, tc.want) {
			t.Errorf("keys of %+v (directory %q) = %v, want %v", tc.o, tc.a.self, got, tc.want)
		}
	}
}

// TestWritesMetersOnlyWrites: the middleware meters the routes it is
// given, per client address or per credential, and answers JSON 429 with
// Retry-After; reads pass untouched; what it admits carries its Origin.
func TestWritesMetersOnlyWrites(t *testing.T) {
	a, _ := newTestAdmitter(t, Config{Client: Budget{Rate: 0.001, Burst: 2}, Credential: Budget{Rate: 0.001, Burst: 1}})
	surfaces := NewSurfaces(map[string]string{"POST /v1/things": "thing", "DELETE /v1/things/{id}": "thing_delete"})
	credential := func(w http.ResponseWriter, r *http.Request) (string, error) {
		if r.Header.Get("X-Body") != "" { // a credential that needs the body reads it and puts it back
			b, err := httpx.ReadBody(w, r, 16)
			if err != nil {
				return "", err
			}
			r.Body = io.NopCloser(strings.NewReader(string(b)))
		}
		return r.Header.Get("X-Agent"), nil
	}
	var seen Origin
	var seenBody string
	h := a.Writes(surfaces, credential, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen, _ = OriginOf(r.Context())
		b, _ := io.ReadAll(r.Body)
		seenBody = string(b)
	}))
	addr := "198.51.100.7:4000"
	do := func(method, path, body string, hdr ...string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, path, strings.NewReader(body))
		r.RemoteAddr = addr
		for i := 0; i+1 < len(hdr); i += 2 {
			r.Header.Set(hdr[i], hdr[i+1])
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	for range 2 {
		if w := do("POST", "/v1/things", "{}"); w.Code != 200 {
			t.Fatalf("write within the budget: %d %s", w.Code, w.Body)
		}
	}
	if seen.Surface != "thing" || seen.Client != "198.51.100.7" || seen.Peer != "" {
		t.Errorf("origin handed on: %+v", seen)
	}
	w := do("DELETE", "/v1/things/9", "")
	if w.Code != 429 || w.Header().Get("Retry-After") == "" || !strings.Contains(w.Body.String(), `"code":"rate_limited"`) {
		t.Fatalf("write over the address's budget: %d %v %s", w.Code, w.Header(), w.Body)
	}
	for range 5 {
		if w := do("GET", "/v1/things", ""); w.Code != 200 {
			t.Fatalf("a read was metered: %d", w.Code)
		}
		if w := do("PUT", "/v1/things", ""); w.Code != 200 {
			t.Fatalf("a request on no write route was metered: %d", w.Code)
		}
	}
	// An agent behind the same address has its own budget, and its body
	// reaches the handler whole.
	if w := do("POST", "/v1/things", "payload", "X-Agent", "agent:a", "X-Body", "1"); w.Code != 200 || seen.Credential != "agent:a" || seenBody != "payload" {
		t.Fatalf("an agent behind a spent address: %d %s, origin %+v, body %q", w.Code, w.Body, seen, seenBody)
	}
	if w := do("POST", "/v1/things", "", "X-Agent", "agent:a"); w.Code != 429 {
		t.Fatalf("the agent over its own budget: %d", w.Code)
	}
	if w := do("POST", "/v1/things", strings.Repeat("x", 17), "X-Agent", "agent:b", "X-Body", "1"); w.Code != 413 {
		t.Fatalf("the credential's error is the answer: %d %s", w.Code, w.Body)
	}
	// A write whose credential cannot be read is charged to its address
	// all the same: oversized bodies are not free.
	addr = "203.0.113.9:4000"
	for range 2 {
		if w := do("POST", "/v1/things", strings.Repeat("x", 17), "X-Body", "1"); w.Code != 413 {
			t.Fatalf("an oversized body: %d %s", w.Code, w.Body)
		}
	}
	if w := do("POST", "/v1/things", "{}"); w.Code != 429 {
		t.Fatalf("a write after two refused bodies spent the address's budget: %d %s", w.Code, w.Body)
	}
	// A forwarded request counts under its node and reported client.
	r := httptest.NewRequest("POST", "/v1/things", nil)
	r = r.WithContext(WithOrigin(r.Context(), Origin{Peer: "p1", Client: "198.51.100.7"}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	if rec.Code != 200 || seen.Peer != "p1" || seen.Client != "198.51.100.7" {
		t.Fatalf("a forwarded write of a client spent here: %d, origin %+v", rec.Code, seen)
	}
}

type countingProposer struct{ n int }

func (p *countingProposer) Propose(context.Context, string, int64, any) (any, error) {
	p.n++
	return nil, nil
}

type surfaced struct{}

func (surfaced) Surface() string { return "register" }

// TestProposerMetersTheLog: the log takes at most the directory budget,
// refusing with 503 directory_busy; housekeeping passes.
func TestProposerMetersTheLog(t *testing.T) {
	a, _ := newTestAdmitter(t, Config{Directory: Budget{Rate: 0.001, Burst: 3}})
	next := &countingProposer{}
	var p cmdlog.Proposer = Proposer{Next: next, Admitter: a}
	for range 3 {
		if _, err := p.Propose(context.Background(), "agents", 0, surfaced{}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := p.Propose(context.Background(), "agents", 0, surfaced{})
	if !errors.Is(err, ErrDirectoryBusy) {
		t.Fatalf("past the log's budget: %v", err)
	}
	if n := testutil.ToFloat64(a.refused.WithLabelValues("register", Directory)); n != 1 {
		t.Errorf("refusal counted under the op's surface: %v", n)
	}
	if _, err := p.Propose(Unmetered(context.Background()), "agents", 0, surfaced{}); err != nil {
		t.Fatalf("housekeeping: %v", err)
	}
	if next.n != 4 {
		t.Fatalf("%d proposals reached the log, want 4", next.n)
	}
}

// TestRefundGivesBackWhatAWriteTook: what a write took (Charged) comes
// back once on Refund, whoever calls it how often, never past a bucket's
// burst; a write without a charge refunds nothing.
func TestRefundGivesBackWhatAWriteTook(t *testing.T) {
	a, _ := newTestAdmitter(t, Config{Client: Budget{Rate: 0.001, Burst: 2}, Node: Budget{Rate: 0.001, Burst: 5}})
	client, node := Key{Client, "198.51.100.7"}, Key{Node, "p1"}
	ctx := context.Background()
	Refund(ctx)
	for range 2 {
		if err := a.Admit("register", client, node); err != nil {
			t.Fatal(err)
		}
	}
	ctx = a.Charged(a.Charged(ctx, node), client)
	Refund(ctx)
	Refund(ctx)
	if err := a.Admit("register", client); err != nil {
		t.Fatalf("the client's refunded token: %v", err)
	}
	if err := a.Admit("register", client); err == nil {
		t.Fatal("a refund gave back more than the write took")
	}
	for range 4 { // 3 left of 5 and the refunded one
		if err := a.Admit("register", node); err != nil {
			t.Fatalf("the node's tokens: %v", err)
		}
	}
	if err := a.Admit("register", node); err == nil {
		t.Fatal("the node got more back than it spent")
	}
	// A full bucket stays at its burst.
	full := Key{Node, "p2"}
	Refund(a.Charged(context.Background(), full))
	for range 5 {
		a.Admit("register", full)
	}
	if err := a.Admit("register", full); err == nil {
		t.Fatal("a refund to a full bucket raised it past its burst")
	}
}
