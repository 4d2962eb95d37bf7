package interop

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gagliardetto/solana-go"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/storetest"
	"github.com/agentmesh/mesh/interop/soltest"
)

// newExactHarness is a harness whose echo is also priced in USDC and
// wrapped SOL, with a fee payer of its own (funded) that takes x402 v2.
func newExactHarness(t *testing.T, edit ...func(*PaymentConfig)) *harness {
	t.Helper()
	h, pc := fakeChainHarness(t)
	h.startExact(pc, edit...)
	return h
}

// startExact starts h with echo also priced in h.tokens (none set: USDC
// and wrapped SOL) and a fee payer of its own (funded).
func (h *harness) startExact(pc *PaymentConfig, edit ...func(*PaymentConfig)) {
	h.t.Helper()
	if h.tokens == nil {
		h.tokens = Prices{Token(testUSDC, CurrencyUSDC, "", NetworkDevnet), Token(testWSOL, CurrencyWSOL, "", NetworkDevnet)}
	}
	pc.FeePayer = NewWallet()
	for _, e := range edit {
		e(pc)
	}
	h.chain.Fund(pc.FeePayer.PublicKey(), solana.LAMPORTS_PER_SOL)
	h.start(pc)
}

// challengeV2 calls echo with body unpaid and returns the 402's x402 v2
// challenge.
func (h *harness) challengeV2(body string) PaymentRequired {
	h.t.Helper()
	r := h.call(nil, "POST", "/v1/echo", body)
	pr, ok := ParsePaymentRequired(r.header)
	if r.status != 402 || !ok || len(pr.Accepts) == 0 {
		h.t.Fatalf("unpaid call: %d %v %s", r.status, r.header, r.raw)
	}
	return pr
}

// exactSpec is a valid USDC payment of the challenge pr.
func (h *harness) exactSpec(pr PaymentRequired) exactSpec {
	fp := solana.MustPublicKeyFromBase58(pr.Accepts[0].Extra.FeePayer)
	return testSpec(fp, h.provider.PublicKey(), pr.Accepts[0].Extra.Memo, h.chain.LatestBlockhash())
}

// payExact calls echo with body and the payment s in the header of x402
// version v.
func (h *harness) payExact(s exactSpec, body string, v int) resp {
	h.t.Helper()
	return h.call(nil, "POST", "/v1/echo", body, headerOfVersion(v), EncodeHeader(s.payload(h.t, v, CAIP2Devnet)))
}

// TestExactChallenge: a paid skill's 402 carries, beside the seed's body
// and X-Payment-* headers, x402 v2's PAYMENT-REQUIRED: one exact row per
// token price, on the CAIP-2 network, to the wallet, through the agent's
// fee payer, with the challenge's nonce as the memo.
func TestExactChallenge(t *testing.T) {
	t.Parallel()
	h := newExactHarness(t)
	r := h.call(nil, "POST", "/v1/echo", `{"x":1}`)
	ch, err := ParseChallenge(r.header, []byte(r.raw))
	if r.status != 402 || err != nil || ch.Offers[0].Lamports != testPrice {
		t.Fatalf("the seed's challenge: %d %s %v", r.status, r.raw, err)
	}
	pr, ok := ParsePaymentRequired(r.header)
	if !ok {
		t.Fatalf("no PAYMENT-REQUIRED: %v", r.header)
	}
	fp := h.agent.paywall.cfg.FeePayer.Address()
	want := PaymentRequired{X402Version: 2, Error: "payment required",
		Resource: ResourceInfo{URL: h.srv.URL + "/v1/echo", Description: "Echoes its input.", MimeType: "application/json"},
		Accepts: []PaymentRequirements{
			{Scheme: "exact", Network: "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1", Amount: "10000", Asset: MintUSDCDevnet,
				PayTo: h.provider.Address(), MaxTimeoutSeconds: 300, Extra: RequirementsExtra{FeePayer: fp, Memo: ch.Offers[0].Nonce}},
			{Scheme: "exact", Network: "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1", Amount: "20000", Asset: MintWSOL,
				PayTo: h.provider.Address(), MaxTimeoutSeconds: 300, Extra: RequirementsExtra{FeePayer: fp, Memo: ch.Offers[0].Nonce}},
		}}
	if EncodeHeader(pr) != EncodeHeader(want) {
		t.Fatalf("PAYMENT-REQUIRED %+v\nwant %+v", pr, want)
	}
	// The card shows the rows with their mints.
	card := h.agent.Card()
	if p := card.Skills[0].Pricing; len(p) != 3 || p[1].Asset != MintUSDCDevnet || p[2].Currency != CurrencyWSOL || p[2].Asset != MintWSOL {
		t.Fatalf("card pricing %+v", p)
	}
	// An agent without a fee payer offers no v2 row.
	if r := newHarness(t).call(nil, "POST", "/v1/echo", `{}`); r.status != 402 || r.header.Get(HeaderPaymentRequired) != "" {
		t.Fatalf("without a fee payer: %d %v", r.status, r.header)
	}
}

// TestExactPayAndReplay: a payment in PAYMENT-SIGNATURE is co-signed by
// the agent's fee payer, submitted and confirmed, and the answer carries
// PAYMENT-RESPONSE, X-Payment-Proof and the agent's X-Mesh-Receipt. The
// same payment again gets the cached answer and is submitted no more,
// also after a restart; for another request it is refused, and its nonce
// pays nothing else. v1's X-PAYMENT pays too.
func TestExactPayAndReplay(t *testing.T) {
	t.Parallel()
	h := newExactHarness(t)
	s := h.exactSpec(h.challengeV2(`{"x":1}`))
	r := h.payExact(s, `{"x":1}`, X402Version2)
	if r.status != 200 || r.body["paid_by"] != "x402" {
		t.Fatalf("paid call: %d %s", r.status, r.raw)
	}
	sr, ok := ParseSettleResponse(r.header)
	if !ok || !sr.Success || sr.Network != CAIP2Devnet || sr.Payer != s.payer.Address() || r.header.Get(HeaderPaymentProof) != sr.Transaction {
		t.Fatalf("PAYMENT-RESPONSE %+v, X-Payment-Proof %q", sr, r.header.Get(HeaderPaymentProof))
	}
	tx, _ := decodeTx(s.raw(t))
	if sig := solana.MustSignatureFromBase58(sr.Transaction); !ed25519.Verify(s.feePayer[:], tx.msg, sig[:]) {
		t.Fatal("the settled transaction's id is not the fee payer's signature of the payer's message")
	}
	rc, err := identity.OpenReceipt(r.header.Get(identity.ReceiptHeaderName), h.agentKey.Public().(ed25519.PublicKey))
	if err != nil || rc.Ref != sr.Transaction || rc.Asset != MintUSDCDevnet || rc.Amount != testUSDC || rc.Lamports != 0 ||
		rc.Payer != identity.EncodePublicKey(s.payer.PublicKey().Bytes()) {
		t.Fatalf("receipt %+v %v", rc, err)
	}
	if n := h.chain.Calls("sendTransaction"); n != 1 {
		t.Fatalf("%d submissions", n)
	}

	replay := func(what string) {
		t.Helper()
		again := h.payExact(s, `{"x":1}`, X402Version2)
		if again.status != 200 || again.raw != r.raw || again.header.Get(HeaderPaymentReplay) != "true" ||
			again.header.Get(HeaderPaymentResponse) != r.header.Get(HeaderPaymentResponse) {
			t.Fatalf("%s: %d %s", what, again.status, again.raw)
		}
		if n, m := h.served.Load(), h.chain.Calls("sendTransaction"); n != 1 || m != 1 {
			t.Fatalf("%s: the skill ran %d times, %d submissions", what, n, m)
		}
	}
	replay("replay")
	if other := h.payExact(s, `{"x":2}`, X402Version2); other.status != 402 || other.body["code"] != "payment_binding_mismatch" {
		t.Fatalf("the payment for another request: %d %s", other.status, other.raw)
	}
	// Another transaction for the same challenge: its nonce is paid.
	s2 := s
	s2.payer = NewWallet()
	if r := h.payExact(s2, `{"x":1}`, X402Version2); r.status != 402 || r.body["code"] != "payment_nonce_used" {
		t.Fatalf("a second transaction for the nonce: %d %s", r.status, r.raw)
	}
	pc := h.agent.paywall.cfg
	h.start(&pc)
	replay("replay after a restart")

	// v1's X-PAYMENT, answered in X-PAYMENT-RESPONSE.
	s1 := h.exactSpec(h.challengeV2(`{"v":1}`))
	if r := h.payExact(s1, `{"v":1}`, 1); r.status != 200 || r.header.Get(HeaderXPaymentResponse) == "" || r.header.Get(HeaderPaymentResponse) != "" {
		t.Fatalf("x402 v1 payment: %d %v %s", r.status, r.header, r.raw)
	}
}

// TestExactRefusals: each payment that must not be settled is answered
// 402 with its code and a fresh x402 v2 challenge; the skill does not run
// and nothing is submitted.
func TestExactRefusals(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		code string
		bend func(h *harness, s *exactSpec) string // returns the header value
	}{
		{"not base64", "payment_payload_malformed", func(*harness, *exactSpec) string { return "%%%" }},
		{"no transaction", "payment_payload_malformed", func(*harness, *exactSpec) string {
			return EncodeHeader(map[string]any{"x402Version": 2, "accepted": map[string]string{"scheme": "exact", "network": CAIP2Devnet}})
		}},
		{"another network", "payment_scheme_unsupported", func(h *harness, s *exactSpec) string {
			p := s.payload(h.t, X402Version2, CAIP2Mainnet)
			return EncodeHeader(p)
		}},
		{"foreign fee payer", "payment_fee_payer_mismatch", func(_ *harness, s *exactSpec) string { s.feePayer = NewWallet().PublicKey(); return "" }},
		{"wrong mint", "payment_wrong_asset", func(_ *harness, s *exactSpec) string { s.mint = NewWallet().PublicKey(); return "" }},
		{"wrong amount", "payment_amount_mismatch", func(_ *harness, s *exactSpec) string { s.amount = 1; return "" }},
		{"extra instruction", "payment_extra_instruction", func(_ *harness, s *exactSpec) string {
			s.edit = func(ixs []solana.Instruction) []solana.Instruction {
				return append(ixs, solana.NewInstruction(solana.SystemProgramID, solana.AccountMetaSlice{}, []byte{2}))
			}
			return ""
		}},
		{"forged memo", "payment_nonce_unknown", func(_ *harness, s *exactSpec) string { s.memo = "x4_forged"; return "" }},
		{"expired challenge", "payment_nonce_expired", func(h *harness, _ *exactSpec) string { h.clock.Advance(6 * time.Minute); return "" }},
		{"expired blockhash", "payment_blockhash_expired", func(h *harness, _ *exactSpec) string { h.chain.Advance(151); return "" }},
		{"refused in simulation", "payment_tx_rejected", func(h *harness, _ *exactSpec) string {
			h.chain.Fail("sendTransaction", soltest.RPCError)
			return ""
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newExactHarness(t)
			pr := h.challengeV2(`{}`)
			s := h.exactSpec(pr)
			v := c.bend(h, &s)
			if v == "" {
				v = EncodeHeader(s.payload(t, X402Version2, CAIP2Devnet))
			}
			r := h.call(nil, "POST", "/v1/echo", `{}`, HeaderPaymentSignature, v)
			fresh, ok := ParsePaymentRequired(r.header)
			if r.status != 402 || r.body["code"] != c.code || !ok || fresh.Accepts[0].Extra.Memo == pr.Accepts[0].Extra.Memo {
				t.Fatalf("%d %s (fresh challenge %v)", r.status, r.raw, ok)
			}
			if n := h.served.Load(); n != 0 {
				t.Fatal("the skill ran")
			}
			if c.code != "payment_tx_rejected" && h.chain.Calls("sendTransaction") != 0 {
				t.Fatal("a refused payment was submitted")
			}
		})
	}
}

// TestExactRejectedFreesTheNonce: a transaction the RPC refuses did not
// land; its claim and its nonce's mark are dropped, so the same payment
// settles once the cause is gone.
func TestExactRejectedFreesTheNonce(t *testing.T) {
	t.Parallel()
	h := newExactHarness(t)
	s := h.exactSpec(h.challengeV2(`{}`))
	h.chain.Fail("sendTransaction", soltest.RPCError)
	if r := h.payExact(s, `{}`, X402Version2); r.status != 402 || r.body["code"] != "payment_tx_rejected" {
		t.Fatalf("refused: %d %s", r.status, r.raw)
	}
	h.chain.Heal()
	if r := h.payExact(s, `{}`, X402Version2); r.status != 200 {
		t.Fatalf("the same payment, now taken: %d %s", r.status, r.raw)
	}
}

// TestExactPending: a submitted transaction not seen confirmed in time is
// answered payment_settlement_pending and stays claimed; the same payment
// again looks at it anew: settled once it lands (submitted again, landed
// once), refused and unclaimed once its blockhash has expired.
func TestExactPending(t *testing.T) {
	t.Parallel()
	short := func(pc *PaymentConfig) { pc.SettleTimeout = 5 * time.Second }
	t.Run("lands on the retry", func(t *testing.T) {
		t.Parallel() // each waits SettleTimeout
		h := newExactHarness(t, short)
		s := h.exactSpec(h.challengeV2(`{}`))
		h.chain.DropSends(true)
		if r := h.payExact(s, `{}`, X402Version2); r.status != 402 || r.body["code"] != "payment_settlement_pending" {
			t.Fatalf("lost on its way: %d %s", r.status, r.raw)
		}
		h.chain.DropSends(false)
		r := h.payExact(s, `{}`, X402Version2)
		if sr, ok := ParseSettleResponse(r.header); r.status != 200 || !ok || !sr.Success {
			t.Fatalf("retried: %d %s", r.status, r.raw)
		}
		if again := h.payExact(s, `{}`, X402Version2); again.status != 200 || again.header.Get(HeaderPaymentReplay) != "true" ||
			h.served.Load() != 1 || h.chain.Calls("sendTransaction") != 2 {
			t.Fatalf("replay: %d %s; %d runs, %d submissions", again.status, again.raw, h.served.Load(), h.chain.Calls("sendTransaction"))
		}
	})
	t.Run("expires meanwhile", func(t *testing.T) {
		t.Parallel()
		h := newExactHarness(t, short)
		s := h.exactSpec(h.challengeV2(`{}`))
		h.chain.DropSends(true)
		if r := h.payExact(s, `{}`, X402Version2); r.body["code"] != "payment_settlement_pending" {
			t.Fatalf("lost on its way: %d %s", r.status, r.raw)
		}
		h.chain.Advance(151)
		if r := h.payExact(s, `{}`, X402Version2); r.status != 402 || r.body["code"] != "payment_blockhash_expired" {
			t.Fatalf("expired: %d %s", r.status, r.raw)
		}
		// The nonce is free again: a new transaction against a fresh blockhash pays it.
		h.chain.DropSends(false)
		s.blockhash, s.payer = h.chain.LatestBlockhash(), NewWallet()
		if r := h.payExact(s, `{}`, X402Version2); r.status != 200 {
			t.Fatalf("paid again: %d %s", r.status, r.raw)
		}
	})
}

// TestPaymentHeader: the header a transport sets for a payment payload
// it carries is the one of its x402 version, and the paywall reads it.
func TestPaymentHeader(t *testing.T) {
	t.Parallel()
	for v, want := range map[int]string{1: HeaderXPayment, 2: HeaderPaymentSignature} {
		p := testSpec(NewWallet().PublicKey(), NewWallet().PublicKey(), "x4_m", solana.Hash{}).payload(t, v, CAIP2Devnet)
		raw, _ := base64.StdEncoding.DecodeString(EncodeHeader(p))
		name, value, err := PaymentHeader(raw)
		if err != nil || name != want || value != EncodeHeader(p) {
			t.Fatalf("v%d: %s %v", v, name, err)
		}
	}
	if _, _, err := PaymentHeader([]byte(`{"x402Version": 3}`)); err == nil {
		t.Fatal("x402Version 3 taken")
	}
}

// TestTokenPricingConfig: a token row names its mint (or a known
// currency's), and an agent takes token rows only with a fee payer or a
// facilitator; a paid skill has a price on the payment network (a
// lamports row, token rows, or both) and no free row beside it.
func TestTokenPricingConfig(t *testing.T) {
	t.Parallel()
	mint := NewWallet().Address()
	for _, c := range []struct {
		row Price
		ok  bool
	}{
		{Token(testUSDC, CurrencyUSDC, "", NetworkDevnet), true},
		{Token(testWSOL, CurrencyWSOL, "", NetworkMainnet), true},
		{Token(7, "BONK", mint, NetworkDevnet), true},
		{Token(7, "BONK", "", NetworkDevnet), false},
		{Token(7, "BONK", "not-base58!", NetworkDevnet), false},
		{Token(0, CurrencyUSDC, "", NetworkDevnet), false},
		{Token(testUSDC, CurrencyUSDC, "", ""), false},
		{Price{Unit: UnitRequest, Amount: 1}, false},
	} {
		if err := c.row.validate(); (err == nil) != c.ok {
			t.Errorf("%+v: %v", c.row, err)
		}
	}
	chain := soltest.New(t)
	echo := func(rows ...Price) []Skill {
		return []Skill{{ID: "echo", Pricing: rows, Handler: func(context.Context, json.RawMessage) (any, error) { return nil, nil }}}
	}
	usdc, lamports := Token(testUSDC, CurrencyUSDC, "", NetworkDevnet), Lamports(testPrice, NetworkDevnet)
	for _, c := range []struct {
		name   string
		skills []Skill
		edit   func(*PaymentConfig)
		want   string // "" is valid
	}{
		{"fee payer", echo(lamports, usdc), func(pc *PaymentConfig) { pc.FeePayer = NewWallet() }, ""},
		{"facilitator", echo(lamports, usdc), func(pc *PaymentConfig) { pc.FacilitatorURL = "https://facilitator.example" }, ""},
		{"neither", echo(lamports, usdc), func(*PaymentConfig) {}, "fee payer"},
		{"both", echo(lamports, usdc), func(pc *PaymentConfig) { pc.FeePayer, pc.FacilitatorURL = NewWallet(), "https://f.example" }, "exclude"},
		{"facilitator not a URL", echo(lamports, usdc), func(pc *PaymentConfig) { pc.FacilitatorURL = "f.example" }, "facilitator_url"},
		{"tokens only", echo(usdc), func(pc *PaymentConfig) { pc.FeePayer = NewWallet() }, ""},
		{"tokens only, neither", echo(usdc), func(*PaymentConfig) {}, "fee payer"},
		{"tokens on another network", echo(Token(testUSDC, CurrencyUSDC, "", NetworkMainnet)), func(pc *PaymentConfig) { pc.FeePayer = NewWallet() }, "no price on the payment network"},
		{"free row beside tokens", echo(Free(), usdc), func(pc *PaymentConfig) { pc.FeePayer = NewWallet() }, "free row"},
		{"zero lamports beside tokens", echo(Lamports(0, NetworkDevnet), usdc), func(pc *PaymentConfig) { pc.FeePayer = NewWallet() }, "free row"},
		{"fee payer key file missing", echo(lamports, usdc), func(pc *PaymentConfig) { pc.FeePayerKeyFile = "/nonexistent/fee-payer.json" }, "fee payer key"},
	} {
		t.Run(c.name, func(t *testing.T) {
			pc := testPayment(chain, NewWallet().Address())
			c.edit(pc)
			_, err := NewAgent(AgentConfig{Card: Card{Name: "Echo"}, Skills: c.skills, Payment: pc}, AgentDeps{DB: storetest.DB(t)})
			if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
		})
	}
}

// TestExactConcurrentSubmissions: the same payment sent many times at once
// is submitted once and runs the skill once; every request gets the one
// answer.
func TestExactConcurrentSubmissions(t *testing.T) {
	t.Parallel()
	h := newExactHarness(t)
	s := h.exactSpec(h.challengeV2(`{}`))
	v := EncodeHeader(s.payload(t, X402Version2, CAIP2Devnet))
	var wg sync.WaitGroup
	answers := make([]resp, 8)
	for i := range answers {
		wg.Go(func() { answers[i] = h.call(nil, "POST", "/v1/echo", `{}`, HeaderPaymentSignature, v) })
	}
	wg.Wait()
	for i, r := range answers {
		if r.status != 200 || r.raw != answers[0].raw {
			t.Fatalf("request %d: %d %s", i, r.status, r.raw)
		}
	}
	if n, m := h.served.Load(), h.chain.Calls("sendTransaction"); n != 1 || m != 1 {
		t.Fatalf("the skill ran %d times, %d submissions", n, m)
	}
}
