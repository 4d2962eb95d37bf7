package interop

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gagliardetto/solana-go"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/httpx"
	"github.com/agentmesh/mesh/internal/storetest"
	"github.com/agentmesh/mesh/interop/soltest"
	"github.com/agentmesh/mesh/store"
)

// topup asks for an account as caller, paid from payer.
func (h *harness) topup(caller ed25519.PrivateKey, payer *Wallet) resp {
	h.t.Helper()
	return h.topupFrom(caller, payer, "")
}

// topupFrom is topup from client address from ("": the test's own).
func (h *harness) topupFrom(caller ed25519.PrivateKey, payer *Wallet, from string) resp {
	h.t.Helper()
	var hdr []string
	if from != "" {
		hdr = []string{httpx.HeaderForwardedFor, from}
	}
	return h.call(caller, "POST", "/v1/topup", `{"payer_address":"`+payer.Address()+`"}`, hdr...)
}

// wantRefused checks that r is a 429 with code, a detail that names the
// wait Retry-After gives, and Retry-After retry (seconds).
func wantRefused(t *testing.T, what string, r resp, code, retry string) {
	t.Helper()
	detail, _ := r.body["detail"].(string)
	if r.status != 429 || r.body["code"] != code || !strings.Contains(detail, "retry after "+retry+" s") ||
		r.header.Get("Retry-After") != retry || r.body["api_key"] != nil {
		t.Fatalf("%s: %d Retry-After %q %s; want 429 %s, Retry-After %s", what, r.status, r.header.Get("Retry-After"), r.raw, code, retry)
	}
}

// TestTopupBounds: top-ups are bounded per caller key (hourly), and in
// accounts awaiting their first deposit per client address (an IPv6 host
// by its /64) and in all; past a bound the answer is 429 with Retry-After,
// nothing is stored, and the refusal costs the caller none of its hourly
// top-ups. A place held by an address is freed when its account is funded
// (or expires), not by time passing.
func TestTopupBounds(t *testing.T) {
	t.Parallel()
	type step struct {
		caller int           // which caller key tops up
		from   string        // its client address ("": the test's own)
		after  time.Duration // time passed before the call
		fund   int           // before the call, the deposit to the fund-th account made (from 1) is credited
		poll   bool          // before the call, the wallet is polled (as it is to credit a deposit)
		code   string        // "" for 201
		retry  string        // Retry-After of a 429
	}
	// A full bound frees a place at the first poll after the first
	// account's expiry and sweepGrace.
	full := DefaultUnfundedAccountTTL + sweepGrace + DefaultPollInterval
	for _, c := range []struct {
		name  string
		edit  func(*PaymentConfig)
		steps []step
	}{
		{"per key", func(pc *PaymentConfig) { pc.TopupsPerHourPerKey = 2 }, []step{
			{caller: 0}, {caller: 0},
			{caller: 0, code: "topup_rate_limited", retry: "1800"}, // one top-up every 30 minutes
			{caller: 1},
			{caller: 0, after: 29 * time.Minute, code: "topup_rate_limited", retry: "60"},
			{caller: 0, after: time.Minute},
		}},
		{"per address", func(pc *PaymentConfig) { pc.MaxUnfundedPerIP = 2 }, []step{
			{caller: 0, from: "198.51.100.7"}, {caller: 1, from: "198.51.100.7"},
			{caller: 2, from: "198.51.100.7", code: "too_many_unfunded_from_address", retry: seconds(full)},
			{caller: 2, from: "198.51.100.8"},
			// Not an hourly bound: an hour later the address is still full.
			{caller: 3, from: "198.51.100.7", after: time.Hour, code: "too_many_unfunded_from_address", retry: seconds(full - time.Hour)},
			{caller: 3, from: "198.51.100.7", fund: 1},
			// One IPv6 host holds a /64: rotating within it does not help.
			{caller: 0, from: "2001:db8:1:2::1"}, {caller: 1, from: "2001:db8:1:2:aaaa::2"},
			{caller: 2, from: "2001:db8:1:2:ffff:1:2:3", code: "too_many_unfunded_from_address", retry: seconds(full)},
			{caller: 2, from: "2001:db8:1:3::1"},
			// The address's first account still unfunded expires: its place is freed.
			{caller: 2, from: "198.51.100.7", code: "too_many_unfunded_from_address", retry: seconds(full - time.Hour)},
			{caller: 2, from: "198.51.100.7", after: full - time.Hour, poll: true},
		}},
		{"in all", func(pc *PaymentConfig) { pc.MaxUnfundedAccounts = 2; pc.TopupsPerHourPerKey = 1 }, []step{
			{caller: 0, from: "198.51.100.1"}, {caller: 1, from: "198.51.100.2"},
			{caller: 2, from: "198.51.100.3", code: "too_many_unfunded_accounts", retry: seconds(full)},
			{caller: 2, from: "198.51.100.3", after: 30 * time.Minute, code: "too_many_unfunded_accounts", retry: seconds(full - 30*time.Minute)},
			// Caller 2's one top-up an hour was not spent by its refusals.
			{caller: 2, from: "198.51.100.3", fund: 1},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newManualHarness(t, c.edit)
			callers := []ed25519.PrivateKey{identity.GenerateKey(), identity.GenerateKey(), identity.GenerateKey(), identity.GenerateKey()}
			type account struct {
				key   string
				payer *Wallet
			}
			var made []account
			for i, s := range c.steps {
				h.clock.Advance(s.after)
				if s.fund > 0 {
					h.pay(made[s.fund-1].payer, 7_000, made[s.fund-1].key)
				}
				if s.fund > 0 || s.poll {
					if err := h.agent.paywall.PollNow(context.Background()); err != nil {
						t.Fatal(err)
					}
				}
				payer := NewWallet()
				before := countKeys(t, h.db, "x/")
				r := h.topupFrom(callers[s.caller], payer, s.from)
				if s.code != "" {
					wantRefused(t, "step "+strconv.Itoa(i), r, s.code, s.retry)
					if after := countKeys(t, h.db, "x/"); after != before+1 { // its Mesh-Sig nonce
						t.Fatalf("step %d: a refused top-up stored %d keys", i, after-before-1)
					}
				} else if r.status != 201 || r.body["api_key"] == nil {
					t.Fatalf("step %d: %d %s", i, r.status, r.raw)
				} else {
					made = append(made, account{r.body["api_key"].(string), payer})
				}
			}
		})
	}
}

func seconds(d time.Duration) string { return strconv.Itoa(int(d / time.Second)) }

// TestUnfundedAccountsExpire: an account never funded is removed
// UnfundedAccountTTL after its top-up, once the poller has read the wallet
// that far; a funded one stays, also one whose deposit landed in time but
// was read late; each frees its place among the accounts awaiting a
// deposit, and that count survives a restart.
func TestUnfundedAccountsExpire(t *testing.T) {
	t.Parallel()
	cfg := func(pc *PaymentConfig) { pc.MaxUnfundedAccounts = 2 }
	h := newManualHarness(t, cfg)
	ctx := context.Background()
	a, b, c := identity.GenerateKey(), identity.GenerateKey(), identity.GenerateKey()
	payA, payB, payC := NewWallet(), NewWallet(), NewWallet()
	keyA := h.topup(a, payA).body["api_key"].(string)
	r := h.topup(b, payB)
	keyB := r.body["api_key"].(string)
	if want := h.clock.Now().Add(DefaultUnfundedAccountTTL).UTC().Format(time.RFC3339); r.body["expires_at"] != want {
		t.Fatalf("expires_at %v, want %s", r.body["expires_at"], want)
	}
	wantRefused(t, "a third account awaiting a deposit", h.topup(c, payC), "too_many_unfunded_accounts",
		seconds(DefaultUnfundedAccountTTL+sweepGrace+DefaultPollInterval))

	// A's deposit funds it and frees its place.
	h.pay(payA, 12_345, keyA)
	if err := h.agent.paywall.PollNow(ctx); err != nil {
		t.Fatal(err)
	}
	keyC := h.topup(c, payC).body["api_key"].(string)

	// C pays in time, but the poller cannot read the transaction until
	// long after C's account expired: it is credited all the same.
	h.pay(payC, 7_000, keyC)
	h.chain.Fail("getTransaction", soltest.RPCError)
	h.clock.Advance(DefaultUnfundedAccountTTL + sweepGrace)
	if err := h.agent.paywall.PollNow(ctx); err == nil {
		t.Fatal("poll with a failing RPC succeeded")
	}
	h.chain.Heal()
	if err := h.agent.paywall.PollNow(ctx); err != nil {
		t.Fatal(err)
	}
	if got := h.balance(a, keyA); got != 12_345 {
		t.Fatalf("funded account A: balance %v", got)
	}
	if got := h.balance(c, keyC); got != 7_000 {
		t.Fatalf("account C, paid in time and read late: balance %v", got)
	}
	if r := h.call(b, "GET", "/v1/balance", "", HeaderAPIKey, keyB); r.status != 401 || r.body["code"] != "api_key_unknown" {
		t.Fatalf("account B, never funded, after its expiry: %d %s", r.status, r.raw)
	}
	// B's deposit now comes too late: recorded as unmatched, not credited.
	sig := h.pay(payB, 5_000, keyB)
	if err := h.agent.paywall.PollNow(ctx); err != nil {
		t.Fatal(err)
	}
	if d, err := getJSON[depositRec](h.db, []byte("x/d/"+sig.String())); err != nil || d.Outcome != outcomeUnmatched {
		t.Fatalf("deposit to a removed account: %+v %v", d, err)
	}

	// The count of accounts awaiting a deposit is in the store: after a
	// restart (the rate buckets start full again) the bound holds.
	for range 2 {
		if r := h.topup(identity.GenerateKey(), NewWallet()); r.status != 201 {
			t.Fatalf("top-up after the expiry: %d %s", r.status, r.raw)
		}
	}
	h.agent.Close()
	pc := testPayment(h.chain, h.provider.Address())
	cfg(pc)
	h.start(pc)
	if r := h.topup(identity.GenerateKey(), NewWallet()); r.status != 429 || r.body["code"] != "too_many_unfunded_accounts" {
		t.Fatalf("top-up past the bound after a restart: %d %s", r.status, r.raw)
	}
}

// TestOlderStoreIsIndexed: what a store holds from before the indexes is
// indexed at the next start, once: an account never funded then expires
// like a new one, a funded one stays; an invoice still owed is reported
// when overdue and a settled one is retired.
func TestOlderStoreIsIndexed(t *testing.T) {
	t.Parallel()
	h := newManualHarness(t)
	h.agent.Close()
	h.db = storetest.DB(t)
	owner := identity.GenerateKey()
	ownerB64 := identity.EncodePublicKey(owner.Public().(ed25519.PublicKey))
	due := h.clock.Now().Add(-time.Minute).UnixNano()
	older := map[string]any{
		"x/k/" + hashKey("tk_unfunded"): accountRec{Payer: NewWallet().Address(), Owner: ownerB64},
		"x/k/" + hashKey("tk_funded"):   accountRec{Payer: NewWallet().Address(), Owner: ownerB64, Credits: 500, Deposited: 500},
		"x/i/inv_owed":                  invoiceRec{Caller: ownerB64, AgentID: "owner-1", Skill: "echo", Lamports: testPrice, Due: due},
		"x/o/" + hex.EncodeToString(owner.Public().(ed25519.PublicKey)): "inv_owed",
		"x/i/inv_settled": invoiceRec{Caller: ownerB64, AgentID: "owner-1", Skill: "echo", Lamports: testPrice, Due: due, PaidSig: "sig"},
	}
	err := h.db.Update(func(tx *store.Txn) error {
		for k, v := range older {
			if nonce, ok := v.(string); ok {
				if err := tx.Set([]byte(k), []byte(nonce)); err != nil {
					return err
				}
			} else if err := tx.SetJSON([]byte(k), v); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 { // a second start indexes nothing again
		if i > 0 {
			h.agent.Close()
			h.clock.Advance(time.Minute)
		}
		h.start(testPayment(h.chain, h.provider.Address()))
		if n := countKeys(t, h.db, unfundedQueue); n != 1 {
			t.Fatalf("start %d: %d accounts queued, want the one never funded", i, n)
		}
		// One check reports the default, the next retires it (and the
		// settled invoice).
		h.checkInvoices()
		h.checkInvoices()
		if reps := h.reg.Reports(); len(reps) != 1 || !reps[0].Disputed {
			t.Fatalf("start %d: reports %+v; want the owed invoice's default, once", i, reps)
		}
		if w, n := h.watched(), countKeys(t, h.db, retiredQueue); len(w) != 0 || n != 2 {
			t.Fatalf("start %d: watched %v, %d retired; want both invoices retired, once", i, w, n)
		}
	}
	h.clock.Advance(DefaultUnfundedAccountTTL + sweepGrace)
	if err := h.agent.paywall.PollNow(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r := h.call(owner, "GET", "/v1/balance", "", HeaderAPIKey, "tk_unfunded"); r.status != 401 {
		t.Fatalf("older account never funded, after its time: %d %s", r.status, r.raw)
	}
	if got := h.balance(owner, "tk_funded"); got != 500 {
		t.Fatalf("older funded account: balance %v", got)
	}
	var n int
	if err := h.db.View(func(tx *store.Txn) (err error) { n, err = unfundedCount(tx); return err }); err != nil || n != 0 {
		t.Fatalf("%d accounts awaiting a deposit counted (%v), want 0", n, err)
	}
}

// TestOlderAccountsKeepTheirAge: an account awaiting its first deposit in
// a store from before the expiry queue expires UnfundedAccountTTL after
// its creation, but at least an hour after the upgrade: a flood of old
// top-ups is gone soon, and an account made just before keeps its time.
func TestOlderAccountsKeepTheirAge(t *testing.T) {
	t.Parallel()
	cfg := func(pc *PaymentConfig) { pc.MaxUnfundedAccounts = 2 }
	h := newManualHarness(t, cfg)
	h.agent.Close()
	h.db = storetest.DB(t) // an older version's store
	owner := identity.GenerateKey()
	ownerB64 := identity.EncodePublicKey(owner.Public().(ed25519.PublicKey))
	now := h.clock.Now()
	recent := now.Add(-time.Minute)
	err := h.db.Update(func(tx *store.Txn) error {
		for key, created := range map[string]time.Time{"tk_old": now.Add(-72 * time.Hour), "tk_recent": recent} {
			a := accountRec{Payer: NewWallet().Address(), Owner: ownerB64, Created: created.UnixNano()}
			if err := tx.SetJSON([]byte("x/k/"+hashKey(key)), a); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	pc := testPayment(h.chain, h.provider.Address())
	cfg(pc)
	h.start(pc)
	wantRefused(t, "a top-up while both older accounts await a deposit", h.topup(identity.GenerateKey(), NewWallet()),
		"too_many_unfunded_accounts", seconds(indexGrace+sweepGrace+DefaultPollInterval))

	h.clock.Advance(indexGrace + sweepGrace)
	if err := h.agent.paywall.PollNow(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r := h.call(owner, "GET", "/v1/balance", "", HeaderAPIKey, "tk_old"); r.status != 401 {
		t.Fatalf("the old account an hour after the upgrade: %d %s", r.status, r.raw)
	}
	h.balance(owner, "tk_recent")
	if r := h.topup(identity.GenerateKey(), NewWallet()); r.status != 201 {
		t.Fatalf("a top-up once the old account is gone: %d %s", r.status, r.raw)
	}

	h.clock.Advance(recent.Add(DefaultUnfundedAccountTTL + sweepGrace).Sub(h.clock.Now()))
	if err := h.agent.paywall.PollNow(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r := h.call(owner, "GET", "/v1/balance", "", HeaderAPIKey, "tk_recent"); r.status != 401 {
		t.Fatalf("the recent account a TTL after its creation: %d %s", r.status, r.raw)
	}
}

// TestCountsAreRecountedAtStart: the counts of accounts awaiting a first
// deposit are rewritten from the accounts at each start, so a count that
// drifted does not refuse top-ups for good.
func TestCountsAreRecountedAtStart(t *testing.T) {
	t.Parallel()
	cfg := func(pc *PaymentConfig) { pc.MaxUnfundedAccounts = 2; pc.MaxUnfundedPerIP = 1 }
	h := newManualHarness(t, cfg)
	if r := h.topupFrom(identity.GenerateKey(), NewWallet(), "198.51.100.9"); r.status != 201 {
		t.Fatalf("top-up: %d %s", r.status, r.raw)
	}
	h.agent.Close()
	h.put(map[string]string{ // as if every place were taken
		unfundedKey:          "2",
		"x/a/198.51.100.9":   "[1,2]",
		"x/a/198.51.100.10":  "[3]",
		"x/a/2001:db8::/64":  "{not json",
		"x/a/198.51.100.250": "[4]",
	})
	pc := testPayment(h.chain, h.provider.Address())
	cfg(pc)
	h.start(pc)
	if r := h.topupFrom(identity.GenerateKey(), NewWallet(), "198.51.100.10"); r.status != 201 {
		t.Fatalf("top-up after the restart: %d %s", r.status, r.raw)
	}
	// The first account's real expiry, not the drifted one.
	wantRefused(t, "a second account from one address", h.topupFrom(identity.GenerateKey(), NewWallet(), "198.51.100.9"),
		"too_many_unfunded_from_address", seconds(DefaultUnfundedAccountTTL+sweepGrace+DefaultPollInterval))
	wantRefused(t, "a third account in all", h.topupFrom(identity.GenerateKey(), NewWallet(), "2001:db8::1"),
		"too_many_unfunded_accounts", seconds(DefaultUnfundedAccountTTL+sweepGrace+DefaultPollInterval))
	if n := countKeys(t, h.db, "x/a/"); n != 2 {
		t.Fatalf("%d address counts kept; want the two addresses' with accounts", n)
	}
}

// TestAFundedAccountLeavesTheCountOnce: an account funded while still in
// the expiry queue (as another version could leave it) is kept by the
// sweep and counted out then, and not a second time by its next deposit.
func TestAFundedAccountLeavesTheCountOnce(t *testing.T) {
	t.Parallel()
	cfg := func(pc *PaymentConfig) { pc.MaxUnfundedAccounts = 1 }
	h := newManualHarness(t, cfg)
	h.agent.Close()
	owner, payer := identity.GenerateKey(), NewWallet()
	hk := hashKey("tk_funded")
	expired := h.clock.Now().Add(-time.Hour).UnixNano()
	err := h.db.Update(func(tx *store.Txn) error {
		a := accountRec{Payer: payer.Address(), Owner: identity.EncodePublicKey(owner.Public().(ed25519.PublicKey)),
			Credits: 500, Deposited: 500, Expires: expired, Addr: "198.51.100.20"}
		if err := tx.SetJSON([]byte("x/k/"+hk), a); err != nil {
			return err
		}
		return tx.Set(queueKey(unfundedQueue, expired, unfundedID(hk, a.Addr)), nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	pc := testPayment(h.chain, h.provider.Address())
	cfg(pc)
	h.start(pc) // counts it: the agent is full
	poll := func() {
		t.Helper()
		if err := h.agent.paywall.PollNow(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	poll() // the sweep keeps it, and frees its place
	if r := h.topup(identity.GenerateKey(), NewWallet()); r.status != 201 {
		t.Fatalf("top-up once the funded account left the count: %d %s", r.status, r.raw)
	}
	h.pay(payer, 700, "tk_funded")
	poll()
	if got := h.balance(owner, "tk_funded"); got != 1200 {
		t.Fatalf("funded account: balance %v, want 1200", got)
	}
	wantRefused(t, "a second account awaiting a deposit", h.topup(identity.GenerateKey(), NewWallet()),
		"too_many_unfunded_accounts", seconds(DefaultUnfundedAccountTTL+sweepGrace+DefaultPollInterval))
}

// TestATransferListedLateIsCredited: a deposit that landed before its
// account's expiry but that the RPC lists only after it (within
// sweepGrace) is credited: the sweep leaves an account sweepGrace past its
// expiry in the wallet's time read.
func TestATransferListedLateIsCredited(t *testing.T) {
	t.Parallel()
	h := newManualHarness(t)
	owner, payer := identity.GenerateKey(), NewWallet()
	r := h.topup(owner, payer)
	key := r.body["api_key"].(string)
	expires := h.clock.Now().Add(DefaultUnfundedAccountTTL)

	h.clock.Advance(DefaultUnfundedAccountTTL - time.Second)
	h.chain.Fund(payer.PublicKey(), solana.LAMPORTS_PER_SOL)
	sig := h.chain.Land(h.payTx(payer, h.provider.PublicKey(), 9_000, key), soltest.Land{Hidden: true}) // landed, not listed yet
	h.clock.Advance(sweepGrace / 2)
	if !h.clock.Now().After(expires) {
		t.Fatal("the poll must come after the expiry")
	}
	if err := h.agent.paywall.PollNow(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.chain.Reveal(sig)
	h.clock.Advance(DefaultPollInterval)
	if err := h.agent.paywall.PollNow(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := h.balance(owner, key); got != 9_000 {
		t.Fatalf("balance %v; want the deposit listed after the expiry credited", got)
	}
}
