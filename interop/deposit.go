package interop

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gagliardetto/solana-go"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/httpx"
	"github.com/agentmesh/mesh/store"
)

// Deposits (spec 3.4). POST /v1/topup binds a payer address and the
// caller's key to a new tk_ api_key and answers a payment link whose memo is
// the api_key. The poller credits what the payer sends with that memo. The
// memo is public on chain, so the api_key alone is not a credential: a call
// that spends the balance must also carry a Mesh-Sig by the key that asked
// for the top-up.
//
// Each top-up makes the agent hold an account, so top-ups are bounded per
// caller key (topupLimits, hourly) and, in the store, in the accounts
// awaiting their first deposit: MaxUnfundedPerIP of one client address
// (addrKey) and MaxUnfundedAccounts in all at once. One never funded is
// removed UnfundedAccountTTL after the top-up, once the poller has read
// the wallet that far (sweep); a funded one is kept.

// topupRequest is the body of POST /v1/topup.
type topupRequest struct {
	PayerAddress string `json:"payer_address"`
	// Lamports is the amount the link asks for; default and minimum: the
	// deposit minimum.
	Lamports uint64 `json:"lamports"`
}

// TopupResponse is the answer of POST /v1/topup.
type TopupResponse struct {
	APIKey       string `json:"api_key"`
	ChainPayURL  string `json:"chainPayUrl"`
	PayerAddress string `json:"payer_address"`
	Network      string `json:"network"`
	Wallet       string `json:"wallet"`
	Lamports     uint64 `json:"lamports"`
	MinLamports  uint64 `json:"min_lamports"`
	Divisor      uint64 `json:"divisor"`
	// ExpiresAt: an account no deposit was credited to by then is removed
	// (a transfer that landed by then is credited if the RPC lists it
	// within sweepGrace).
	ExpiresAt time.Time `json:"expires_at"`
}

// BalanceResponse is the answer of GET /v1/balance.
type BalanceResponse struct {
	Lamports     uint64 `json:"lamports"`
	Credits      uint64 `json:"credits"`
	Divisor      uint64 `json:"divisor"`
	Deposited    uint64 `json:"deposited"`
	PayerAddress string `json:"payer_address"`
}

// topup binds a payer to a new api_key. It and balance are served only in
// deposit mode (Agent.Routes).
func (p *Paywall) topup(w http.ResponseWriter, r *http.Request) error {
	c := CallerFrom(r.Context())
	body, err := httpx.ReadBody(w, r, 4<<10)
	if err != nil {
		return err
	}
	var req topupRequest
	if err := httpx.DecodeJSON(body, &req); err != nil {
		return err
	}
	if _, err := solana.PublicKeyFromBase58(req.PayerAddress); err != nil {
		return httpx.ErrInvalid.With("payer_address must be a base58 Solana address")
	}
	if req.Lamports < p.cfg.DepositMinLamports {
		req.Lamports = p.cfg.DepositMinLamports
	}
	if req.Lamports == 0 {
		req.Lamports = p.cfg.CreditDivisor
	}
	now := p.now()
	giveBack, wait := p.topups.take(hex.EncodeToString(c.Pubkey), now)
	if wait > 0 {
		secs := retryAfter(w, wait)
		return ErrTopupRateLimited.With("at most %d top-ups an hour from one key; retry after %d s", p.cfg.TopupsPerHourPerKey, secs)
	}
	addr := addrKey(c.IP)
	expires := now.Add(p.cfg.UnfundedAccountTTL)
	key, refused, err := p.ledger.newAccount(accountRec{Payer: req.PayerAddress, Owner: identity.EncodePublicKey(c.Pubkey),
		Created: now.UnixNano(), Expires: expires.UnixNano(), Addr: addr}, p.cfg.MaxUnfundedAccounts, p.cfg.MaxUnfundedPerIP)
	switch {
	case err != nil:
		giveBack()
		return err
	case refused != nil:
		giveBack()
		// The first account to go frees its place at the first poll
		// sweepGrace after its expiry.
		secs := retryAfter(w, max(refused.first.Add(sweepGrace).Sub(now), 0)+p.cfg.PollInterval)
		if refused.perAddr {
			return ErrTooManyUnfundedFromAddr.With("the accounts made from your address (%s) that await a first deposit are as many as the agent takes from one (%d); fund one, or retry after %d s",
				addr, p.cfg.MaxUnfundedPerIP, secs)
		}
		return ErrTooManyUnfunded.With("the agent holds %d accounts awaiting a first deposit, as many as it takes; retry after %d s",
			p.cfg.MaxUnfundedAccounts, secs)
	}
	link := PayLink{Address: p.cfg.Wallet, Lamports: req.Lamports, Label: "topup", Memo: key}
	httpx.WriteJSON(w, http.StatusCreated, TopupResponse{
		APIKey: key, ChainPayURL: link.String(), PayerAddress: req.PayerAddress, Network: p.cfg.Network,
		Wallet: p.cfg.Wallet, Lamports: req.Lamports, MinLamports: p.cfg.DepositMinLamports, Divisor: p.cfg.CreditDivisor,
		ExpiresAt: expires.UTC(),
	})
	return nil
}

func (p *Paywall) balance(w http.ResponseWriter, r *http.Request) error {
	key := r.Header.Get(HeaderAPIKey)
	if key == "" {
		return ErrAPIKeyUnknown.With("X-Api-Key header required")
	}
	a, err := p.ownedAccount(r, key)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, BalanceResponse{Lamports: a.Credits * p.cfg.CreditDivisor, Credits: a.Credits,
		Divisor: p.cfg.CreditDivisor, Deposited: a.Deposited, PayerAddress: a.Payer})
	return nil
}

// pollPage is the page size of getSignaturesForAddress; maxPollPages
// bounds one poll (the rest waits for the next). Variables for tests.
var (
	pollPage     = 1000
	maxPollPages = 20
)

func (p *Paywall) pollLoop(ctx context.Context) {
	t := time.NewTicker(p.cfg.PollInterval)
	defer t.Stop()
	for {
		// Invoices are judged only on a wallet read up to now: a payment
		// not seen yet is not a default.
		if err := p.PollNow(ctx); err != nil && ctx.Err() == nil {
			p.log.Warn("deposit poll failed; retrying at the next interval", "err", err)
		} else if err := p.checkInvoices(ctx); err != nil && ctx.Err() == nil {
			p.log.Warn("post-pay invoice check failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// PollNow reads the wallet's transactions newer than the checkpoint and
// handles each exactly once: a deposit with an api_key memo from its bound
// payer is credited, a payment of a post-pay invoice settles it. Handled
// signatures are recorded, so a restart or a second poll credits nothing
// twice. The checkpoint only bounds the walk: it advances past a
// transaction once it is handled, and an error (RPC down, transaction not
// visible yet) leaves the rest for the next poll. A backlog larger than one
// poll reads (maxPollPages) is worked off over several polls through a gap
// cursor: the newest transactions first, then older pages down to the
// checkpoint, which then jumps to the newest. A poll that read the wallet
// up to its start removes what no transfer can reach any more (forget).
func (p *Paywall) PollNow(ctx context.Context) error {
	p.pollMu.Lock()
	defer p.pollMu.Unlock()
	start := p.now()
	cp, _, err := p.ledger.checkpoint()
	if err != nil {
		return err
	}
	g, err := p.ledger.gap()
	if err != nil {
		return err
	}
	before := ""
	if g != nil {
		before = g.Cursor
	}
	sigs, complete, err := p.walk(ctx, before, cp)
	if err != nil {
		return err
	}
	for i := len(sigs) - 1; i >= 0; i-- { // oldest first
		if err := p.handleTx(ctx, sigs[i]); err != nil {
			return err
		}
		if g == nil && complete {
			if err := p.ledger.setCheckpoint(sigs[i]); err != nil {
				return err
			}
		}
	}
	switch {
	case g == nil && complete:
		p.forget(start)
		return nil
	case g == nil: // the first pages of a backlog: remember where to go on
		return p.ledger.setGap(&gapRec{Top: sigs[0], Cursor: sigs[len(sigs)-1]})
	case complete: // the gap is closed; what landed after its top is read next
		if err := p.ledger.setCheckpoint(g.Top); err != nil {
			return err
		}
		return p.ledger.setGap(nil)
	case len(sigs) > 0:
		g.Cursor = sigs[len(sigs)-1]
		return p.ledger.setGap(g)
	}
	return nil
}

// forget removes the accounts never funded and the retired invoices whose
// time ended sweepGrace before readTo: every transaction up to readTo is
// handled, so a transfer to them that landed in time was seen. What it
// cannot remove is logged and tried again at the next poll; the poll and
// the invoice check after it go on.
func (p *Paywall) forget(readTo time.Time) {
	until := readTo.Add(-sweepGrace)
	for _, q := range []struct {
		queue, removed string
		drop           func(*store.Txn, int64, string) error
	}{
		{unfundedQueue, "accounts never funded removed", dropUnfunded},
		{retiredQueue, "settled and defaulted invoices removed after their retention", dropRetired},
	} {
		n, err := p.ledger.sweep(q.queue, until, q.drop)
		if n > 0 {
			p.log.Info(q.removed, "count", n)
		}
		if err != nil {
			p.log.Error("expired entries could not be removed; kept, and tried again at the next poll", "queue", q.queue, "err", err)
		}
	}
}

// startCheckpoint makes a first start begin at the wallet's newest
// signature: before this agent's first start no api_key or invoice
// existed, so nothing in the wallet's history can be credited, and reading
// it all (possibly years of transactions) would only cost RPC calls. A
// store that has a checkpoint, a backlog, accounts or invoices is not a
// first start and keeps the normal walk. It runs in Start, before any
// top-up can be served a deposit.
func (p *Paywall) startCheckpoint(ctx context.Context) error {
	p.pollMu.Lock()
	defer p.pollMu.Unlock()
	if _, ok, err := p.ledger.checkpoint(); err != nil || ok {
		return err
	}
	for _, prefix := range [][]byte{[]byte(gapKey), store.Key("x", "k", ""), store.Key("x", "i", "")} {
		if found, err := p.ledger.hasAny(prefix); err != nil || found {
			return err
		}
	}
	sigs, err := p.chain.Signatures(ctx, p.wallet, solana.Signature{}, solana.Signature{}, 1)
	if err != nil {
		return fmt.Errorf("interop: reading the wallet's newest transaction: %w", err)
	}
	newest := "" // stored too: "polled, the wallet was empty"
	if len(sigs) > 0 {
		newest = sigs[0].Signature.String()
	}
	return p.ledger.setCheckpoint(newest)
}

// walk lists the wallet's signatures older than before and newer than
// until (either may be empty), newest first, for at most maxPollPages
// pages; complete says whether it reached until (or the wallet's first
// transaction).
func (p *Paywall) walk(ctx context.Context, before, until string) ([]string, bool, error) {
	var b, u solana.Signature
	var err error
	if before != "" {
		if b, err = solana.SignatureFromBase58(before); err != nil {
			return nil, false, err
		}
	}
	if until != "" {
		if u, err = solana.SignatureFromBase58(until); err != nil {
			return nil, false, err
		}
	}
	var sigs []string
	for page := 0; page < maxPollPages; page++ {
		got, err := p.chain.Signatures(ctx, p.wallet, b, u, pollPage)
		if err != nil {
			return nil, false, err
		}
		for _, s := range got {
			sigs = append(sigs, s.Signature.String())
		}
		if len(got) < pollPage {
			return sigs, true, nil
		}
		b = got[len(got)-1].Signature
	}
	return sigs, false, nil
}

// handleTx handles one wallet transaction; an error means "try again later".
func (p *Paywall) handleTx(ctx context.Context, sigStr string) error {
	if done, err := p.ledger.handled(sigStr); err != nil || done {
		return err
	}
	sig := solana.MustSignatureFromBase58(sigStr)
	res, err := p.chain.Transaction(ctx, sig)
	if err != nil {
		return err
	}
	now := p.now().UnixNano()
	paid, err := inspect(res, p.wallet)
	switch {
	case errors.Is(err, ErrTxFailed):
		_, err = p.ledger.recordDeposit(sigStr, depositRec{Outcome: outcomeFailed, At: now}, nil)
		return err
	case err != nil || len(paid.Memos) != 1 || paid.Lamports == 0:
		_, err = p.ledger.recordDeposit(sigStr, depositRec{Outcome: outcomeUnmatched, At: now}, nil)
		return err
	}
	memo := string(paid.Memos[0])
	if strings.HasPrefix(memo, "tk_") {
		return p.credit(sigStr, memo, paid, now)
	}
	if strings.HasPrefix(memo, invoicePrefix) {
		return p.settleInvoice(ctx, sigStr, memo, paid, now)
	}
	if _, _, ok := parseNonce(memo); ok { // an x402 payment, served (or not) at its proof
		_, err = p.ledger.recordDeposit(sigStr, depositRec{Outcome: outcomeX402, Lamports: paid.Lamports, At: now}, nil)
		return err
	}
	_, err = p.ledger.recordDeposit(sigStr, depositRec{Outcome: outcomeUnmatched, Lamports: paid.Lamports, At: now}, nil)
	return err
}

// credit adds a deposit to the account its memo names, when it comes from
// the account's bound payer address.
func (p *Paywall) credit(sig, apiKey string, paid Paid, now int64) error {
	key := store.Key("x", "k", hashKey(apiKey))
	rec := depositRec{Outcome: outcomeUnmatched, Account: hashKey(apiKey), Lamports: paid.FromLamports, At: now}
	var a accountRec
	err := p.db().View(func(tx *store.Txn) error { return tx.GetJSON(key, &a) })
	if errors.Is(err, store.ErrNotFound) || err == nil && a.Payer != paid.From {
		p.log.Warn("deposit not credited: unknown api_key or not from the bound payer", "signature", sig, "from", paid.From)
		_, err = p.ledger.recordDeposit(sig, rec, nil)
		return err
	} else if err != nil {
		return err
	}
	rec.Outcome = outcomeCredited
	done, err := p.ledger.recordDeposit(sig, rec, func(tx *store.Txn) error {
		var a accountRec
		if err := tx.GetJSON(key, &a); err != nil {
			return err
		}
		if err := funded(tx, hashKey(apiKey), &a); err != nil {
			return err
		}
		total := addSat(a.Residue, paid.FromLamports)
		a.Credits = addSat(a.Credits, total/p.cfg.CreditDivisor)
		a.Residue = total % p.cfg.CreditDivisor
		a.Deposited = addSat(a.Deposited, paid.FromLamports)
		return tx.SetJSON(key, a)
	})
	if done {
		p.log.Info("deposit credited", "signature", sig, "lamports", paid.FromLamports)
	}
	return err
}

func (p *Paywall) db() *store.DB { return p.ledger.db }
