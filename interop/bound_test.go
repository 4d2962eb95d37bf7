package interop

import (
	"context"
	"crypto/ed25519"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/agentmesh/mesh/identity"
)

// recorder is an http.RoundTripper that keeps the Mesh-Sig of the last
// skill call it carried: what the receiving agent sees, and could replay.
type recorder struct {
	mu  sync.Mutex
	sig string
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	if strings.HasPrefix(req.URL.Path, "/v1/echo") {
		r.mu.Lock()
		r.sig = req.Header.Get(identity.SigHeaderName)
		r.mu.Unlock()
	}
	return http.DefaultTransport.RoundTrip(req)
}

func (r *recorder) last() string { r.mu.Lock(); defer r.mu.Unlock(); return r.sig }

// prepaid gives caller a prepaid balance at h, through a client signing
// with caller's key: it returns the client (calling with that api_key)
// and h's card.
func prepaid(t *testing.T, h *harness, caller ed25519.PrivateKey) (*Client, *Card) {
	t.Helper()
	c := payingClient(t, h, h.chain)
	c.Key = caller
	card := h.card(c)
	top := h.deposit(c, card, 0)
	c.APIKey, c.Wallet = top.APIKey, nil
	return c, card
}

// TestCrossAgentReplay is issue 19's replay: agent A receives a call the
// caller signed to spend its balance at A, and replays it within 120 s to
// agent B, which serves the same path, with the caller's api_key at B
// (public in the deposit memo). A v1 signature names neither the receiver
// nor the api_key, so B debits the caller; the v1-bound signature the
// client sends when the card lists it is refused by B; and B's
// DepositRequiresBoundSig refuses to debit for a v1 signature at all.
func TestCrossAgentReplay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	caller := identity.GenerateKey()
	a, b := newHarness(t), newHarness(t)
	ca, cardA := prepaid(t, a, caller)
	cb, cardB := prepaid(t, b, caller)
	if !cardA.AcceptsBoundSig() || !cardB.AcceptsBoundSig() {
		t.Fatalf("an agent's card does not list %s: %v", identity.SigVersionBound, cardA.MeshSig)
	}
	keyB := cb.APIKey
	before := b.balance(caller, keyB)
	body := `{"x":1}`
	replayToB := func(sig string) resp {
		return b.call(nil, "POST", "/v1/echo", body, identity.SigHeaderName, sig, HeaderAPIKey, keyB)
	}

	// The client signs bound: A can replay nothing to B.
	rec := &recorder{}
	ca.HTTP = &http.Client{Transport: rec}
	if res, err := ca.Call(ctx, cardA, "echo", []byte(body)); err != nil || res.Header.Get(HeaderDebitedLamports) == "" {
		t.Fatalf("bound call on A's balance: %+v %v", res, err)
	}
	if !strings.HasPrefix(rec.last(), identity.SigVersionBound+" ") {
		t.Fatalf("the client signed %q, not %s, though the card lists it", rec.last(), identity.SigVersionBound)
	}
	if r := replayToB(rec.last()); r.status != 401 || r.body["code"] != "invalid_signature" {
		t.Fatalf("bound call replayed to B: %d %s", r.status, r.raw)
	}
	if got := b.balance(caller, keyB); got != before {
		t.Fatalf("B's balance went from %v to %v by a replay", before, got)
	}

	// A bound call to B itself is served.
	if res, err := cb.Call(ctx, cardB, "echo", []byte(body)); err != nil || res.Header.Get(HeaderDebitedLamports) == "" {
		t.Fatalf("bound call on B's balance: %+v %v", res, err)
	}
	before = b.balance(caller, keyB)

	// A v1 signature (a client that does not know v1-bound) is the
	// spec's hole: replayed to B it spends the caller's balance there.
	v1 := identity.Sign(caller, "POST", "/v1/echo", []byte(body), a.clock.Now())
	if r := a.call(nil, "POST", "/v1/echo", body, identity.SigHeaderName, v1, HeaderAPIKey, ca.APIKey); r.status != 200 {
		t.Fatalf("v1 call on A's balance: %d %s", r.status, r.raw)
	}
	if r := replayToB(v1); r.status != 200 || b.balance(caller, keyB) != before-testPrice {
		t.Fatalf("v1 replay to B without the option: %d %s", r.status, r.raw)
	}
	before -= testPrice

	// With DepositRequiresBoundSig, B debits only for a bound signature.
	b.agent.Close()
	pc := testPayment(b.chain, b.provider.Address())
	pc.DepositRequiresBoundSig = true
	b.start(pc)
	cardB = b.card(cb)
	v1 = identity.Sign(caller, "POST", "/v1/echo", []byte(body), a.clock.Now())
	a.call(nil, "POST", "/v1/echo", body, identity.SigHeaderName, v1, HeaderAPIKey, ca.APIKey)
	if r := replayToB(v1); r.status != 401 || r.body["code"] != "bound_signature_required" {
		t.Fatalf("v1 replay to B with the option: %d %s", r.status, r.raw)
	}
	if got := b.balance(caller, keyB); got != before {
		t.Fatalf("B's balance went from %v to %v by a refused replay", before, got)
	}
	if res, err := cb.Call(ctx, cardB, "echo", []byte(body)); err != nil || res.Header.Get(HeaderDebitedLamports) == "" {
		t.Fatalf("bound call to B with the option: %+v %v", res, err)
	}
}

// TestOrigin: the receiver a bound signature names is the same string
// for every spelling of one origin.
func TestOrigin(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"http://127.0.0.1:8080":          "http://127.0.0.1:8080",
		"HTTP://Agent.Example:80/v1/x?q": "http://agent.example",
		"https://agent.example:443/":     "https://agent.example",
		"https://agent.example:8443":     "https://agent.example:8443",
		"http://[::1]:7777/":             "http://[::1]:7777",
		"ftp://agent.example":            "",
		"/v1/echo":                       "",
		"http://%zz":                     "",
	} {
		if got := Origin(in); got != want {
			t.Errorf("Origin(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestPaidCallsAreReceipted: an answer paid by x402 or by a balance
// carries a receipt signed by the agent's key that names the agent, the
// paying key and the payment; a free call, an unsigned payer and a failed
// call (which charged nothing) get none. A replayed x402 answer carries
// the same payment.
func TestPaidCallsAreReceipted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t, func(pc *PaymentConfig) { pc.FreeCallsPerDay = 1 })
	c := payingClient(t, h, h.chain)
	card := h.card(c)
	agentPub := h.agentKey.Public().(ed25519.PublicKey)
	payer := identity.EncodePublicKey(c.Key.Public().(ed25519.PublicKey))
	check := func(what, receipt, by string, ref func(string) bool) {
		t.Helper()
		r, err := identity.OpenReceipt(receipt, agentPub)
		if err != nil || r.Agent != "echo-1" || r.Payer != payer || r.By != by || !ref(r.Ref) || r.Lamports != testPrice || r.At != h.clock.Now().Unix() {
			t.Fatalf("%s: receipt %+v %v", what, r, err)
		}
	}
	res, err := c.Call(ctx, card, "echo", []byte(`{}`)) // the free call
	if err != nil || res.Receipt != "" || res.Signature != "" {
		t.Fatalf("free call: %+v %v", res, err)
	}
	res, err = c.Call(ctx, card, "echo", []byte(`{}`))
	if err != nil || res.Signature == "" {
		t.Fatalf("paid call: %+v %v", res, err)
	}
	check("x402", res.Receipt, ModeX402, func(ref string) bool { return ref == res.Signature })
	replay, err := c.CallWithProof(ctx, card, "echo", []byte(`{}`), res.Signature, "")
	if err != nil || replay.Header.Get(HeaderPaymentReplay) != "true" {
		t.Fatalf("replay: %+v %v", replay, err)
	}
	check("x402 replay", replay.Receipt, ModeX402, func(ref string) bool { return ref == res.Signature })

	top := h.deposit(c, card, 0)
	c.APIKey, c.Wallet = top.APIKey, nil
	first, err := c.Call(ctx, card, "echo", []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	second, err := c.Call(ctx, card, "echo", []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	check("balance", first.Receipt, "balance", func(ref string) bool { return strings.HasPrefix(ref, "d_") })
	check("balance 2", second.Receipt, "balance", func(ref string) bool { return strings.HasPrefix(ref, "d_") })
	r1, _ := identity.OpenReceipt(first.Receipt, agentPub)
	r2, _ := identity.OpenReceipt(second.Receipt, agentPub)
	if r1.Ref == r2.Ref {
		t.Fatal("two debits share a receipt ref")
	}
	h.fail.Store(true)
	failed, _ := c.Call(ctx, card, "echo", []byte(`{}`))
	h.fail.Store(false)
	if failed == nil || failed.Status != 500 || failed.Receipt != "" {
		t.Fatalf("a failed call was receipted: %+v", failed)
	}
	// An unsigned payer: nobody to name.
	sig := h.pay(NewWallet(), testPrice, h.challenge())
	if r := h.withProof(sig, ""); r.status != 200 || r.header.Get(identity.ReceiptHeaderName) != "" {
		t.Fatalf("unsigned paid call: %d %v", r.status, r.header)
	}
}
