package interop

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gagliardetto/solana-go"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/httpx"
	"github.com/agentmesh/mesh/internal/storetest"
	"github.com/agentmesh/mesh/internal/testkit"
	"github.com/agentmesh/mesh/interop/soltest"
	"github.com/agentmesh/mesh/store"
)

// TestMain runs up to 8 tests at once: they mostly wait (on payment
// timeouts and loopback: 1.4 s of CPU in 12 s, one at a time).
func TestMain(m *testing.M) { testkit.MainWaiting(m, 8) }

const testPrice = 5000

var loopback = httpx.Proxies{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}

// fakeRegistry answers reputation lookups and records reports.
type fakeRegistry struct {
	mu      sync.Mutex
	agents  map[string]string // pubkey b64 -> agent id
	score   *float64
	reports []Report
	fail    bool // Report fails
	refuse  int  // Report is answered with this status
	// beforeReport, when set, runs as a report is filed (in the caller's
	// goroutine).
	beforeReport func()
}

func (f *fakeRegistry) AgentByKey(_ context.Context, pub ed25519.PublicKey) (string, *float64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.agents[identity.EncodePublicKey(pub)], f.score, nil
}

func (f *fakeRegistry) Report(_ context.Context, id string, r Report) error {
	if f.beforeReport != nil {
		f.beforeReport()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail {
		return errors.New("registry unreachable")
	}
	if f.refuse != 0 {
		return fmt.Errorf("feedback: %w", &RegistryError{Status: f.refuse, Body: `{"code":"refused"}`})
	}
	f.reports = append(f.reports, r)
	return nil
}

// setFail makes Report fail, or work again.
func (f *fakeRegistry) setFail(fail bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = fail
}

// setRefuse makes the registry answer reports with status (0: take them).
func (f *fakeRegistry) setRefuse(status int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refuse = status
}

func (f *fakeRegistry) Reports() []Report {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Report(nil), f.reports...)
}

// harness is an agent with one paid skill ("echo") and one free skill
// ("ping") behind httptest, on a fake chain, with a controllable clock.
type harness struct {
	t        testing.TB
	chain    *soltest.Chain
	provider *Wallet
	db       *store.DB
	agent    *Agent
	srv      *httptest.Server
	reg      *fakeRegistry
	// agentKey signs the agent's receipts (as agent "echo-1").
	agentKey ed25519.PrivateKey
	served   atomic.Int64
	fail     atomic.Bool
	// slow makes the paid skill take this long: a wide window for races.
	slow atomic.Int64
	// pad adds this many bytes to the paid skill's answer.
	pad   atomic.Int64
	clock *clock
	// noLoop: the agent runs no poll loop; the test calls PollNow and
	// checkInvoices itself, and nothing races them.
	noLoop bool
	// tokens are echo's pricing rows in SPL tokens, beside its lamports row.
	tokens Prices
	// tokensOnly: echo has no lamports row, only its token rows.
	tokensOnly bool
	// logs, when set, gets the agent's log.
	logs *testkit.Buffer
}

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time          { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Advance(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// rpcTimeoutShort bounds the RPC calls of tests that wait for a chain
// that hangs: short, yet long enough for every other call to be answered
// on a loaded machine (300 ms was not, under CI's -race pass).
const rpcTimeoutShort = time.Second

func testPayment(chain *soltest.Chain, wallet string) *PaymentConfig {
	return &PaymentConfig{Network: NetworkDevnet, Wallet: wallet, RPCURL: chain.URL, RPCTimeout: 2 * time.Second,
		Modes: []string{ModeX402, ModeDeposit}, DepositMinLamports: 100_000}
}

func newHarness(t *testing.T, edit ...func(*PaymentConfig)) *harness {
	t.Helper()
	return makeHarness(t, false, edit...)
}

// newManualHarness is a harness whose agent runs no poll loop.
func newManualHarness(t *testing.T, edit ...func(*PaymentConfig)) *harness {
	t.Helper()
	return makeHarness(t, true, edit...)
}

func makeHarness(t *testing.T, noLoop bool, edit ...func(*PaymentConfig)) *harness {
	t.Helper()
	h, pc := fakeChainHarness(t)
	h.noLoop = noLoop
	for _, e := range edit {
		e(pc)
	}
	h.start(pc)
	return h
}

// fakeChainHarness is a harness on a fake chain, not started yet, and its
// payment configuration.
func fakeChainHarness(t *testing.T) (*harness, *PaymentConfig) {
	h := &harness{t: t, chain: soltest.New(t), provider: NewWallet(), reg: &fakeRegistry{agents: map[string]string{}},
		clock: &clock{now: time.Unix(1_800_000_000, 0)}, db: storetest.DB(t)}
	h.chain.SetBlockTime(h.clock.Now().Unix())
	return h, testPayment(h.chain, h.provider.Address())
}

// newHarnessOn is a harness on a real RPC endpoint (the LiteSVM shim) with
// its genesis hash as the override, on the wall clock.
func newHarnessOn(t testing.TB, rpcURL, genesis string) *harness {
	t.Helper()
	h, pc := litesvmHarness(t, rpcURL, genesis)
	h.start(pc)
	return h
}

// litesvmHarness is a harness on the LiteSVM shim, not started yet, and
// its payment configuration.
func litesvmHarness(t testing.TB, rpcURL, genesis string) (*harness, *PaymentConfig) {
	h := &harness{t: t, provider: NewWallet(), reg: &fakeRegistry{agents: map[string]string{}},
		clock: &clock{now: time.Now()}, db: storetest.DB(t)}
	return h, &PaymentConfig{Network: NetworkDevnet, GenesisHash: genesis, Wallet: h.provider.Address(), RPCURL: rpcURL,
		Commitment: CommitmentFinalized, Modes: []string{ModeX402, ModeDeposit}}
}

// start (re)starts the agent on h.db.
func (h *harness) start(pc *PaymentConfig) {
	h.t.Helper()
	echo := func(ctx context.Context, in json.RawMessage) (any, error) {
		if h.fail.Load() {
			return nil, io.ErrUnexpectedEOF
		}
		time.Sleep(time.Duration(h.slow.Load()))
		h.served.Add(1)
		out := map[string]any{"echo": in, "paid_by": CallerFrom(ctx).PaidBy}
		if n := h.pad.Load(); n > 0 {
			out["pad"] = strings.Repeat("p", int(n))
		}
		return out, nil
	}
	pricing := append(Prices{Lamports(testPrice, NetworkDevnet)}, h.tokens...)
	if h.tokensOnly {
		pricing = h.tokens
	}
	cfg := AgentConfig{
		Card: Card{Name: "Echo", Description: "echoes"},
		Skills: []Skill{
			{ID: "echo", Name: "Echo", Description: "Echoes its input.", Pricing: pricing, Handler: echo},
			{ID: "ping", Name: "Ping", Handler: func(context.Context, json.RawMessage) (any, error) { return "pong", nil }},
		},
		Payment: pc,
	}
	if h.agentKey == nil {
		h.agentKey = identity.GenerateKey()
	}
	deps := AgentDeps{DB: h.db, Registry: h.reg, Now: h.clock.Now, ID: "echo-1", Key: h.agentKey}
	if h.logs != nil {
		deps.Logger = slog.New(slog.NewTextHandler(h.logs, nil))
	}
	a, err := NewAgent(cfg, deps)
	if err != nil {
		h.t.Fatal(err)
	}
	if h.noLoop && a.paywall != nil {
		a.paywall.noLoop = true
	}
	if err := a.Start(context.Background()); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(a.Close)
	mux := httpx.NewMux()
	a.Routes(mux)
	// The test is a trusted proxy: X-Forwarded-For (from) picks the
	// client's address.
	h.srv = httptest.NewServer(httpx.TrustProxies(loopback, mux))
	h.t.Cleanup(h.srv.Close)
	a.SetURL(h.srv.URL)
	h.agent = a
}

// resp is a decoded answer.
type resp struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

func (h *harness) call(key ed25519.PrivateKey, method, path, body string, hdr ...string) resp {
	h.t.Helper()
	req, _ := http.NewRequest(method, h.srv.URL+path, strings.NewReader(body))
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	if key != nil {
		identity.SignRequest(req, key, []byte(body), h.clock.Now())
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	r := resp{status: res.StatusCode, header: res.Header, raw: string(raw)}
	json.Unmarshal(raw, &r.body)
	return r
}

// challenge calls echo unpaid and returns the 402's nonce.
func (h *harness) challenge() string {
	h.t.Helper()
	r := h.call(nil, "POST", "/v1/echo", `{"x":1}`)
	if r.status != 402 {
		h.t.Fatalf("unpaid call: %d %s", r.status, r.raw)
	}
	return r.header.Get(HeaderPaymentNonce)
}

// payTx builds a legacy payment transaction from payer.
func (h *harness) payTx(payer *Wallet, to solana.PublicKey, lamports uint64, memos ...string) *solana.Transaction {
	h.t.Helper()
	return buildTx(h.t, payer, to, lamports, nil, memos...)
}

func (h *harness) pay(payer *Wallet, lamports uint64, memos ...string) solana.Signature {
	h.chain.Fund(payer.PublicKey(), 10*solana.LAMPORTS_PER_SOL)
	return h.chain.Land(h.payTx(payer, h.provider.PublicKey(), lamports, memos...), soltest.Land{})
}

// withProof calls echo with a proof and nonce.
func (h *harness) withProof(sig solana.Signature, nonce string) resp {
	hdr := []string{HeaderPaymentProof, sig.String()}
	if nonce != "" {
		hdr = append(hdr, HeaderPaymentNonce, nonce)
	}
	return h.call(nil, "POST", "/v1/echo", `{"x":1}`, hdr...)
}

// balance reads the prepaid balance (lamports) of key as its owner.
func (h *harness) balance(owner ed25519.PrivateKey, key string) float64 {
	h.t.Helper()
	r := h.call(owner, "GET", "/v1/balance", "", HeaderAPIKey, key)
	if r.status != 200 {
		h.t.Fatalf("balance: %d %s", r.status, r.raw)
	}
	return r.body["lamports"].(float64)
}
