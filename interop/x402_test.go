package interop

import (
	"context"
	"crypto/ed25519"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/rpc"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/storetest"
	"github.com/agentmesh/mesh/interop/soltest"
	"github.com/agentmesh/mesh/store"
)

func TestX402PayAndReplay(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r := h.call(nil, "POST", "/v1/echo", `{"x":1}`)
	if r.status != 402 || r.body["code"] != "payment_required" || r.body["detail"] == "" {
		t.Fatalf("unpaid: %d %s", r.status, r.raw)
	}
	ch, err := ParseChallenge(r.header, []byte(r.raw))
	if err != nil {
		t.Fatal(err)
	}
	o := ch.Offers[0]
	if o.Lamports != testPrice || o.PayTo != h.provider.Address() || o.Network != NetworkDevnet || o.Resource != "/v1/echo" {
		t.Fatalf("offer %+v", o)
	}
	link, err := ParsePayLink(o.PayURL)
	if err != nil || link.Memo != o.Nonce || link.Lamports != testPrice || link.Address != o.PayTo {
		t.Fatalf("chainPayUrl %q: %+v %v", o.PayURL, link, err)
	}
	for _, hd := range []string{HeaderPaymentNetwork, HeaderPaymentAddress, HeaderPaymentAmount, HeaderPaymentNonce} {
		if r.header.Get(hd) == "" {
			t.Errorf("402 lacks %s", hd)
		}
	}

	sig := h.pay(NewWallet(), testPrice, o.Nonce)
	r = h.withProof(sig, o.Nonce)
	if r.status != 200 || r.body["paid_by"] != "x402" || r.header.Get(HeaderPaymentProof) != sig.String() {
		t.Fatalf("paid call: %d %s", r.status, r.raw)
	}
	// A replay of the same proof gets the cached answer; the skill does not run again.
	for _, nonce := range []string{o.Nonce, ""} {
		again := h.withProof(sig, nonce)
		if again.status != 200 || again.raw != r.raw || again.header.Get(HeaderPaymentReplay) != "true" {
			t.Fatalf("replay (nonce %q): %d %s", nonce, again.status, again.raw)
		}
	}
	if n := h.served.Load(); n != 1 {
		t.Fatalf("skill ran %d times for one payment", n)
	}
	// The same signature presented for another nonce is refused.
	other := h.challenge()
	if r := h.withProof(sig, other); r.status != 402 || r.body["code"] != "payment_proof_used" {
		t.Fatalf("signature reused for another nonce: %d %s", r.status, r.raw)
	}
}

// TestX402Refusals: every check of spec 3.3 that fails answers 402 with
// its own code and a fresh challenge, and never runs the skill.
func TestX402Refusals(t *testing.T) {
	t.Parallel()
	type setup func(h *harness) (sig string, nonce string)
	payer := NewWallet()
	// rpcFault pays properly, then breaks getTransaction.
	rpcFault := func(f soltest.Failure) setup {
		return func(h *harness) (string, string) {
			n := h.challenge()
			sig := h.pay(payer, testPrice, n)
			h.chain.Fail("getTransaction", f)
			return sig.String(), n
		}
	}
	land := func(h *harness, to solana.PublicKey, lamports uint64, o soltest.Land, memos ...string) solana.Signature {
		h.chain.Fund(payer.PublicKey(), solana.LAMPORTS_PER_SOL)
		return h.chain.Land(h.payTx(payer, to, lamports, memos...), o)
	}
	cases := []struct {
		name  string
		code  string
		setup setup
	}{
		{"malformed proof", "payment_proof_malformed", func(h *harness) (string, string) { return "not-a-signature!", h.challenge() }},
		{"short proof", "payment_proof_malformed", func(h *harness) (string, string) { return "3vZ", h.challenge() }},
		{"unknown nonce", "payment_nonce_unknown", func(h *harness) (string, string) {
			return h.pay(payer, testPrice, "x4_forged").String(), "x4_forged"
		}},
		{"unknown nonce from memo", "payment_nonce_unknown", func(h *harness) (string, string) {
			return h.pay(payer, testPrice, "x4_forged").String(), ""
		}},
		{"expired nonce", "payment_nonce_expired", func(h *harness) (string, string) {
			n := h.challenge()
			h.clock.Advance(10 * time.Minute)
			h.chain.SetBlockTime(h.clock.Now().Unix())
			return h.pay(payer, testPrice, n).String(), n
		}},
		{"underpaid", "payment_underpaid", func(h *harness) (string, string) {
			n := h.challenge()
			return h.pay(payer, testPrice-1, n).String(), n
		}},
		{"wrong destination", "payment_wrong_destination", func(h *harness) (string, string) {
			n := h.challenge()
			return land(h, NewWallet().PublicKey(), testPrice, soltest.Land{}, n).String(), n
		}},
		{"wrong memo", "payment_memo_mismatch", func(h *harness) (string, string) {
			n := h.challenge()
			return h.pay(payer, testPrice, "something else").String(), n
		}},
		{"second memo", "payment_memo_duplicate", func(h *harness) (string, string) {
			n := h.challenge()
			return h.pay(payer, testPrice, n, n).String(), n
		}},
		{"no memo", "payment_memo_missing", func(h *harness) (string, string) {
			n := h.challenge()
			return h.pay(payer, testPrice).String(), n
		}},
		{"failed transaction", "payment_tx_failed", func(h *harness) (string, string) {
			n := h.challenge()
			fail := map[string]any{"InstructionError": []any{0, map[string]any{"Custom": 1}}}
			return land(h, h.provider.PublicKey(), testPrice, soltest.Land{Err: fail}, n).String(), n
		}},
		{"not visible at the commitment", "payment_not_visible", func(h *harness) (string, string) {
			n := h.challenge()
			return land(h, h.provider.PublicKey(), testPrice, soltest.Land{Hidden: true}, n).String(), n
		}},
		{"unknown signature", "payment_not_visible", func(h *harness) (string, string) {
			return solana.Signature{9, 9, 9}.String(), h.challenge()
		}},
		{"rpc error", "payment_rpc_error", rpcFault(soltest.RPCError)},
		{"rpc http 500", "payment_rpc_error", rpcFault(soltest.HTTP500)},
		{"rpc timeout", "payment_rpc_timeout", rpcFault(soltest.Hang)},
		{"nonce of another skill", "payment_binding_mismatch", func(h *harness) (string, string) {
			key, _ := h.agent.paywall.ledger.macKey()
			n := newNonce(key, NetworkDevnet, h.provider.Address(), nonceTerms{Expires: h.clock.Now().Add(time.Minute), Lamports: testPrice},
				bindingOf("other", []byte(`{"x":1}`), Caller{}))
			return h.pay(payer, testPrice, n).String(), n
		}},
		{"nonce of another body", "payment_binding_mismatch", func(h *harness) (string, string) {
			r := h.call(nil, "POST", "/v1/echo", `{"x":2}`)
			n := r.header.Get(HeaderPaymentNonce)
			return h.pay(payer, testPrice, n).String(), n
		}},
		{"nonce of another body, from the memo", "payment_binding_mismatch", func(h *harness) (string, string) {
			r := h.call(nil, "POST", "/v1/echo", `{"x":2}`)
			return h.pay(payer, testPrice, r.header.Get(HeaderPaymentNonce)).String(), ""
		}},
		{"nonce of a signed request, retried unsigned", "payment_binding_mismatch", func(h *harness) (string, string) {
			r := h.call(identity.GenerateKey(), "POST", "/v1/echo", `{"x":1}`)
			n := r.header.Get(HeaderPaymentNonce)
			return h.pay(payer, testPrice, n).String(), n
		}},
		{"forged nonce", "payment_binding_mismatch", func(h *harness) (string, string) {
			forged := forge(h.challenge())
			return h.pay(payer, testPrice, forged).String(), forged
		}},
		{"nonce paid by another transaction", "payment_nonce_used", func(h *harness) (string, string) {
			n := h.challenge()
			first := h.pay(payer, testPrice, n)
			if r := h.withProof(first, n); r.status != 200 {
				h.t.Fatalf("first payment: %d %s", r.status, r.raw)
			}
			h.served.Store(0)
			return h.pay(payer, testPrice+1, n).String(), n
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, func(pc *PaymentConfig) { pc.RPCTimeout = rpcTimeoutShort })
			sig, nonce := c.setup(h)
			hdr := []string{HeaderPaymentProof, sig}
			if nonce != "" {
				hdr = append(hdr, HeaderPaymentNonce, nonce)
			}
			r := h.call(nil, "POST", "/v1/echo", `{"x":1}`, hdr...)
			if r.status != 402 || r.body["code"] != c.code || r.body["detail"] == "" {
				t.Fatalf("got %d %s, want 402 %s", r.status, r.raw, c.code)
			}
			if _, err := ParseChallenge(r.header, []byte(r.raw)); err != nil || r.header.Get(HeaderPaymentNonce) == nonce {
				t.Fatalf("refusal without a fresh challenge: %v", err)
			}
			if n := h.served.Load(); n != 0 {
				t.Fatalf("skill ran %d times without a valid payment", n)
			}
		})
	}
}

// TestX402RetryableThenServed: a proof refused because the chain could not
// tell yet is served once the chain can, with no second payment.
func TestX402RetryableThenServed(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	payer := NewWallet()
	h.chain.Fund(payer.PublicKey(), solana.LAMPORTS_PER_SOL)
	n := h.challenge()
	sig := h.chain.Land(h.payTx(payer, h.provider.PublicKey(), testPrice, n), soltest.Land{Hidden: true})
	if r := h.withProof(sig, n); r.body["code"] != "payment_not_visible" {
		t.Fatalf("hidden: %d %s", r.status, r.raw)
	}
	h.chain.Reveal(sig)
	if r := h.withProof(sig, n); r.status != 200 {
		t.Fatalf("after reveal: %d %s", r.status, r.raw)
	}
}

// TestX402FailedSkillIsNotCharged: a 5xx from the skill keeps the
// entitlement open; the retry with the same proof runs the skill.
func TestX402FailedSkillIsNotCharged(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	n := h.challenge()
	sig := h.pay(NewWallet(), testPrice, n)
	h.fail.Store(true)
	if r := h.withProof(sig, n); r.status != 500 {
		t.Fatalf("failing skill: %d %s", r.status, r.raw)
	}
	h.fail.Store(false)
	if r := h.withProof(sig, n); r.status != 200 || r.header.Get(HeaderPaymentReplay) != "" {
		t.Fatalf("retry after failure: %d %s", r.status, r.raw)
	}
}

// TestX402LargeAnswerReplays: an answer within maxCachedBody is replayed
// from the cache; a larger one is never replayed empty: the replay runs the
// skill again for the same request, but one payment buys no more than
// maxUncachedRuns runs.
func TestX402LargeAnswerReplays(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		pad  int64
		runs int64
	}{{maxCachedBody - 1000, 1}, {maxCachedBody, 2}} {
		h := newHarness(t)
		h.pad.Store(c.pad)
		n := h.challenge()
		sig := h.pay(NewWallet(), testPrice, n)
		first := h.withProof(sig, n)
		if first.status != 200 || len(first.raw) < int(c.pad) {
			t.Fatalf("answer of %d bytes: %d, %d bytes", c.pad, first.status, len(first.raw))
		}
		again := h.withProof(sig, n)
		if again.status != 200 || again.raw != first.raw {
			t.Fatalf("replay of an answer of %d bytes: %d, %d bytes", c.pad, again.status, len(again.raw))
		}
		if got := h.served.Load(); got != c.runs {
			t.Fatalf("answer of %d bytes: skill ran %d times, want %d", c.pad, got, c.runs)
		}
	}
	h := newHarness(t)
	h.pad.Store(maxCachedBody)
	n := h.challenge()
	sig := h.pay(NewWallet(), testPrice, n)
	for range maxUncachedRuns {
		if r := h.withProof(sig, n); r.status != 200 {
			t.Fatalf("run within the bound: %d %.80s", r.status, r.raw)
		}
	}
	if r := h.withProof(sig, n); r.status != 410 || !strings.Contains(r.raw, "payment_answer_gone") {
		t.Fatalf("run past the bound: %d %.200s", r.status, r.raw)
	}
	if got := h.served.Load(); got != maxUncachedRuns {
		t.Fatalf("skill ran %d times for one payment", got)
	}
}

// TestX402ConcurrentProofs: the same proof sent many times at once is
// served by the skill once.
func TestX402ConcurrentProofs(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	n := h.challenge()
	sig := h.pay(NewWallet(), testPrice, n)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r := h.withProof(sig, n); r.status != 200 {
				t.Errorf("concurrent proof: %d %s", r.status, r.raw)
			}
		}()
	}
	wg.Wait()
	if got := h.served.Load(); got != 1 {
		t.Fatalf("skill ran %d times", got)
	}
}

// TestX402TransactionShapes: v0 transactions whose wallet comes from an
// address lookup table, transfers in inner instructions, and RPC answers
// in json encoding are all read.
func TestX402TransactionShapes(t *testing.T) {
	t.Parallel()
	t.Run("v0 with lookup table", func(t *testing.T) {
		h := newHarness(t)
		payer := NewWallet()
		h.chain.Fund(payer.PublicKey(), solana.LAMPORTS_PER_SOL)
		table := solana.NewWallet().PublicKey()
		entries := solana.PublicKeySlice{NewWallet().PublicKey(), h.provider.PublicKey()}
		h.chain.AddTable(table, entries)
		n := h.challenge()
		tx := buildTx(t, payer, h.provider.PublicKey(), testPrice, map[solana.PublicKey]solana.PublicKeySlice{table: entries}, n)
		if !tx.Message.IsVersioned() || tx.Message.NumLookups() == 0 {
			t.Fatalf("test transaction is not v0 with lookups")
		}
		sig := h.chain.Land(tx, soltest.Land{})
		if r := h.withProof(sig, n); r.status != 200 {
			t.Fatalf("v0 payment: %d %s", r.status, r.raw)
		}
	})
	t.Run("inner instruction transfer", func(t *testing.T) {
		h := newHarness(t)
		payer := NewWallet()
		h.chain.Fund(payer.PublicKey(), solana.LAMPORTS_PER_SOL)
		n := h.challenge()
		// A memo-only transaction that names the wallet; the transfer
		// happens in an inner instruction (as a program's CPI would).
		tx := buildTx(t, payer, solana.PublicKey{}, 0, nil, n)
		tx.Message.AccountKeys = append(tx.Message.AccountKeys, h.provider.PublicKey(), solana.SystemProgramID)
		tx.Message.Header.NumReadonlyUnsignedAccounts += 2
		resign(t, tx, payer)
		keys := tx.Message.AccountKeys
		data := make([]byte, 12)
		binary.LittleEndian.PutUint32(data, 2)
		binary.LittleEndian.PutUint64(data[4:], testPrice)
		inner := []rpc.InnerInstruction{{Index: 0, Instructions: []rpc.CompiledInstruction{{
			ProgramIDIndex: uint16(len(keys) - 1), Accounts: []uint16{0, uint16(len(keys) - 2)}, Data: data,
		}}}}
		sig := h.chain.Land(tx, soltest.Land{Inner: inner})
		if r := h.withProof(sig, n); r.status != 200 {
			t.Fatalf("inner transfer: %d %s", r.status, r.raw)
		}
	})
	t.Run("json encoding", func(t *testing.T) {
		h := newHarness(t)
		h.chain.JSONEncoding = true
		n := h.challenge()
		sig := h.pay(NewWallet(), testPrice, n)
		if r := h.withProof(sig, n); r.status != 200 {
			t.Fatalf("json-encoded transaction: %d %s", r.status, r.raw)
		}
	})
}

func resign(t *testing.T, tx *solana.Transaction, w *Wallet) {
	tx.Signatures = nil
	signWith(t, tx, w)
}

func TestGenesisCheck(t *testing.T) {
	t.Parallel()
	chain := soltest.New(t)
	chain.SetGenesis(GenesisMainnet)
	pc := testPayment(chain, NewWallet().Address())
	a, err := NewAgent(AgentConfig{Card: Card{Name: "x"}, Payment: pc, Skills: []Skill{{ID: "s",
		Pricing: Prices{Lamports(1, NetworkDevnet)}, Handler: func(ctx context.Context, _ json.RawMessage) (any, error) { return nil, nil }}}},
		AgentDeps{DB: storetest.DB(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); !errors.Is(err, ErrGenesisMismatch) {
		t.Fatalf("devnet config on a mainnet RPC: %v", err)
	}
	a.Close()
	pc.GenesisHash = GenesisMainnet // explicit override, as for a local validator
	a, _ = NewAgent(AgentConfig{Card: Card{Name: "x"}, Payment: pc, Skills: []Skill{{ID: "s",
		Pricing: Prices{Lamports(1, NetworkDevnet)}, Handler: func(ctx context.Context, _ json.RawMessage) (any, error) { return nil, nil }}}},
		AgentDeps{DB: storetest.DB(t)})
	if err := a.Start(context.Background()); err != nil {
		t.Fatalf("with override: %v", err)
	}
	a.Close()
	a.Close()
	if !strings.Contains(ErrGenesisMismatch.Error(), "genesis") {
		t.Fatal("sentinel text")
	}
}

// TestX402PaymentIsBoundToTheRequest: the signature and memo of a payment
// are public on chain. An observer who sends them before the payer is not
// served and claims nothing; after the payer is served, the observer
// cannot read the cached answer; and the payer's own replay with another
// body is refused rather than answered with the old result.
func TestX402PaymentIsBoundToTheRequest(t *testing.T) {
	t.Parallel()
	for _, signed := range []bool{true, false} {
		t.Run(map[bool]string{true: "signed payer", false: "unsigned payer"}[signed], func(t *testing.T) {
			h := newHarness(t)
			var payer ed25519.PrivateKey
			if signed {
				payer = identity.GenerateKey()
			}
			body := `{"secret":"payer's question"}`
			r := h.call(payer, "POST", "/v1/echo", body)
			n := r.header.Get(HeaderPaymentNonce)
			sig := h.pay(NewWallet(), testPrice, n).String()

			observers := []struct {
				name string
				key  ed25519.PrivateKey
				body string
			}{
				{"observer, other key", identity.GenerateKey(), `{"x":1}`},
				{"observer, unsigned", nil, `{"x":1}`},
			}
			if signed { // knowing the body is not enough without the payer's key
				observers = append(observers, struct {
					name string
					key  ed25519.PrivateKey
					body string
				}{"observer, same body", identity.GenerateKey(), body})
			}
			try := func(key ed25519.PrivateKey, body string, withNonce bool) resp {
				hdr := []string{HeaderPaymentProof, sig}
				if withNonce {
					hdr = append(hdr, HeaderPaymentNonce, n)
				}
				return h.call(key, "POST", "/v1/echo", body, hdr...)
			}
			for _, o := range observers {
				for _, withNonce := range []bool{true, false} {
					if r := try(o.key, o.body, withNonce); r.status != 402 || r.body["code"] != "payment_binding_mismatch" {
						t.Fatalf("%s before the payer (nonce header %v): %d %s", o.name, withNonce, r.status, r.raw)
					}
				}
			}
			if h.served.Load() != 0 {
				t.Fatal("an observer was served")
			}
			first := try(payer, body, true)
			if first.status != 200 || first.header.Get(HeaderPaymentReplay) != "" || !strings.Contains(first.raw, "payer's question") {
				t.Fatalf("payer after the observers: %d %s", first.status, first.raw)
			}
			for _, o := range observers {
				if r := try(o.key, o.body, false); r.status != 402 || r.body["code"] != "payment_binding_mismatch" || strings.Contains(r.raw, "payer's question") {
					t.Fatalf("%s after the payer: %d %s", o.name, r.status, r.raw)
				}
			}
			if r := try(payer, `{"other":"question"}`, true); r.status != 402 || r.body["code"] != "payment_binding_mismatch" {
				t.Fatalf("payer's replay with another body: %d %s", r.status, r.raw)
			}
			if r := try(payer, body, false); r.status != 200 || r.raw != first.raw || r.header.Get(HeaderPaymentReplay) != "true" {
				t.Fatalf("payer's replay: %d %s", r.status, r.raw)
			}
			if n := h.served.Load(); n != 1 {
				t.Fatalf("skill ran %d times", n)
			}
		})
	}
}

// countKeys counts the store's keys under prefix.
func countKeys(t *testing.T, db *store.DB, prefix string) int {
	t.Helper()
	n := 0
	err := db.View(func(tx *store.Txn) error {
		return tx.Scan([]byte(prefix), nil, func(_, _ []byte) (bool, error) { n++; return true, nil })
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestUnpaidCallsCostTheProviderNothing: a flood of unpaid calls and of
// refused proofs writes nothing to the store, and made-up proofs reach the
// chain at most a burst's worth of times per address per minute.
func TestUnpaidCallsCostTheProviderNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	n := h.challenge() // creates the nonce key, once
	before := countKeys(t, h.db, "x/")
	for i := range 200 {
		if r := h.call(nil, "POST", "/v1/echo", fmt.Sprintf(`{"i":%d}`, i)); r.status != 402 {
			t.Fatalf("unpaid call: %d", r.status)
		}
	}
	fake := func(i int) solana.Signature { return solana.Signature{byte(i), byte(i >> 8), 7} }
	rpcBefore := h.chain.Calls("getTransaction")
	for i := range 100 { // forged nonces fail their MAC before the chain is asked
		if r := h.withProof(fake(i), forge(n)); r.status != 402 {
			t.Fatalf("forged nonce: %d %s", r.status, r.raw)
		}
	}
	if got := h.chain.Calls("getTransaction") - rpcBefore; got != 0 {
		t.Fatalf("forged nonces cost %d RPC calls", got)
	}
	limited := 0
	for i := range 100 { // made-up signatures with a real nonce: rate limited
		switch r := h.withProof(fake(1000+i), n); {
		case r.status == 429 && r.body["code"] == "proof_rate_limited" && r.header.Get("Retry-After") != "":
			limited++
		case r.status != 402 || r.body["code"] != "payment_not_visible":
			t.Fatalf("made-up signature: %d %s", r.status, r.raw)
		}
	}
	if got := h.chain.Calls("getTransaction") - rpcBefore; got != proofCheckBurst || limited != 100-proofCheckBurst {
		t.Fatalf("100 made-up proofs: %d RPC calls, %d limited; want %d calls", got, limited, proofCheckBurst)
	}
	if after := countKeys(t, h.db, "x/"); after != before {
		t.Fatalf("unpaid calls and refused proofs left %d keys in the store", after-before)
	}
	// The bucket refills with time: a payer is checked again.
	h.clock.Advance(time.Minute)
	sig := h.pay(NewWallet(), testPrice, n)
	if r := h.withProof(sig, n); r.status != 200 {
		t.Fatalf("payer after the flood: %d %s", r.status, r.raw)
	}
}

// forge changes the last character of a nonce (part of its MAC).
func forge(nonce string) string {
	c := "A"
	if nonce[len(nonce)-1] == 'A' {
		c = "B"
	}
	return nonce[:len(nonce)-1] + c
}
