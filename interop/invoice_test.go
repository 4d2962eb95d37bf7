package interop

import (
	"context"
	"crypto/ed25519"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/store"
)

// watched lists the invoices the check goes through.
func (h *harness) watched() []string {
	h.t.Helper()
	var nonces []string
	prefix := store.Key("x", "w", "")
	err := h.db.View(func(tx *store.Txn) error {
		return tx.Scan(prefix, nil, func(k, _ []byte) (bool, error) {
			nonces = append(nonces, string(k[len(prefix):]))
			return true, nil
		})
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return nonces
}

// onCredit calls echo as key and returns the invoice it was served on.
func (h *harness) onCredit(key ed25519.PrivateKey) string {
	h.t.Helper()
	r := h.call(key, "POST", "/v1/echo", `{}`)
	if r.status != 200 || r.body["paid_by"] != "postpay" {
		h.t.Fatalf("post-pay call: %d %s", r.status, r.raw)
	}
	return r.header.Get(HeaderPaymentNonce)
}

// checkInvoices runs an invoice check, as the poll loop does.
func (h *harness) checkInvoices() {
	h.t.Helper()
	if err := h.agent.paywall.checkInvoices(context.Background()); err != nil {
		h.t.Fatal(err)
	}
}

// TestInvoiceRetention: the invoice check goes through the invoices it
// has work for only; a settled invoice and a reported default leave it
// and are removed InvoiceRetention later, the default's open mark with it
// (its late payment is then unmatched, and its caller may be served on
// credit again), while an invoice unpaid and not yet reported is never
// removed, also across a restart.
func TestInvoiceRetention(t *testing.T) {
	t.Parallel()
	h, trusted := newManualPostpayHarness(t)
	ctx := context.Background()
	other := identity.GenerateKey()
	h.reg.agents[identity.EncodePublicKey(other.Public().(ed25519.PublicKey))] = "other-1"

	// Settled: paid, reported, then retired by the check.
	settled := h.onCredit(trusted)
	if w := h.watched(); !slices.Equal(w, []string{settled}) {
		t.Fatalf("watched %v, want the invoice just served", w)
	}
	h.pay(NewWallet(), testPrice, settled)
	if err := h.agent.paywall.PollNow(ctx); err != nil {
		t.Fatal(err)
	}
	h.checkInvoices()
	// Defaulted: reported when overdue, then retired.
	defaulted := h.onCredit(trusted)
	h.clock.Advance(2 * time.Hour)
	h.checkInvoices()
	h.checkInvoices()
	if w := h.watched(); len(w) != 0 {
		t.Fatalf("watched %v after settlement and default; want none", w)
	}
	if r := h.call(trusted, "POST", "/v1/echo", `{}`); r.status != 402 {
		t.Fatalf("the defaulter on credit within the retention: %d", r.status)
	}
	// Owed: overdue, but its report cannot be filed before the others'
	// retention ends.
	owed := h.onCredit(other)
	h.reg.setFail(true)
	h.clock.Advance(DefaultInvoiceRetention + sweepGrace)
	if err := h.agent.paywall.PollNow(ctx); err != nil {
		t.Fatal(err)
	}
	h.checkInvoices()
	if n := countKeys(t, h.db, "x/i/"); n != 1 || !slices.Equal(h.watched(), []string{owed}) {
		t.Fatalf("%d invoices kept, watched %v; want only the owed one", n, h.watched())
	}
	if n := countKeys(t, h.db, retiredQueue); n != 0 {
		t.Fatalf("%d retired invoices left after their retention", n)
	}
	sig := h.pay(NewWallet(), testPrice, defaulted)
	if err := h.agent.paywall.PollNow(ctx); err != nil {
		t.Fatal(err)
	}
	if d, err := getJSON[depositRec](h.db, []byte("x/d/"+sig.String())); err != nil || d.Outcome != outcomeUnmatched {
		t.Fatalf("payment of a removed invoice: %+v %v", d, err)
	}
	h.onCredit(trusted) // the default's open mark went with it

	// The owed invoice is still reported after a restart.
	pc := h.agent.paywall.Config()
	h.agent.Close()
	h.start(&pc)
	h.reg.setFail(false)
	h.checkInvoices()
	reps := h.reg.Reports()
	if len(reps) != 3 || !reps[0].Success || !reps[1].Disputed || !reps[2].Disputed {
		t.Fatalf("reports %+v; want the settlement and two defaults", reps)
	}
}

// put writes raw records into the store, as another version (or a fault)
// left them.
func (h *harness) put(kv map[string]string) {
	h.t.Helper()
	err := h.db.Update(func(tx *store.Txn) error {
		for k, v := range kv {
			if err := tx.Set([]byte(k), []byte(v)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		h.t.Fatal(err)
	}
}

// TestASweepFailureIsNotFatal: records the sweep cannot read stay in their
// queue and are logged, while the rest of the queue is swept and the poll
// loop goes on to the invoice check, which reports an overdue invoice.
func TestASweepFailureIsNotFatal(t *testing.T) {
	t.Parallel()
	h, trusted := newPostpayHarness(t)
	caller := identity.GenerateKey()
	apiKey := h.topup(caller, NewWallet()).body["api_key"].(string)
	owed := h.onCredit(trusted)
	pc := h.agent.paywall.Config()
	h.agent.Close()

	past := h.clock.Now().Add(-time.Hour).UnixNano()
	bad := hashKey("tk_unreadable")
	h.put(map[string]string{
		"x/k/" + bad: "{not json",
		string(queueKey(unfundedQueue, past, unfundedID(bad, "198.51.100.1"))): "",
		"x/i/inv_unreadable": "{not json",
		string(queueKey(retiredQueue, past, "inv_unreadable")): "",
	})
	h.clock.Advance(DefaultUnfundedAccountTTL + sweepGrace) // the account expired, the invoice is overdue
	reported := make(chan struct{}, 1)
	h.reg.beforeReport = func() { reported <- struct{}{} }
	h.start(&pc) // its poll loop polls, sweeps and checks the invoices at once
	select {
	case <-reported:
	case <-time.After(10 * time.Second):
		t.Fatal("the poll loop's invoice check did not report the overdue invoice")
	}
	// The check runs after the poll: the sweep is over.
	if r := h.call(caller, "GET", "/v1/balance", "", HeaderAPIKey, apiKey); r.status != 401 {
		t.Fatalf("an account never funded, behind an unreadable one in the queue: %d %s", r.status, r.raw)
	}
	if n, m := countKeys(t, h.db, unfundedQueue), countKeys(t, h.db, retiredQueue); n != 1 || m != 1 {
		t.Fatalf("%d and %d entries left in the queues; want the unreadable ones", n, m)
	}
	if w := h.watched(); !slices.Equal(w, []string{owed}) {
		t.Fatalf("watched %v; want the invoice just reported", w)
	}
	if err := h.agent.paywall.PollNow(context.Background()); err != nil {
		t.Fatalf("a poll whose sweep fails: %v", err)
	}
}

// TestRecordsMissingUnderTheirIndex: an index entry whose record is gone
// (left by another version) is dropped, and holds up neither the invoice
// check nor the sweep; an invoice no longer in the index is not retired.
func TestRecordsMissingUnderTheirIndex(t *testing.T) {
	t.Parallel()
	h, trusted := newManualPostpayHarness(t)
	owed := h.onCredit(trusted)
	h.put(map[string]string{
		"x/w/inv_orphan": "",
		string(queueKey(retiredQueue, h.clock.Now().Add(-time.Hour).UnixNano(), "inv_gone")): "",
	})
	h.clock.Advance(2 * time.Hour)
	h.checkInvoices()
	if reps := h.reg.Reports(); len(reps) != 1 || !reps[0].Disputed {
		t.Fatalf("reports %+v; want the overdue invoice's default", reps)
	}
	if w := h.watched(); !slices.Equal(w, []string{owed}) {
		t.Fatalf("watched %v; want the reported invoice only, until the next check", w)
	}
	if err := h.agent.paywall.PollNow(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := countKeys(t, h.db, retiredQueue); n != 0 {
		t.Fatalf("%d entries left in the removal queue; want the missing invoice's gone", n)
	}
	if err := h.agent.paywall.ledger.retireInvoice("inv_orphan", h.clock.Now()); err != nil {
		t.Fatal(err)
	}
	h.checkInvoices() // retires the reported invoice
	if n := countKeys(t, h.db, retiredQueue); n != 1 || len(h.watched()) != 0 {
		t.Fatalf("%d invoices retired, watched %v; want the reported one only", n, h.watched())
	}
}

// TestARefusedReportIsFinal: a settlement or default report the registry
// refuses for good (a 4xx other than 429) is not filed again, and its
// invoice is retired like a reported one; one refused for now (429, 5xx)
// is filed again at a later check.
func TestARefusedReportIsFinal(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		status int
		final  bool
	}{{403, true}, {404, true}, {429, false}, {503, false}} {
		t.Run(strconv.Itoa(c.status), func(t *testing.T) {
			h, payer := newManualPostpayHarness(t)
			defaulter := identity.GenerateKey()
			h.reg.agents[identity.EncodePublicKey(defaulter.Public().(ed25519.PublicKey))] = "defaulter-1"
			paid, owed := h.onCredit(payer), h.onCredit(defaulter)
			h.reg.setRefuse(c.status)
			h.pay(NewWallet(), testPrice, paid)
			h.clock.Advance(2 * time.Hour)
			if err := h.agent.paywall.PollNow(context.Background()); err != nil { // files the settlement
				t.Fatal(err)
			}
			h.checkInvoices() // files the default
			h.checkInvoices() // retires what is done with
			if c.final {
				if w, n := h.watched(), countKeys(t, h.db, retiredQueue); len(w) != 0 || n != 2 {
					t.Fatalf("watched %v, %d retired; want both retired", w, n)
				}
				for _, nonce := range []string{paid, owed} {
					if inv, err := getJSON[invoiceRec](h.db, []byte("x/i/"+nonce)); err != nil || !inv.Refused {
						t.Fatalf("invoice %s: %+v %v; want its report marked refused", nonce, inv, err)
					}
				}
				return
			}
			if w := h.watched(); len(w) != 2 {
				t.Fatalf("watched %v; want both until their reports are filed", w)
			}
			h.reg.setRefuse(0)
			h.checkInvoices()
			if reps := h.reg.Reports(); len(reps) != 2 {
				t.Fatalf("reports %+v; want the settlement and the default, filed once taken", reps)
			}
		})
	}
}
