package interop

import (
	"context"
	"crypto/ed25519"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gagliardetto/solana-go"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/interop/soltest"
)

// newTokensOnlyHarness is a harness whose echo is priced only in USDC
// (0.01), with a fee payer, post-pay for trusted callers and deposits. It
// returns a trusted caller's key.
func newTokensOnlyHarness(t *testing.T) (*harness, ed25519.PrivateKey) {
	t.Helper()
	return postpayHarness(t, func(t *testing.T, edit ...func(*PaymentConfig)) *harness {
		h, pc := fakeChainHarness(t)
		h.tokens, h.tokensOnly = Prices{Token(testUSDC, CurrencyUSDC, "", NetworkDevnet)}, true
		h.startExact(pc, edit...)
		return h
	})
}

// TestTokensOnlySkill: a skill priced only in USDC (spec 9: a new
// currency is a new row) is a paid skill like any other. Its 402 offers
// no lamports: the seed's body has an empty accepts, a hint and detail
// that say to pay per PAYMENT-REQUIRED, and no X-Payment-* headers, so
// the seed's clients find nothing to pay in lamports; PAYMENT-REQUIRED
// carries the USDC row, and x402 v2 pays it. What pays in lamports (the
// seed's proof, a prepaid balance, post-pay) pays nothing of it.
func TestTokensOnlySkill(t *testing.T) {
	t.Parallel()
	h, trusted := newTokensOnlyHarness(t)
	if p := h.agent.Card().Skills[0].Pricing; len(p) != 1 || p[0].Currency != CurrencyUSDC || p[0].Asset != MintUSDCDevnet {
		t.Fatalf("card pricing %+v", p)
	}
	r := h.call(nil, "POST", "/v1/echo", `{"x":1}`)
	_, err := ParseChallenge(r.header, []byte(r.raw))
	pr, ok := ParsePaymentRequired(r.header)
	accepts, isList := r.body["accepts"].([]any)
	hint, _ := r.body["hint"].(string)
	if r.status != 402 || r.body["code"] != "payment_required" || !errors.Is(err, ErrBadChallenge) || !isList || len(accepts) != 0 ||
		!strings.Contains(hint, "PAYMENT-REQUIRED") || !strings.Contains(hint, "0.01 USDC") || !strings.Contains(r.body["detail"].(string), "only in SPL tokens") ||
		r.header.Get(HeaderPaymentAmount) != "" || r.header.Get(HeaderPaymentNonce) != "" {
		t.Fatalf("unpaid call: %d %v %s (%v)", r.status, r.header, r.raw, err)
	}
	if !ok || len(pr.Accepts) != 1 || pr.Accepts[0].Asset != MintUSDCDevnet || pr.Accepts[0].Amount != "10000" {
		t.Fatalf("PAYMENT-REQUIRED %+v", pr)
	}
	if paid := h.payExact(h.exactSpec(pr), `{"x":1}`, X402Version2); paid.status != 200 || paid.body["paid_by"] != "x402" {
		t.Fatalf("paid with x402 v2: %d %s", paid.status, paid.raw)
	}
	// Over A2A, the task awaits payment of the USDC row alone.
	if a := h.send("", dataPart("echo", `{"a2a":1}`), nil); a.Result == nil || a.Result.Status.State != stateInputRequired ||
		len(a.required(t).Accepts) != 1 || a.required(t).Accepts[0].Asset != MintUSDCDevnet {
		t.Fatalf("over A2A: %s", a.raw)
	}

	// The seed's proof: a lamports transfer with the challenge's memo.
	nonce := h.challengeV2(`{"seed":1}`).Accepts[0].Extra.Memo
	sig := h.pay(NewWallet(), testPrice, nonce)
	r = h.call(nil, "POST", "/v1/echo", `{"seed":1}`, HeaderPaymentProof, sig.String(), HeaderPaymentNonce, nonce)
	if r.status != 402 || r.body["code"] != "payment_scheme_unsupported" || !strings.Contains(r.body["detail"].(string), "PAYMENT-REQUIRED") {
		t.Fatalf("the seed's proof: %d %s", r.status, r.raw)
	}

	// A funded prepaid balance is not debited.
	caller, payer := identity.GenerateKey(), NewWallet()
	h.chain.Fund(payer.PublicKey(), solana.LAMPORTS_PER_SOL)
	key := h.topup(caller, payer).body["api_key"].(string)
	h.chain.Land(h.payTx(payer, h.provider.PublicKey(), 100_000, key), soltest.Land{})
	if err := h.agent.paywall.PollNow(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r := h.call(caller, "POST", "/v1/echo", `{}`, HeaderAPIKey, key); r.status != 402 || r.body["code"] != "payment_required" || h.balance(caller, key) != 100_000 {
		t.Fatalf("with a prepaid balance: %d %s", r.status, r.raw)
	}
	// A caller trusted for post-pay is not served on credit.
	if r := h.call(trusted, "POST", "/v1/echo", `{}`); r.status != 402 || r.header.Get(HeaderPostpayDue) != "" {
		t.Fatalf("post-pay: %d %v %s", r.status, r.header, r.raw)
	}
	if n := h.served.Load(); n != 1 {
		t.Fatalf("the skill ran %d times; once was paid for", n)
	}
}

// TestTokensOnlyNonceTakesNoSeedProof: a challenge of a skill priced only
// in tokens names no lamports price, so no lamports transfer pays it,
// also after the skill gains a lamports row (a restart with new pricing,
// the nonce still in its grace period).
func TestTokensOnlyNonceTakesNoSeedProof(t *testing.T) {
	t.Parallel()
	h, _ := newTokensOnlyHarness(t)
	nonce := h.challengeV2(`{"x":1}`).Accepts[0].Extra.Memo
	h.agent.Close()
	h.tokensOnly = false
	h.start(h.agent.cfg.Payment)
	sig := h.pay(NewWallet(), 1, nonce)
	for _, withNonce := range []string{nonce, ""} {
		if r := h.withProof(sig, withNonce); r.status != 402 || r.body["code"] != "payment_scheme_unsupported" {
			t.Fatalf("a lamport for a tokens-only challenge (nonce header %q): %d %s", withNonce, r.status, r.raw)
		}
	}
	if n := h.served.Load(); n != 0 {
		t.Fatalf("the skill ran %d times", n)
	}
}

// TestClientTokensOnly: this project's client pays in lamports only; for
// a skill priced only in tokens it pays nothing and says why, naming the
// token prices and the clients that pay them, over HTTP and over A2A.
func TestClientTokensOnly(t *testing.T) {
	t.Parallel()
	h, _ := newTokensOnlyHarness(t)
	wallet := NewWallet()
	h.chain.Fund(wallet.PublicKey(), solana.LAMPORTS_PER_SOL)
	c := &Client{Key: identity.GenerateKey(), Wallet: wallet, Chain: NewChain(h.chain.URL, "", time.Second), MaxLamports: 1_000_000, Now: h.clock.Now}
	defer c.Chain.Close()
	card, err := c.Card(context.Background(), h.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	for _, overA2A := range []bool{false, true} {
		if overA2A {
			card.Contact.HTTP = "" // the client calls over A2A
		}
		_, err := c.Call(context.Background(), card, "echo", []byte(`{"x":1}`))
		var pe *PaymentError
		if !errors.As(err, &pe) || !errors.Is(err, ErrTokensOnly) || !strings.Contains(err.Error(), "0.01 USDC") || !strings.Contains(err.Error(), "@x402/fetch") {
			t.Fatalf("over A2A %v: %v", overA2A, err)
		}
		if !overA2A && (len(pe.Exact) != 1 || pe.Exact[0].Asset != MintUSDCDevnet) {
			t.Fatalf("the x402 v2 offers: %+v", pe.Exact)
		}
	}
	if n, b := h.served.Load(), h.chain.Balance(wallet.PublicKey()); n != 0 || b != solana.LAMPORTS_PER_SOL {
		t.Fatalf("the skill ran %d times, the wallet holds %d", n, b)
	}
}
