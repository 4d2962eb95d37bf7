package interop

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
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

func TestFreeTierByKeyAndIP(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(pc *PaymentConfig) { pc.FreeCallsPerDay = 2 })
	a, b := identity.GenerateKey(), identity.GenerateKey()
	for i := range 2 {
		if r := h.call(a, "POST", "/v1/echo", `{}`); r.status != 200 || r.body["paid_by"] != "free" {
			t.Fatalf("free call %d: %d %s", i, r.status, r.raw)
		}
	}
	if r := h.call(a, "POST", "/v1/echo", `{}`); r.status != 402 {
		t.Fatalf("third call of the day: %d %s", r.status, r.raw)
	}
	// Another key from the same IP: the IP's allowance is used up too.
	if r := h.call(b, "POST", "/v1/echo", `{}`); r.status != 402 {
		t.Fatalf("second key, same IP: %d %s", r.status, r.raw)
	}
	// A free call answered with a 5xx is given back, to key and IP.
	h.clock.Advance(25 * time.Hour)
	h.fail.Store(true)
	if r := h.call(a, "POST", "/v1/echo", `{}`); r.status != 500 {
		t.Fatalf("failing free call: %d %s", r.status, r.raw)
	}
	h.fail.Store(false)
	for i := range 2 {
		if r := h.call(a, "POST", "/v1/echo", `{}`); r.status != 200 || r.body["paid_by"] != "free" {
			t.Fatalf("free call %d after a failed one: %d %s", i, r.status, r.raw)
		}
	}
	// Unsigned callers have no free tier.
	h.clock.Advance(25 * time.Hour)
	if r := h.call(nil, "POST", "/v1/echo", `{}`); r.status != 402 {
		t.Fatalf("unsigned: %d", r.status)
	}
	// After 24 h the allowance is back.
	if r := h.call(b, "POST", "/v1/echo", `{}`); r.status != 200 {
		t.Fatalf("next day: %d %s", r.status, r.raw)
	}
	// A replayed signed request is refused, not counted.
	req := func() *http.Request {
		r, _ := http.NewRequest("POST", h.srv.URL+"/v1/echo", nil)
		return r
	}
	r1 := req()
	identity.SignRequest(r1, a, nil, h.clock.Now())
	r2 := req()
	r2.Header = r1.Header.Clone()
	http.DefaultClient.Do(r1)
	res, err := http.DefaultClient.Do(r2)
	if err != nil || res.StatusCode != 401 {
		t.Fatalf("replayed Mesh-Sig: %v %v", res.StatusCode, err)
	}
}

func TestDepositsBalanceAndPoller(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	caller, payer := identity.GenerateKey(), NewWallet()
	h.chain.Fund(payer.PublicKey(), solana.LAMPORTS_PER_SOL)

	r := h.call(caller, "POST", "/v1/topup", `{"payer_address":"`+payer.Address()+`"}`)
	if r.status != 201 {
		t.Fatalf("topup: %d %s", r.status, r.raw)
	}
	key := r.body["api_key"].(string)
	link, err := ParsePayLink(r.body["chainPayUrl"].(string))
	if err != nil || link.Memo != key || link.Address != h.provider.Address() || link.Lamports != 100_000 || key[:3] != "tk_" {
		t.Fatalf("topup answer %s: %+v %v", r.raw, link, err)
	}
	// Nothing deposited yet: the key falls back to 402.
	if r := h.call(caller, "POST", "/v1/echo", `{}`, HeaderAPIKey, key); r.status != 402 || r.body["code"] != "balance_insufficient" {
		t.Fatalf("empty balance: %d %s", r.status, r.raw)
	}
	// Deposit 12,345 lamports with the key as memo; a stranger's deposit
	// with the same memo is not credited to it.
	sig := h.chain.Land(h.payTx(payer, h.provider.PublicKey(), 12_345, key), soltest.Land{})
	stranger := NewWallet()
	h.chain.Fund(stranger.PublicKey(), solana.LAMPORTS_PER_SOL)
	h.chain.Land(h.payTx(stranger, h.provider.PublicKey(), 99_999, key), soltest.Land{})
	if err := h.agent.paywall.PollNow(context.Background()); err != nil {
		t.Fatal(err)
	}
	balance := func() float64 { return h.balance(caller, key) }
	if got := balance(); got != 12_345 {
		t.Fatalf("balance after deposit = %v, want 12345", got)
	}
	// Reading the balance needs the owner's Mesh-Sig too: the key alone
	// is public in the memo.
	for name, k := range map[string]ed25519.PrivateKey{"unsigned": nil, "someone else": identity.GenerateKey()} {
		if r := h.call(k, "GET", "/v1/balance", "", HeaderAPIKey, key); r.status != 401 || strings.Contains(r.raw, "lamports") {
			t.Fatalf("balance read by %s: %d %s", name, r.status, r.raw)
		}
	}
	// A key this agent never issued is a client mistake: 401, not 402.
	if r := h.call(caller, "POST", "/v1/echo", `{}`, HeaderAPIKey, "tk_unknown"); r.status != 401 || r.body["code"] != "api_key_unknown" {
		t.Fatalf("unknown api_key: %d %s", r.status, r.raw)
	}
	// Polling again, and after a restart on the same store, credits nothing twice.
	h.agent.paywall.PollNow(context.Background())
	h.agent.Close()
	h.start(testPayment(h.chain, h.provider.Address()))
	if err := h.agent.paywall.PollNow(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := balance(); got != 12_345 {
		t.Fatalf("balance after re-poll and restart = %v", got)
	}
	// A call debits one unit and says so.
	r = h.call(caller, "POST", "/v1/echo", `{}`, HeaderAPIKey, key)
	if r.status != 200 || r.body["paid_by"] != "balance" || r.header.Get(HeaderDebitedLamports) != strconv.Itoa(testPrice) ||
		r.header.Get(HeaderBalanceRemaining) != strconv.Itoa(12_345-testPrice) {
		t.Fatalf("balance call: %d %v %s", r.status, r.header, r.raw)
	}
	// The key is useless without the owner's Mesh-Sig (the memo is public).
	if r := h.call(identity.GenerateKey(), "POST", "/v1/echo", `{}`, HeaderAPIKey, key); r.status != 401 || r.body["code"] != "api_key_owner" {
		t.Fatalf("someone else's key: %d %s", r.status, r.raw)
	}
	// A failing skill refunds.
	h.fail.Store(true)
	r = h.call(caller, "POST", "/v1/echo", `{}`, HeaderAPIKey, key)
	h.fail.Store(false)
	if r.status != 500 || r.header.Get(HeaderDebitedLamports) != "0" || balance() != 12_345-testPrice {
		t.Fatalf("failed call charged: %d %v", r.status, r.header)
	}
	if ok, _ := h.agent.paywall.ledger.handled(sig.String()); !ok {
		t.Fatal("deposit signature not recorded")
	}
}

func TestPollerRetriesAfterRPCFailure(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(pc *PaymentConfig) { pc.CreditDivisor = 1000 })
	caller, payer := identity.GenerateKey(), NewWallet()
	h.chain.Fund(payer.PublicKey(), solana.LAMPORTS_PER_SOL)
	key := h.call(caller, "POST", "/v1/topup", `{"payer_address":"`+payer.Address()+`"}`).body["api_key"].(string)
	h.chain.Land(h.payTx(payer, h.provider.PublicKey(), 2_500, key), soltest.Land{})
	h.chain.Fail("getTransaction", soltest.RPCError)
	if err := h.agent.paywall.PollNow(context.Background()); !errors.Is(err, ErrRPC) {
		t.Fatalf("poll with a failing RPC: %v", err)
	}
	h.chain.Heal()
	h.chain.Land(h.payTx(payer, h.provider.PublicKey(), 600, key), soltest.Land{})
	if err := h.agent.paywall.PollNow(context.Background()); err != nil {
		t.Fatal(err)
	}
	r := h.call(caller, "GET", "/v1/balance", "", HeaderAPIKey, key)
	// 3,100 lamports at 1,000 per credit: 3 credits, 100 kept toward the next.
	if r.body["credits"] != 3.0 || r.body["lamports"] != 3000.0 || r.body["deposited"] != 3100.0 {
		t.Fatalf("balance %s", r.raw)
	}
}

// waitForOpenInvoice waits until the caller pub has an open invoice.
func (h *harness) waitForOpenInvoice(pub ed25519.PublicKey) {
	h.t.Helper()
	testkit.Eventually(h.t, 20*time.Second, func() bool {
		open, _ := h.agent.paywall.ledger.openInvoice(hex.EncodeToString(pub))
		return open
	}, "an open invoice")

}

// callOnCredit starts a post-pay call by key to a skill that takes slow,
// and returns its answer to come once its invoice is open.
func (h *harness) callOnCredit(key ed25519.PrivateKey, slow time.Duration) <-chan resp {
	h.t.Helper()
	h.slow.Store(int64(slow))
	answered := make(chan resp, 1)
	go func() { answered <- h.call(key, "POST", "/v1/echo", `{}`) }()
	h.waitForOpenInvoice(key.Public().(ed25519.PublicKey))
	return answered
}

// newPostpayHarness is an agent that serves callers scoring 0.8 or more
// on credit, invoices due in an hour, and a caller whose agent scores 0.9.
func newPostpayHarness(t *testing.T) (*harness, ed25519.PrivateKey) {
	t.Helper()
	return postpayHarness(t, newHarness)
}

// newManualPostpayHarness is newPostpayHarness whose agent runs no poll
// loop.
func newManualPostpayHarness(t *testing.T) (*harness, ed25519.PrivateKey) {
	t.Helper()
	return postpayHarness(t, newManualHarness)
}

func postpayHarness(t *testing.T, mk func(*testing.T, ...func(*PaymentConfig)) *harness) (*harness, ed25519.PrivateKey) {
	t.Helper()
	min, score := 0.8, 0.9
	h := mk(t, func(pc *PaymentConfig) { pc.PostpayMinReputation = &min; pc.PostpayDue = time.Hour })
	trusted := identity.GenerateKey()
	h.reg.score = &score
	h.reg.agents[identity.EncodePublicKey(trusted.Public().(ed25519.PublicKey))] = "trusted-1"
	return h, trusted
}

func TestPostpay(t *testing.T) {
	t.Parallel()
	h, trusted := newPostpayHarness(t)
	shady := identity.GenerateKey()

	if r := h.call(shady, "POST", "/v1/echo", `{}`); r.status != 402 {
		t.Fatalf("unregistered caller got post-pay: %d", r.status)
	}
	r := h.call(trusted, "POST", "/v1/echo", `{}`)
	if r.status != 200 || r.body["paid_by"] != "postpay" || r.header.Get(HeaderPostpayDue) == "" {
		t.Fatalf("post-pay: %d %v %s", r.status, r.header, r.raw)
	}
	invoice := r.header.Get(HeaderPaymentNonce)
	// One open invoice at a time.
	if r := h.call(trusted, "POST", "/v1/echo", `{}`); r.status != 402 {
		t.Fatalf("second post-pay with an open invoice: %d", r.status)
	}
	// Paying the invoice settles it at the next poll and is reported.
	payer := NewWallet()
	h.chain.Fund(payer.PublicKey(), solana.LAMPORTS_PER_SOL)
	h.chain.Land(h.payTx(payer, h.provider.PublicKey(), testPrice, invoice), soltest.Land{})
	if err := h.agent.paywall.PollNow(context.Background()); err != nil {
		t.Fatal(err)
	}
	if reps := h.reg.Reports(); len(reps) != 1 || !reps[0].Success || !reps[0].Paid || reps[0].Disputed || reps[0].LatencyMS != nil {
		t.Fatalf("reports after settlement: %+v", reps)
	}
	// Served again on credit; this time the caller never pays.
	if r := h.call(trusted, "POST", "/v1/echo", `{}`); r.status != 200 {
		t.Fatalf("post-pay after settling: %d %s", r.status, r.raw)
	}
	h.clock.Advance(2 * time.Hour)
	if err := h.agent.paywall.checkInvoices(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.agent.paywall.checkInvoices(context.Background()) // reported once only
	reps := h.reg.Reports()
	if len(reps) != 2 || reps[1].Success || !reps[1].Paid || !reps[1].Disputed || reps[1].LatencyMS != nil {
		t.Fatalf("reports after default: %+v", reps)
	}
	if r := h.call(trusted, "POST", "/v1/echo", `{}`); r.status != 402 {
		t.Fatalf("defaulter still on credit: %d", r.status)
	}
}

func TestClientPaysAndRefuses(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	c := payingClient(t, h, h.chain)
	card := h.card(c)
	if card.Payment == nil || card.Payment.Wallet != h.provider.Address() || len(card.Skills) != 2 {
		t.Fatalf("card %+v", card)
	}
	genesisCalls := h.chain.Calls("getGenesisHash")
	res, err := c.Call(ctx, card, "echo", []byte(`{"hello":"world"}`))
	if err != nil || res.Status != 200 || res.Lamports != testPrice || res.Signature == "" {
		t.Fatalf("paid call: %+v %v", res, err)
	}
	if got := h.chain.Balance(h.provider.PublicKey()); got != testPrice {
		t.Fatalf("provider balance %d", got)
	}
	// A free skill costs nothing.
	if res, err := c.Call(ctx, card, "ping", nil); err != nil || string(res.Body) != "\"pong\"\n" {
		t.Fatalf("free skill: %v %v", res, err)
	}
	// Over the cap, to another wallet, or without a wallet: refused, nothing paid.
	for name, edit := range map[string]func(*Client, *Card){
		"cap":       func(c *Client, _ *Card) { c.MaxLamports = testPrice - 1 },
		"payee":     func(_ *Client, k *Card) { k.Payment.Wallet = NewWallet().Address() },
		"network":   func(_ *Client, k *Card) { k.Payment.Network = NetworkMainnet },
		"no wallet": func(c *Client, _ *Card) { c.Wallet = nil },
	} {
		c2, card2 := *c, *card
		p := *card.Payment
		card2.Payment = &p
		edit(&c2, &card2)
		_, err := c2.Call(ctx, &card2, "echo", []byte(`{}`))
		var pe *PaymentError
		if !errors.As(err, &pe) || !errors.Is(err, ErrRefused) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if got := h.chain.Balance(h.provider.PublicKey()); got != testPrice {
		t.Fatalf("refused calls paid something: provider balance %d", got)
	}
	// Top up, deposit, poll, call with the api_key.
	top := h.deposit(c, card, 0)
	c.APIKey, c.Wallet = top.APIKey, nil
	res, err = c.Call(ctx, card, "echo", []byte(`{}`))
	if err != nil || res.Header.Get(HeaderDebitedLamports) != strconv.Itoa(testPrice) {
		t.Fatalf("call on balance: %+v %v", res, err)
	}
	if b, err := c.Balance(ctx, card, top.APIKey); err != nil || b.Lamports != top.Lamports-testPrice {
		t.Fatalf("balance %+v %v", b, err)
	}
	if n := h.chain.Calls("getGenesisHash") - genesisCalls; n != 1 {
		t.Fatalf("the client asked the RPC's genesis hash %d times for a payment and a deposit, want once", n)
	}
}

// deposit tops up through the client, pays the link, and lets the
// provider poll twice (the second poll must credit nothing).
func (h *harness) deposit(c *Client, card *Card, lamports uint64) *TopupResponse {
	h.t.Helper()
	ctx := context.Background()
	top, err := c.Topup(ctx, card, lamports)
	if err != nil {
		h.t.Fatal(err)
	}
	c.MaxLamports = top.Lamports
	if _, err := c.Deposit(ctx, card, top); err != nil {
		h.t.Fatal(err)
	}
	for range 2 {
		if err := h.agent.paywall.PollNow(ctx); err != nil {
			h.t.Fatal(err)
		}
	}
	return top
}

// TestPollerWorksOffABacklog: a backlog larger than one poll is read over
// several polls without skipping the oldest deposits, and new deposits
// that land meanwhile are credited once the backlog is done.
func TestPollerWorksOffABacklog(t *testing.T) { // not parallel: it shrinks the package's poll pages, which other tests' pollers read
	oldPage, oldPages := pollPage, maxPollPages
	pollPage, maxPollPages = 2, 2 // four signatures per poll
	t.Cleanup(func() { pollPage, maxPollPages = oldPage, oldPages })
	h := newHarness(t)
	caller, payer := identity.GenerateKey(), NewWallet()
	h.chain.Fund(payer.PublicKey(), solana.LAMPORTS_PER_SOL)
	key := h.call(caller, "POST", "/v1/topup", `{"payer_address":"`+payer.Address()+`"}`).body["api_key"].(string)
	for i := range 9 {
		h.chain.Land(h.payTx(payer, h.provider.PublicKey(), uint64(1000+i), key), soltest.Land{})
	}
	balance := func() float64 { return h.balance(caller, key) }
	want := 0.0
	for i := range 9 {
		want += float64(1000 + i)
	}
	for poll := 0; poll < 3; poll++ {
		if err := h.agent.paywall.PollNow(context.Background()); err != nil {
			t.Fatal(err)
		}
		if poll == 1 {
			h.chain.Land(h.payTx(payer, h.provider.PublicKey(), 50_000, key), soltest.Land{})
			want += 50_000
		}
	}
	if err := h.agent.paywall.PollNow(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := balance(); got != want {
		t.Fatalf("balance %v after working off the backlog, want %v", got, want)
	}
	for range 2 {
		h.agent.paywall.PollNow(context.Background())
	}
	if got := balance(); got != want {
		t.Fatalf("balance %v after more polls, want %v", got, want)
	}
}

func TestDepositOnlyAgentOffersNoChallenge(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(pc *PaymentConfig) { pc.Modes = []string{ModeDeposit} })
	r := h.call(nil, "POST", "/v1/echo", `{}`)
	if r.status != 402 || r.body["code"] != "payment_required" || r.header.Get(HeaderPaymentNonce) != "" || r.body["accepts"] != nil {
		t.Fatalf("deposit-only 402: %d %v %s", r.status, r.header, r.raw)
	}
	var card Card
	json.Unmarshal([]byte(h.call(nil, "GET", "/.well-known/agent.json", "").raw), &card)
	if slices.Contains(card.Protocols, ModeX402) || card.Payment.Deposit == nil {
		t.Fatalf("deposit-only card %+v", card)
	}
}

// TestPostpayOneOpenInvoiceUnderConcurrency: many concurrent calls from a
// trusted caller get one delivery on credit between them; the rest are
// asked to pre-pay. A call that fails with a 5xx releases its invoice.
func TestPostpayOneOpenInvoiceUnderConcurrency(t *testing.T) {
	t.Parallel()
	h, trusted := newPostpayHarness(t)

	h.fail.Store(true)
	if r := h.call(trusted, "POST", "/v1/echo", `{}`); r.status != 500 {
		t.Fatalf("failing skill: %d %s", r.status, r.raw)
	}
	h.fail.Store(false)

	// A slow skill keeps every call inside the check-serve-record window
	// a racy reservation would have; the answer must not depend on it.
	h.slow.Store(int64(100 * time.Millisecond))
	const calls = 20
	statuses := make(chan int, calls)
	var wg sync.WaitGroup
	for range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses <- h.call(trusted, "POST", "/v1/echo", `{}`).status
		}()
	}
	wg.Wait()
	close(statuses)
	count := map[int]int{}
	for s := range statuses {
		count[s]++
	}
	if count[200] != 1 || count[402] != calls-1 {
		t.Fatalf("%d concurrent post-pay calls answered %v; want one 200 and the rest 402", calls, count)
	}
	if n := h.served.Load(); n != 1 {
		t.Fatalf("skill ran %d times on credit", n)
	}
}

// TestPostpayUnansweredInvoiceIsDropped: an invoice reserved for a call
// that was never answered (the provider stopped mid-call) is dropped when
// due, without a report against the caller, who may post-pay again.
func TestPostpayUnansweredInvoiceIsDropped(t *testing.T) {
	t.Parallel()
	h, trusted := newPostpayHarness(t)
	pub := trusted.Public().(ed25519.PublicKey)
	inv := invoiceRec{Caller: identity.EncodePublicKey(pub), AgentID: "trusted-1", Skill: "echo", Lamports: testPrice,
		Due: h.clock.Now().Add(time.Hour).UnixNano(), Pending: true}
	if ok, err := h.agent.paywall.ledger.reserveInvoice(hex.EncodeToString(pub), "inv_crashed", inv); !ok || err != nil {
		t.Fatalf("reserve: %v %v", ok, err)
	}
	if r := h.call(trusted, "POST", "/v1/echo", `{}`); r.status != 402 {
		t.Fatalf("with a reserved invoice: %d", r.status)
	}
	h.clock.Advance(2 * time.Hour)
	if err := h.agent.paywall.checkInvoices(context.Background()); err != nil {
		t.Fatal(err)
	}
	if reps := h.reg.Reports(); len(reps) != 0 {
		t.Fatalf("reported for a call never answered: %+v", reps)
	}
	if r := h.call(trusted, "POST", "/v1/echo", `{}`); r.status != 200 || r.body["paid_by"] != "postpay" {
		t.Fatalf("after the dropped invoice: %d %s", r.status, r.raw)
	}
}

// TestPostpayLongCallIsOwedFromItsAnswer: a call still running at its
// invoice's first due time is not dropped as never answered; the invoice
// it gets is due PostpayDue after the answer, and only then reported.
func TestPostpayLongCallIsOwedFromItsAnswer(t *testing.T) {
	t.Parallel()
	h, trusted := newPostpayHarness(t)
	answered := h.callOnCredit(trusted, 500*time.Millisecond)
	h.clock.Advance(2 * time.Hour) // the call runs past its first due time
	if err := h.agent.paywall.checkInvoices(context.Background()); err != nil {
		t.Fatal(err)
	}
	r := <-answered
	want := h.clock.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	if r.status != 200 || r.body["paid_by"] != "postpay" || r.header.Get(HeaderPostpayDue) != want {
		t.Fatalf("long post-pay call: %d due %q (want %s) %s", r.status, r.header.Get(HeaderPostpayDue), want, r.raw)
	}
	if r := h.call(trusted, "POST", "/v1/echo", `{}`); r.status != 402 {
		t.Fatalf("the long call's invoice was dropped: a second call got %d", r.status)
	}
	h.clock.Advance(30 * time.Minute)
	h.agent.paywall.checkInvoices(context.Background())
	if reps := h.reg.Reports(); len(reps) != 0 {
		t.Fatalf("reported before the invoice was due: %+v", reps)
	}
	h.clock.Advance(time.Hour)
	h.agent.paywall.checkInvoices(context.Background())
	if reps := h.reg.Reports(); len(reps) != 1 || !reps[0].Disputed {
		t.Fatalf("overdue invoice: reports %+v", reps)
	}
}

// TestPostpayCallAnsweredWhileInvoicesAreChecked: a long call answered
// while the overdue invoices are being gone through (another caller's
// default being reported) keeps its invoice, and is not reported before
// its own due time.
func TestPostpayCallAnsweredWhileInvoicesAreChecked(t *testing.T) {
	t.Parallel()
	h, trusted := newPostpayHarness(t)
	pub := trusted.Public().(ed25519.PublicKey)
	other := identity.GenerateKey().Public().(ed25519.PublicKey)
	h.reg.agents[identity.EncodePublicKey(other)] = "other-1"
	// Another caller's delivered invoice, overdue first: "inv_--" sorts
	// before every random nonce, so it is reported first.
	inv := invoiceRec{Caller: identity.EncodePublicKey(other), AgentID: "other-1", Skill: "echo", Lamports: testPrice,
		Due: h.clock.Now().Add(time.Minute).UnixNano()}
	if ok, err := h.agent.paywall.ledger.reserveInvoice(hex.EncodeToString(other), "inv_--first", inv); !ok || err != nil {
		t.Fatalf("reserve: %v %v", ok, err)
	}
	answered := h.callOnCredit(trusted, 300*time.Millisecond)
	h.clock.Advance(2 * time.Hour)
	var r resp
	h.reg.beforeReport = func() { r, h.reg.beforeReport = <-answered, nil } // the call ends meanwhile
	if err := h.agent.paywall.checkInvoices(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r.status != 200 || r.header.Get(HeaderPostpayDue) == "" {
		t.Fatalf("the long call: %d %s", r.status, r.raw)
	}
	if open, _ := h.agent.paywall.ledger.openInvoice(hex.EncodeToString(pub)); !open {
		t.Fatal("the answered call's invoice was dropped: the caller was served for nothing")
	}
	if reps := h.reg.Reports(); len(reps) != 1 {
		t.Fatalf("reports %+v, want only the other caller's default", reps)
	}
}

// TestPollerFirstStartSkipsHistory: on its first start the agent does not
// read the wallet's history (nothing in it can be credited); deposits made
// afterwards, also while the agent is down, are credited.
func TestPollerFirstStartSkipsHistory(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.agent.Close()
	h.db = storetest.DB(t) // a first start, on a wallet with a history
	old := NewWallet()
	for i := range 30 {
		h.pay(old, uint64(1000+i), "tk_from_before")
	}
	h.start(testPayment(h.chain, h.provider.Address()))
	reads := h.chain.Calls("getTransaction")
	if err := h.agent.paywall.PollNow(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := h.chain.Calls("getTransaction") - reads; n != 0 {
		t.Fatalf("the first start read %d old transactions", n)
	}
	caller, payer := identity.GenerateKey(), NewWallet()
	key := h.call(caller, "POST", "/v1/topup", `{"payer_address":"`+payer.Address()+`"}`).body["api_key"].(string)
	h.pay(payer, 2_000, key)
	if err := h.agent.paywall.PollNow(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A deposit landed while the agent is down is read at the next start.
	h.agent.Close()
	h.pay(payer, 3_000, key)
	h.start(testPayment(h.chain, h.provider.Address()))
	if err := h.agent.paywall.PollNow(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := h.balance(caller, key); got != 5_000 {
		t.Fatalf("balance %v, want 5000", got)
	}
	if n := h.chain.Calls("getTransaction") - reads; n != 2 {
		t.Fatalf("%d transactions read; want the 2 deposits", n)
	}
}

// TestPostpaySettlementReportRetried: the report that a caller paid its
// invoice, when the registry cannot take it, is filed at a later invoice
// check, once.
func TestPostpaySettlementReportRetried(t *testing.T) {
	t.Parallel()
	h, trusted := newPostpayHarness(t)
	r := h.call(trusted, "POST", "/v1/echo", `{}`)
	if r.status != 200 {
		t.Fatalf("post-pay: %d %s", r.status, r.raw)
	}
	payer := NewWallet()
	h.chain.Fund(payer.PublicKey(), solana.LAMPORTS_PER_SOL)
	h.chain.Land(h.payTx(payer, h.provider.PublicKey(), testPrice, r.header.Get(HeaderPaymentNonce)), soltest.Land{})
	h.reg.setFail(true)
	ctx := context.Background()
	if err := h.agent.paywall.PollNow(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h.agent.paywall.checkInvoices(ctx); err != nil {
		t.Fatal(err)
	}
	if reps := h.reg.Reports(); len(reps) != 0 {
		t.Fatalf("reports while the registry fails: %+v", reps)
	}
	h.reg.setFail(false)
	for range 2 {
		if err := h.agent.paywall.checkInvoices(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if reps := h.reg.Reports(); len(reps) != 1 || !reps[0].Success || !reps[0].Paid || reps[0].Disputed {
		t.Fatalf("reports once the registry is back: %+v", reps)
	}
	if r := h.call(trusted, "POST", "/v1/echo", `{}`); r.status != 200 {
		t.Fatalf("the paid caller is not on credit again: %d %s", r.status, r.raw)
	}
}

// TestPostpayAnswerWithheldWhenInvoiceLost: when the provider cannot
// record that a post-pay call was answered (here the invoice record is
// gone meanwhile), the caller gets 503 and owes nothing, rather than an
// answer nobody would ever bill.
func TestPostpayAnswerWithheldWhenInvoiceLost(t *testing.T) {
	t.Parallel()
	h, trusted := newPostpayHarness(t)
	pub := trusted.Public().(ed25519.PublicKey)
	answered := h.callOnCredit(trusted, 200*time.Millisecond)
	err := h.agent.paywall.ledger.update(func(tx *store.Txn) error {
		return tx.Scan(store.Key("x", "i", ""), nil, func(k, _ []byte) (bool, error) {
			return true, tx.Delete(append([]byte(nil), k...))
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	r := <-answered
	if r.status != 503 || r.body["code"] != "unavailable" || r.body["echo"] != nil {
		t.Fatalf("answer with no invoice recorded: %d %s", r.status, r.raw)
	}
	if open, _ := h.agent.paywall.ledger.openInvoice(hex.EncodeToString(pub)); open {
		t.Fatal("the caller still has an open invoice for a withheld answer")
	}
}

// TestConcurrentInvoiceChecks: checks running at once (the poller's and
// another) report an overdue invoice once and drop an unanswered one
// without failing.
func TestConcurrentInvoiceChecks(t *testing.T) {
	t.Parallel()
	h, trusted := newPostpayHarness(t)
	pub := trusted.Public().(ed25519.PublicKey)
	other := identity.GenerateKey().Public().(ed25519.PublicKey)
	due := h.clock.Now().Add(time.Minute).UnixNano()
	for _, c := range []struct {
		pub     ed25519.PublicKey
		nonce   string
		pending bool
	}{{pub, "inv_delivered", false}, {other, "inv_unanswered", true}} {
		inv := invoiceRec{Caller: identity.EncodePublicKey(c.pub), AgentID: "trusted-1", Skill: "echo", Lamports: testPrice, Due: due, Pending: c.pending}
		if ok, err := h.agent.paywall.ledger.reserveInvoice(hex.EncodeToString(c.pub), c.nonce, inv); !ok || err != nil {
			t.Fatalf("reserve %s: %v %v", c.nonce, ok, err)
		}
	}
	h.clock.Advance(time.Hour)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if err := h.agent.paywall.checkInvoices(context.Background()); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if reps := h.reg.Reports(); len(reps) != 1 || !reps[0].Disputed {
		t.Fatalf("reports: %+v", reps)
	}
}

// TestNoDefaultWhileTheWalletIsBehind: an overdue invoice is not reported
// while the poller is still reading a backlog of the wallet's history (the
// payment may be in it); once it caught up, it is.
func TestNoDefaultWhileTheWalletIsBehind(t *testing.T) {
	t.Parallel()
	h, trusted := newPostpayHarness(t)
	pub := trusted.Public().(ed25519.PublicKey)
	inv := invoiceRec{Caller: identity.EncodePublicKey(pub), AgentID: "trusted-1", Skill: "echo", Lamports: testPrice,
		Due: h.clock.Now().Add(time.Minute).UnixNano()}
	l := h.agent.paywall.ledger
	if ok, err := l.reserveInvoice(hex.EncodeToString(pub), "inv_behind", inv); !ok || err != nil {
		t.Fatalf("reserve: %v %v", ok, err)
	}
	if err := l.setGap(&gapRec{Top: "top", Cursor: "cursor"}); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(time.Hour)
	if err := h.agent.paywall.checkInvoices(context.Background()); err != nil {
		t.Fatal(err)
	}
	if reps := h.reg.Reports(); len(reps) != 0 {
		t.Fatalf("reported a default while the wallet's backlog was unread: %+v", reps)
	}
	if err := l.setGap(nil); err != nil {
		t.Fatal(err)
	}
	if err := h.agent.paywall.checkInvoices(context.Background()); err != nil {
		t.Fatal(err)
	}
	if reps := h.reg.Reports(); len(reps) != 1 || !reps[0].Disputed {
		t.Fatalf("reports once caught up: %+v", reps)
	}
}

// TestClientPaysItsInvoice: a client served on credit pays the invoice
// within its cap, so the agent settles it and serves it on credit again;
// without a wallet, the answer names the invoice it owes.
func TestClientPaysItsInvoice(t *testing.T) {
	t.Parallel()
	h, trusted := newPostpayHarness(t)
	ctx := context.Background()
	c := payingClient(t, h, h.chain)
	c.Key = trusted
	card := h.card(c)
	res, err := c.Call(ctx, card, "echo", []byte(`{}`))
	if err != nil || res.Status != 200 || res.Signature == "" || res.Lamports != testPrice || res.Invoice != nil {
		t.Fatalf("post-pay call: %+v %v", res, err)
	}
	if err := h.agent.paywall.PollNow(ctx); err != nil {
		t.Fatal(err)
	}
	if reps := h.reg.Reports(); len(reps) != 1 || !reps[0].Paid || reps[0].Disputed {
		t.Fatalf("settlement reports: %+v", reps)
	}
	c.Wallet = nil
	res, err = c.Call(ctx, card, "echo", []byte(`{}`))
	if err != nil || res.Status != 200 || res.Signature != "" || res.Invoice == nil || res.Invoice.Lamports != testPrice || res.InvoiceReason == "" {
		t.Fatalf("served on credit again, no wallet: %+v %v", res, err)
	}
}

// TestClientKeepsTheProofOfAFailedSkill: when the skill fails after the
// client paid, the error names the payment, and a retry with it is served
// without paying again.
func TestClientKeepsTheProofOfAFailedSkill(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	c := payingClient(t, h, h.chain)
	card := h.card(c)
	h.fail.Store(true)
	_, err := c.Call(ctx, card, "echo", []byte(`{}`))
	var pe *PaymentError
	if !errors.As(err, &pe) || pe.Signature == "" || pe.Nonce == "" {
		t.Fatalf("a failed skill after paying: %v", err)
	}
	h.fail.Store(false)
	res, err := c.CallWithProof(ctx, card, "echo", []byte(`{}`), pe.Signature, pe.Nonce)
	if err != nil || res.Status != 200 {
		t.Fatalf("retry with the proof: %+v %v", res, err)
	}
	if got := h.chain.Balance(h.provider.PublicKey()); got != testPrice {
		t.Fatalf("provider balance %d, want one payment", got)
	}
}

// TestAnIPv6HostCountsOnce: every per-address count and limit (free tier,
// proof checks, accounts awaiting a deposit) takes an IPv6 address by its
// /64, so a host cannot escape it by rotating through its block; an IPv4
// address counts alone.
func TestAnIPv6HostCountsOnce(t *testing.T) {
	t.Parallel()
	// addrKey is httpx.AddrKey, tested there.
	h := newHarness(t, func(pc *PaymentConfig) { pc.FreeCallsPerDay = 1 })
	from := func(key ed25519.PrivateKey, ip string, hdr ...string) resp {
		return h.call(key, "POST", "/v1/echo", `{"x":1}`, append(hdr, httpx.HeaderForwardedFor, ip)...)
	}
	if r := from(identity.GenerateKey(), "2001:db8:1:2::1"); r.status != 200 || r.body["paid_by"] != "free" {
		t.Fatalf("free call: %d %s", r.status, r.raw)
	}
	if r := from(identity.GenerateKey(), "2001:db8:1:2::2"); r.status != 402 {
		t.Fatalf("another key from the same /64 after the free call: %d %s", r.status, r.raw)
	}
	if r := from(identity.GenerateKey(), "2001:db8:1:3::2"); r.status != 200 || r.body["paid_by"] != "free" {
		t.Fatalf("free call from another /64: %d %s", r.status, r.raw)
	}

	n := h.challenge()
	rpcBefore := h.chain.Calls("getTransaction")
	for i := range 50 { // made-up signatures, each from another address of one /64
		sig := solana.Signature{byte(i), 9, 9}
		r := from(nil, fmt.Sprintf("2001:db8:7:7::%x", i+1), HeaderPaymentProof, sig.String(), HeaderPaymentNonce, n)
		if r.status != 402 && r.status != 429 {
			t.Fatalf("made-up signature: %d %s", r.status, r.raw)
		}
	}
	if got := h.chain.Calls("getTransaction") - rpcBefore; got != proofCheckBurst {
		t.Fatalf("50 made-up proofs from one /64 cost %d RPC calls; want %d", got, proofCheckBurst)
	}
}
