package interop

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentmesh/mesh/identity/meshsig"
	"github.com/agentmesh/mesh/store"
)

// Storage layout. Everything interop keeps lives in the node's Badger store
// under "x/", apart from the registry's keys:
//
//	x/n/<nonce>               the signature that paid an x402 nonce; TTL: expiry + nonceGrace
//	x/s/<tx signature>        claim of a signature by a nonce and request, with the cached answer ≤ 512 KiB (claimRec); TTL claimTTL;
//	                          an x402 v2 payment is keyed by its payer's signature (the transaction's second)
//	x/f/p/<pubkey hex>        free-tier counter of a caller key (freeRec); TTL: until its reset
//	x/f/i/<address>           free-tier counter of a client address (addrKey) (freeRec); TTL: until its reset
//	x/k/<sha256 hex(api_key)> prepaid account (accountRec)
//	x/u/<expiry>/<sha256 hex>[/<address>]
//	                          account awaiting its first deposit, made from client address <address>
//	                          (none: indexed from an older store), removed after expiry (see sweep)
//	x/m/unfunded              how many accounts x/u holds
//	x/a/<address>             the expiries of the accounts x/u holds of one client address (addrRec)
//	x/m/indexed               the store's older records are indexed (indexOnce)
//	x/d/<tx signature>        a wallet transaction the poller has handled (depositRec); kept forever
//	x/m/checkpoint            newest wallet signature the poller has handled
//	x/m/gap                   a backlog being worked off (gapRec)
//	x/m/noncekey              the key of x402 nonce MACs (see nonce.go)
//	x/i/<invoice nonce>       post-pay invoice (invoiceRec)
//	x/o/<pubkey hex>          the caller's open (unpaid) invoice nonce
//	x/w/<invoice nonce>       invoice the check watches: reserved, owed, or its settlement not reported yet
//	x/r/<removal>/<nonce>     invoice settled or defaulted, removed at its removal time (see postpay.go)
//	x/g/<pubkey hex>/<nonce>  Mesh-Sig nonce seen on an agent endpoint; TTL 240 s
//
// Decisions that must hold across restarts (a signature claimed, a deposit
// credited) are keys that never expire; TTLs only collect garbage or bound
// windows whose end is also stored in the value. What may still be paid
// (an account awaiting its deposit, a defaulted invoice) is not a TTL
// key: Badger's TTL follows the wall clock, also while the agent is down
// or its poller behind, so a transfer that landed in time could find its
// record gone. It waits in an expiry queue (x/u/, x/r/: <time>/<id>, the
// time as 8-byte big-endian unix ns) that sweep empties once the poller
// has read the wallet past that time.
const (
	// nonceGrace is how long after its expiry a nonce's proof is still
	// taken: a payment that landed before expiry but was presented late is
	// honoured. The single-use mark of a paid nonce lives as long.
	nonceGrace = 24 * time.Hour
	// claimTTL is how long a paid answer can be replayed.
	claimTTL       = 7 * 24 * time.Hour
	freeTierWindow = 24 * time.Hour
	checkpointKey  = "x/m/checkpoint"
	gapKey         = "x/m/gap"
	meshNonceTTL   = 240 * time.Second
	unfundedKey    = "x/m/unfunded"
	unfundedQueue  = "x/u/"
	retiredQueue   = "x/r/"
	indexedKey     = "x/m/indexed"
	// sweepGrace is how long after its expiry an entry of an expiry queue
	// stays, counted in the wallet's time read: a transfer that landed
	// before expiry is visible at the commitment by then, so it was
	// handled.
	sweepGrace = 5 * time.Minute
	// indexGrace is the least time an account awaiting its first deposit
	// in an older store (which promised no expiry) has left when it is
	// indexed: one younger than UnfundedAccountTTL keeps the rest of its
	// time, an older one (as a flood of top-ups leaves them) goes an hour
	// after the upgrade: time for a payer whose transfer is under way
	// then, while a store full of them refuses top-ups for an hour, not
	// for a whole TTL.
	indexGrace = time.Hour
	// sweepBatch bounds the entries one transaction removes or indexes.
	sweepBatch = 1000
	// maxCachedBody bounds a paid answer kept for replay; a larger one is
	// not kept, and a replay runs the skill again for the same request.
	// (Kept as base64 in JSON, 512 KiB stays under Badger's 1 MiB value
	// limit of an in-memory store.)
	maxCachedBody = 512 << 10
	// maxUncachedRuns bounds how often one payment runs the skill when its
	// answer is too large to keep: enough for a caller's retries after a
	// lost answer, not a way to buy many runs with one payment.
	maxUncachedRuns = 3
)

// claimRec ties a transaction signature to the nonce it paid and to the
// request it paid for, and keeps the answer served for it.
type claimRec struct {
	Nonce    string `json:"nonce"`
	Skill    string `json:"skill"`
	Lamports uint64 `json:"lamports"`
	At       int64  `json:"at"`
	// Bind is the hex SHA-256 of the skill and request body, Key the
	// caller's Mesh-Sig key when the nonce was bound to one: only a
	// request with the same binding is served.
	Bind   string `json:"bind"`
	Key    string `json:"key,omitempty"`
	Served bool   `json:"served"`
	// Runs counts the answers served that were too large to cache.
	Runs   int    `json:"runs,omitempty"`
	Status int    `json:"status,omitempty"`
	Type   string `json:"type,omitempty"`
	Body   []byte `json:"body,omitempty"`
	// Tx is the paying transaction's signature when the claim's key is
	// another: an x402 v2 payment is claimed by its payer's signature
	// before the fee payer signs. Pending: claimed and submitted, not
	// confirmed yet (Tx is then empty).
	Tx      string `json:"tx,omitempty"`
	Pending bool   `json:"pending,omitempty"`
	// Asset and Amount are what an x402 v2 payment paid (the mint, in its
	// smallest unit), Payer the token authority that signed it, Settle the
	// PAYMENT-RESPONSE it is answered with and Version its x402 version.
	Asset   string `json:"asset,omitempty"`
	Amount  uint64 `json:"amount,omitempty"`
	Payer   string `json:"payer,omitempty"`
	Settle  string `json:"settle,omitempty"`
	Version int    `json:"version,omitempty"`
}

type freeRec struct {
	Count int   `json:"count"`
	Reset int64 `json:"reset"` // unix ns
}

// accountRec is a prepaid balance, bound to the payer address that funds
// it and to the caller key that asked for it.
type accountRec struct {
	Payer   string `json:"payer"`
	Owner   string `json:"owner"` // base64 Ed25519 key
	Credits uint64 `json:"credits"`
	// Residue is deposited lamports not yet worth a whole credit.
	Residue   uint64 `json:"residue"`
	Deposited uint64 `json:"deposited"`
	Created   int64  `json:"created"`
	// Expires (unix ns) is when an account never funded goes (it waits in
	// the x/u queue until then); 0 once a deposit was credited: a funded
	// account is kept.
	Expires int64 `json:"expires,omitempty"`
	// Addr is the client address (addrKey) the account was made from,
	// while it awaits its first deposit: the x/a record it counts in.
	Addr string `json:"addr,omitempty"`
}

// depositRec records what the poller did with one wallet transaction.
type depositRec struct {
	Outcome  string `json:"outcome"`
	Account  string `json:"account,omitempty"`
	Lamports uint64 `json:"lamports,omitempty"`
	Credited uint64 `json:"credited,omitempty"`
	At       int64  `json:"at"`
}

// Poller outcomes.
const (
	outcomeCredited  = "credited"
	outcomeInvoice   = "invoice_paid"
	outcomeFailed    = "failed"
	outcomeUnmatched = "unmatched"
	outcomeX402      = "x402"
)

// invoiceRec is a post-paid call not yet settled.
type invoiceRec struct {
	Caller   string `json:"caller"` // base64 key
	AgentID  string `json:"agent_id,omitempty"`
	Skill    string `json:"skill"`
	Lamports uint64 `json:"lamports"`
	Created  int64  `json:"created"`
	Due      int64  `json:"due"`
	PaidSig  string `json:"paid_sig,omitempty"`
	Reported bool   `json:"reported,omitempty"` // its default was reported (or the report refused for good)
	// Unsettled: paid, and the report of its settlement not filed yet
	// (the registry was unreachable): checkInvoices tries again.
	Unsettled bool `json:"unsettled,omitempty"`
	// Refused: the registry refused its report (of the default, or of the
	// settlement) for good; it counts as filed, and was logged.
	Refused bool `json:"refused,omitempty"`
	// Pending: reserved, the call not answered yet. An invoice left
	// pending (the provider stopped mid-call) is dropped when due, never
	// reported: the caller may not have been served.
	Pending bool `json:"pending,omitempty"`
}

// ledger is interop's state. Every write goes through mu, so Badger
// transactions never conflict and read-check-write steps are atomic.
type ledger struct {
	db *store.DB
	mu sync.Mutex

	keyMu    sync.Mutex
	nonceKey []byte

	locksMu sync.Mutex
	locks   map[string]*keyLock
}

type keyLock struct {
	sync.Mutex
	refs int
}

func newLedger(db *store.DB) *ledger { return &ledger{db: db, locks: map[string]*keyLock{}} }

// lock serialises work on one key (a transaction signature) and returns
// its unlock.
func (l *ledger) lock(key string) func() {
	l.locksMu.Lock()
	k := l.locks[key]
	if k == nil {
		k = &keyLock{}
		l.locks[key] = k
	}
	k.refs++
	l.locksMu.Unlock()
	k.Lock()
	return func() {
		k.Unlock()
		l.locksMu.Lock()
		if k.refs--; k.refs == 0 {
			delete(l.locks, key)
		}
		l.locksMu.Unlock()
	}
}

func (l *ledger) update(fn func(*store.Txn) error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.db.Update(fn)
}

func getJSON[T any](db *store.DB, key []byte) (*T, error) {
	var v T
	err := db.View(func(tx *store.Txn) error { return tx.GetJSON(key, &v) })
	if err != nil {
		return nil, err
	}
	return &v, nil
}

func setJSONTTL(tx *store.Txn, key []byte, v any, ttl time.Duration) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if ttl <= 0 {
		return tx.Set(key, b)
	}
	return tx.SetTTL(key, b, ttl)
}

func randomToken(prefix string, n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return prefix + base64.RawURLEncoding.EncodeToString(b)
}

func hashKey(k string) string {
	s := sha256.Sum256([]byte(k))
	return hex.EncodeToString(s[:])
}

// --- Mesh-Sig nonces ---

// claimMeshNonce remembers a Mesh-Sig nonce; a second use is
// meshsig.ErrReplay.
func (l *ledger) claimMeshNonce(pubHex, nonce string) error {
	key := store.Key("x", "g", pubHex, nonce)
	return l.update(func(tx *store.Txn) error {
		if ok, err := tx.Has(key); err != nil || ok {
			if ok {
				return meshsig.ErrReplay
			}
			return err
		}
		return tx.SetTTL(key, []byte{1}, meshNonceTTL)
	})
}

// --- x402 challenges and claims ---

// macKey returns the key of x402 nonce MACs, created on first use and kept
// in the store so that nonces outlive a restart.
func (l *ledger) macKey() ([]byte, error) {
	l.keyMu.Lock()
	defer l.keyMu.Unlock()
	if l.nonceKey != nil {
		return l.nonceKey, nil
	}
	err := l.update(func(tx *store.Txn) error {
		b, err := tx.Get([]byte(nonceKeyDB))
		if errors.Is(err, store.ErrNotFound) {
			b = make([]byte, macKeySize)
			rand.Read(b)
			err = tx.Set([]byte(nonceKeyDB), b)
		}
		l.nonceKey = bytes.Clone(b)
		return err
	})
	if err != nil {
		l.nonceKey = nil
	}
	return l.nonceKey, err
}

// has reports whether the store holds key.
func (l *ledger) has(key []byte) (bool, error) {
	var ok bool
	err := l.db.View(func(tx *store.Txn) (err error) {
		ok, err = tx.Has(key)
		return err
	})
	return ok, err
}

// nonceUsed reports whether a transaction has paid nonce.
func (l *ledger) nonceUsed(nonce string) (bool, error) { return l.has(store.Key("x", "n", nonce)) }

func (l *ledger) claimOf(sig string) (*claimRec, error) {
	return getJSON[claimRec](l.db, store.Key("x", "s", sig))
}

// claim atomically ties sig to nonce: the signature must be unclaimed and
// the nonce unpaid. It is the one step after which the caller has paid for
// exactly this nonce. The nonce's mark lives for nonceTTL, as long as a
// proof of it is taken.
func (l *ledger) claim(sig, nonce string, c claimRec, nonceTTL time.Duration) error {
	sk, nk := store.Key("x", "s", sig), store.Key("x", "n", nonce)
	return l.update(func(tx *store.Txn) error {
		var prev claimRec
		switch err := tx.GetJSON(sk, &prev); {
		case err == nil:
			return ErrProofUsed.With("transaction %s already paid for nonce %s", sig, prev.Nonce)
		case !errors.Is(err, store.ErrNotFound):
			return err
		}
		if used, err := tx.Has(nk); err != nil || used {
			if used {
				return ErrNonceUsed
			}
			return err
		}
		if err := tx.SetTTL(nk, []byte(sig), max(nonceTTL, time.Minute)); err != nil {
			return err
		}
		return setJSONTTL(tx, sk, c, claimTTL)
	})
}

// settled marks the pending x402 v2 payment claimed as key as confirmed
// by transaction tx, answered with the settlement receipt settle.
func (l *ledger) settled(key, tx, settle string) (*claimRec, error) {
	sk := store.Key("x", "s", key)
	var c claimRec
	err := l.update(func(txn *store.Txn) error {
		if err := txn.GetJSON(sk, &c); err != nil {
			return err
		}
		c.Pending, c.Tx, c.Settle = false, tx, settle
		return setJSONTTL(txn, sk, c, claimTTL)
	})
	return &c, err
}

// unclaim drops the claim of a pending x402 v2 payment that did not land
// and never will, and the mark of its nonce, which may then be paid again.
func (l *ledger) unclaim(key, nonce string) error {
	return l.update(func(tx *store.Txn) error {
		if err := tx.Delete(store.Key("x", "s", key)); err != nil {
			return err
		}
		return tx.Delete(store.Key("x", "n", nonce))
	})
}

// served stores the answer given for a claimed signature, to be replayed;
// an answer over maxCachedBody is only counted (Runs).
func (l *ledger) served(sig string, status int, ctype string, body []byte) error {
	sk := store.Key("x", "s", sig)
	return l.update(func(tx *store.Txn) error {
		var c claimRec
		if err := tx.GetJSON(sk, &c); err != nil {
			return err
		}
		if len(body) > maxCachedBody {
			c.Runs++
		} else {
			c.Served, c.Status, c.Type, c.Body = true, status, ctype, body
		}
		return setJSONTTL(tx, sk, c, claimTTL)
	})
}

// --- free tier ---

// takeFree counts one free call against every key when all of them have
// allowance left; otherwise it counts nothing and returns false.
func (l *ledger) takeFree(keys [][]byte, allowance int, now time.Time) (bool, error) {
	ok := false
	err := l.update(func(tx *store.Txn) error {
		recs := make([]freeRec, len(keys))
		for i, k := range keys {
			err := tx.GetJSON(k, &recs[i])
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				return err
			}
			if recs[i].Reset <= now.UnixNano() {
				recs[i] = freeRec{Reset: now.Add(freeTierWindow).UnixNano()}
			}
			if recs[i].Count >= allowance {
				return nil
			}
		}
		for i, k := range keys {
			recs[i].Count++
			if err := setJSONTTL(tx, k, recs[i], time.Duration(recs[i].Reset-now.UnixNano())); err != nil {
				return err
			}
		}
		ok = true
		return nil
	})
	return ok, err
}

// giveBackFree uncounts one free call of every key (a call that failed).
func (l *ledger) giveBackFree(keys [][]byte, now time.Time) error {
	return l.update(func(tx *store.Txn) error {
		for _, k := range keys {
			var rec freeRec
			err := tx.GetJSON(k, &rec)
			if errors.Is(err, store.ErrNotFound) || err == nil && (rec.Count == 0 || rec.Reset <= now.UnixNano()) {
				continue // nothing counted in this window
			} else if err != nil {
				return err
			}
			rec.Count--
			if err := setJSONTTL(tx, k, rec, time.Duration(rec.Reset-now.UnixNano())); err != nil {
				return err
			}
		}
		return nil
	})
}

// --- prepaid accounts ---

// full is a top-up refused because a bound of the accounts awaiting their
// first deposit is reached: its client address's (perAddr) or the total;
// first is when the first account holding a place in it expires.
type full struct {
	perAddr bool
	first   time.Time
}

// newAccount stores a under a new api_key as an account awaiting its
// first deposit until a.Expires, counted in the total and in a.Addr's
// record, unless maxTotal such accounts are held, or maxPerAddr of
// a.Addr's: then it stores nothing and says which bound is reached.
func (l *ledger) newAccount(a accountRec, maxTotal, maxPerAddr int) (apiKey string, refused *full, err error) {
	key := randomToken("tk_", 32)
	err = l.update(func(tx *store.Txn) error {
		exps, err := addrExpiries(tx, a.Addr)
		if err != nil {
			return err
		}
		if len(exps) >= maxPerAddr {
			refused = &full{perAddr: true, first: time.Unix(0, exps[0])}
			return nil
		}
		n, err := unfundedCount(tx)
		if err != nil {
			return err
		}
		if n >= maxTotal {
			first, err := firstDue(tx, unfundedQueue)
			refused = &full{first: first}
			return err
		}
		h := hashKey(key)
		if err := tx.SetJSON(store.Key("x", "k", h), a); err != nil {
			return err
		}
		if err := tx.Set(queueKey(unfundedQueue, a.Expires, unfundedID(h, a.Addr)), nil); err != nil {
			return err
		}
		if err := setAddrExpiries(tx, a.Addr, insertSorted(exps, a.Expires)); err != nil {
			return err
		}
		apiKey = key
		return setUnfunded(tx, n+1)
	})
	if err != nil || refused != nil {
		return "", refused, err
	}
	return apiKey, nil, nil
}

// unfundedID is the id of account h, made from client address addr, in
// the x/u queue; splitUnfundedID undoes it.
func unfundedID(h, addr string) string {
	if addr == "" {
		return h
	}
	return h + "/" + addr
}

func splitUnfundedID(id string) (h, addr string) {
	h, addr, _ = strings.Cut(id, "/") // a hash has no '/'; an IPv6 /64 has one
	return h, addr
}

// funded takes account h, credited its first deposit, out of the x/u
// queue and its address's count: it is kept.
func funded(tx *store.Txn, h string, a *accountRec) error {
	if a.Expires == 0 {
		return nil
	}
	if err := tx.Delete(queueKey(unfundedQueue, a.Expires, unfundedID(h, a.Addr))); err != nil {
		return err
	}
	if err := removeAddrExpiry(tx, a.Addr, a.Expires); err != nil {
		return err
	}
	a.Expires, a.Addr = 0, ""
	return addUnfunded(tx, -1)
}

// dropUnfunded removes the account of x/u entry id, expired at at. The
// queue and a credit change together, so it was never funded; the check on
// the deposits guards the one step that deletes an account, since a
// balance is the caller's money.
func dropUnfunded(tx *store.Txn, at int64, id string) error {
	h, addr := splitUnfundedID(id)
	key := store.Key("x", "k", h)
	var a accountRec
	switch err := tx.GetJSON(key, &a); {
	case err == nil && a.Deposited == 0:
		if err := tx.Delete(key); err != nil {
			return err
		}
	case err == nil:
		// Funded, yet still queued (credited by a version that kept no
		// queue): kept, and out of the queue for good, so that a later
		// credit does not count it out again.
		a.Expires, a.Addr = 0, ""
		if err := tx.SetJSON(key, a); err != nil {
			return err
		}
	case !errors.Is(err, store.ErrNotFound):
		return err
	}
	if err := removeAddrExpiry(tx, addr, at); err != nil {
		return err
	}
	return addUnfunded(tx, -1)
}

func unfundedCount(tx *store.Txn) (int, error) {
	var n int
	if err := tx.GetJSON([]byte(unfundedKey), &n); err != nil && !errors.Is(err, store.ErrNotFound) {
		return 0, err
	}
	return n, nil
}

func setUnfunded(tx *store.Txn, n int) error { return tx.SetJSON([]byte(unfundedKey), n) }

func addUnfunded(tx *store.Txn, d int) error {
	n, err := unfundedCount(tx)
	if err != nil {
		return err
	}
	return setUnfunded(tx, max(n+d, 0))
}

// addrRec (x/a/<address>) is the expiries, unix ns in ascending order, of
// the accounts of one client address awaiting their first deposit: how
// many there are, and when the first can go. An address with none has no
// record. Accounts indexed from an older store have no address.
type addrRec []int64

func addrExpiries(tx *store.Txn, addr string) (addrRec, error) {
	var exps addrRec
	if addr == "" {
		return nil, nil
	}
	if err := tx.GetJSON(store.Key("x", "a", addr), &exps); err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	return exps, nil
}

func setAddrExpiries(tx *store.Txn, addr string, exps addrRec) error {
	switch {
	case addr == "":
		return nil
	case len(exps) == 0:
		return tx.Delete(store.Key("x", "a", addr))
	}
	return tx.SetJSON(store.Key("x", "a", addr), exps)
}

// removeAddrExpiry uncounts one account of addr that expires at at.
func removeAddrExpiry(tx *store.Txn, addr string, at int64) error {
	exps, err := addrExpiries(tx, addr)
	if err != nil {
		return err
	}
	if i := slices.Index(exps, at); i >= 0 {
		return setAddrExpiries(tx, addr, slices.Delete(exps, i, i+1))
	}
	return nil
}

func insertSorted(exps addrRec, at int64) addrRec {
	i, _ := slices.BinarySearch(exps, at)
	return slices.Insert(exps, i, at)
}

func (l *ledger) account(apiKey string) (*accountRec, error) {
	if len(apiKey) > 128 {
		return nil, store.ErrNotFound
	}
	return getJSON[accountRec](l.db, store.Key("x", "k", hashKey(apiKey)))
}

// debit takes credits from the account when it holds that many and
// returns what remains; ok is false (and nothing changes) otherwise.
func (l *ledger) debit(apiKey string, credits uint64) (remaining uint64, ok bool, err error) {
	key := store.Key("x", "k", hashKey(apiKey))
	err = l.update(func(tx *store.Txn) error {
		var a accountRec
		if err := tx.GetJSON(key, &a); err != nil {
			return err
		}
		remaining = a.Credits
		if a.Credits < credits {
			return nil
		}
		a.Credits -= credits
		remaining, ok = a.Credits, true
		return tx.SetJSON(key, a)
	})
	return remaining, ok, err
}

// refund gives back credits taken for a call that was not served.
func (l *ledger) refund(apiKey string, credits uint64) error {
	key := store.Key("x", "k", hashKey(apiKey))
	return l.update(func(tx *store.Txn) error {
		var a accountRec
		if err := tx.GetJSON(key, &a); err != nil {
			return err
		}
		a.Credits = addSat(a.Credits, credits)
		return tx.SetJSON(key, a)
	})
}

// --- the poller's records ---

// handled reports whether the poller recorded transaction sig.
func (l *ledger) handled(sig string) (bool, error) { return l.has(store.Key("x", "d", sig)) }

// recordDeposit stores the outcome for sig and applies it, exactly once:
// a signature already handled changes nothing. apply runs inside the same
// transaction.
func (l *ledger) recordDeposit(sig string, rec depositRec, apply func(*store.Txn) error) (bool, error) {
	key := store.Key("x", "d", sig)
	done := false
	err := l.update(func(tx *store.Txn) error {
		if ok, err := tx.Has(key); err != nil || ok {
			return err
		}
		if apply != nil {
			if err := apply(tx); err != nil {
				return err
			}
		}
		done = true
		return tx.SetJSON(key, rec)
	})
	return done, err
}

// checkpoint is the newest wallet signature the poller has handled; ""
// when none. ok is false when no checkpoint was ever stored.
func (l *ledger) checkpoint() (sig string, ok bool, err error) {
	err = l.db.View(func(tx *store.Txn) error {
		b, err := tx.Get([]byte(checkpointKey))
		sig = string(b)
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		return "", false, nil
	}
	return sig, err == nil, err
}

// hasAny reports whether some key starts with prefix.
func (l *ledger) hasAny(prefix []byte) (bool, error) {
	found := false
	err := l.db.View(func(tx *store.Txn) error {
		return tx.Scan(prefix, nil, func(_, _ []byte) (bool, error) { found = true; return false, nil })
	})
	return found, err
}

func (l *ledger) setCheckpoint(sig string) error {
	return l.update(func(tx *store.Txn) error { return tx.Set([]byte(checkpointKey), []byte(sig)) })
}

// gapRec is a backlog of wallet transactions larger than one poll: every
// signature newer than Cursor up to Top is handled; those between the
// checkpoint and Cursor are not yet.
type gapRec struct {
	Top    string `json:"top"`
	Cursor string `json:"cursor"`
}

func (l *ledger) gap() (*gapRec, error) {
	g, err := getJSON[gapRec](l.db, []byte(gapKey))
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	return g, err
}

// setGap stores the backlog cursor; nil removes it.
func (l *ledger) setGap(g *gapRec) error {
	return l.update(func(tx *store.Txn) error {
		if g == nil {
			return tx.Delete([]byte(gapKey))
		}
		return tx.SetJSON([]byte(gapKey), g)
	})
}

// --- expiry queues ---

// queueKey is the key of id in queue, due at (unix ns): the time comes
// first, so a scan of the queue meets what is due first.
func queueKey(queue string, at int64, id string) []byte {
	return []byte(queue + store.U64(uint64(at)) + "/" + id)
}

// parseQueueKey splits a key of queue into its due time and its id.
func parseQueueKey(queue string, k []byte) (at int64, id string) {
	rest := k[len(queue):]
	due, _ := store.ParseU64(string(rest[:8]))
	return int64(due), string(rest[9:])
}

// firstDue is when the first entry of queue is due (zero when it is empty).
func firstDue(tx *store.Txn, queue string) (time.Time, error) {
	var first time.Time
	err := tx.Scan([]byte(queue), nil, func(k, _ []byte) (bool, error) {
		at, _ := parseQueueKey(queue, k)
		first = time.Unix(0, at)
		return false, nil
	})
	return first, err
}

// sweep removes the entries of queue due by until, each in the same
// transaction as what drop removes for its due time and id, and returns
// how many. An entry drop fails on stays in the queue and the sweep goes
// on past it (the errors are returned together): one record it cannot
// handle must not hold up the rest, nor what they bound, for good.
func (l *ledger) sweep(queue string, until time.Time, drop func(tx *store.Txn, at int64, id string) error) (int, error) {
	total := 0
	var failed []error
	start := []byte(queue)
	for {
		var due [][]byte
		var scanErr error
		err := l.update(func(tx *store.Txn) error {
			scanErr = tx.Scan([]byte(queue), start, func(k, _ []byte) (bool, error) {
				if at, _ := parseQueueKey(queue, k); at > until.UnixNano() {
					return false, nil
				}
				due = append(due, bytes.Clone(k))
				return len(due) < sweepBatch, nil
			})
			if scanErr != nil {
				return scanErr
			}
			return dropEntries(tx, queue, due, drop)
		})
		switch {
		case scanErr != nil:
			return total, errors.Join(append(failed, scanErr)...)
		case err != nil: // each on its own: those drop fails on stay
			for _, k := range due {
				if err := l.update(func(tx *store.Txn) error { return dropEntries(tx, queue, [][]byte{k}, drop) }); err != nil {
					at, id := parseQueueKey(queue, k)
					failed = append(failed, fmt.Errorf("%s %s (due %s): %w", queue, id, time.Unix(0, at).UTC().Format(time.RFC3339), err))
				} else {
					total++
				}
			}
		default:
			total += len(due)
		}
		if len(due) < sweepBatch {
			return total, errors.Join(failed...)
		}
		start = append(due[len(due)-1], 0)
	}
}

// dropEntries removes the entries keys of queue that are still there,
// with what drop removes for each.
func dropEntries(tx *store.Txn, queue string, keys [][]byte, drop func(tx *store.Txn, at int64, id string) error) error {
	for _, k := range keys {
		if ok, err := tx.Has(k); err != nil {
			return err
		} else if !ok {
			continue
		}
		at, id := parseQueueKey(queue, k)
		if err := drop(tx, at, id); err != nil {
			return err
		}
		if err := tx.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// recount rewrites the counts of the accounts awaiting their first
// deposit (x/m/unfunded, x/a/) from the x/u queue they count, where they
// differ, and reports whether any did. A count that drifted (a record
// written by hand or by another version, a bug) would otherwise refuse
// top-ups until the agent's store is mended by hand. It reads the queue's
// keys, whose values are empty: as many as MaxUnfundedAccounts allows, and
// what indexOnce added.
func (l *ledger) recount() (changed bool, err error) {
	err = l.update(func(tx *store.Txn) error {
		total, byAddr := 0, map[string]addrRec{}
		err := tx.Scan([]byte(unfundedQueue), nil, func(k, _ []byte) (bool, error) {
			at, id := parseQueueKey(unfundedQueue, k)
			total++
			if _, addr := splitUnfundedID(id); addr != "" {
				byAddr[addr] = append(byAddr[addr], at) // in the queue's order: ascending
			}
			return true, nil
		})
		if err != nil {
			return err
		}
		if n, err := unfundedCount(tx); err != nil || n != total {
			changed = true
			if err := setUnfunded(tx, total); err != nil {
				return err
			}
		}
		prefix := store.Key("x", "a", "")
		stored := map[string]addrRec{}
		err = tx.Scan(prefix, nil, func(k, v []byte) (bool, error) {
			var exps addrRec
			if json.Unmarshal(v, &exps) != nil {
				exps = addrRec{-1} // unreadable: rewritten or removed
			}
			stored[string(k[len(prefix):])] = exps
			return true, nil
		})
		if err != nil {
			return err
		}
		for addr := range stored {
			if _, ok := byAddr[addr]; !ok {
				changed = true
				if err := tx.Delete(store.Key("x", "a", addr)); err != nil {
					return err
				}
			}
		}
		for addr, exps := range byAddr {
			if !slices.Equal(stored[addr], exps) {
				changed = true
				if err := setAddrExpiries(tx, addr, exps); err != nil {
					return err
				}
			}
		}
		return nil
	})
	return changed, err
}

// indexOnce indexes what a store written before the indexes existed
// holds, once (indexedKey marks it done): each account awaiting its first
// deposit waits in the queue until ttl after its creation, but at least
// indexGrace after start, and every invoice is watched (the next check
// retires those done with). Every step is a no-op when repeated, so a
// start cut short does the rest at the next.
func (l *ledger) indexOnce(start time.Time, ttl time.Duration) error {
	if done, err := l.has([]byte(indexedKey)); err != nil || done {
		return err
	}
	err := l.backfill(store.Key("x", "i", ""), func(tx *store.Txn, nonce string, _ []byte) error {
		return tx.Set(store.Key("x", "w", nonce), nil)
	})
	if err != nil {
		return err
	}
	err = l.backfill(store.Key("x", "k", ""), func(tx *store.Txn, h string, v []byte) error {
		var a accountRec
		if err := json.Unmarshal(v, &a); err != nil {
			return err
		}
		if a.Deposited > 0 || a.Expires != 0 {
			return nil
		}
		a.Expires = max(a.Created+int64(ttl), start.Add(indexGrace).UnixNano())
		if err := tx.SetJSON(store.Key("x", "k", h), a); err != nil {
			return err
		}
		if err := tx.Set(queueKey(unfundedQueue, a.Expires, h), nil); err != nil {
			return err
		}
		return addUnfunded(tx, 1)
	})
	if err != nil {
		return err
	}
	return l.update(func(tx *store.Txn) error { return tx.Set([]byte(indexedKey), nil) })
}

// backfill calls fn for every key under prefix, with the rest of the key
// and its value, in transactions of at most sweepBatch keys.
func (l *ledger) backfill(prefix []byte, fn func(tx *store.Txn, id string, v []byte) error) error {
	start := prefix
	for {
		type entry struct {
			id string
			v  []byte
		}
		var batch []entry
		err := l.update(func(tx *store.Txn) error {
			err := tx.Scan(prefix, start, func(k, v []byte) (bool, error) {
				batch = append(batch, entry{string(k[len(prefix):]), bytes.Clone(v)})
				return len(batch) < sweepBatch, nil
			})
			if err != nil {
				return err
			}
			for _, e := range batch {
				if err := fn(tx, e.id, e.v); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil || len(batch) < sweepBatch {
			return err
		}
		start = append(bytes.Clone(prefix), batch[len(batch)-1].id+"\x00"...)
	}
}
