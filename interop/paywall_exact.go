package interop

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/gagliardetto/solana-go"

	"github.com/agentmesh/mesh/store"
)

// serveExact serves a request that carries an x402 payment payload of
// version v (PAYMENT-SIGNATURE, or v1's X-PAYMENT): a partially signed
// transaction that pays one of the skill's token rows. It passes the
// rules, names a challenge issued to this very request (its memo is the
// nonce), its blockhash is still valid; then it is claimed, durably and
// atomically with its nonce, before the fee payer signs and submits it, so
// that no payment is ever settled twice, also across a restart. A payment
// claimed before is served from its claim: its cached answer when it was
// settled, a new look at its transaction when it is still pending.
func (p *Paywall) serveExact(w http.ResponseWriter, r *http.Request, pc *paidCall, value string, v int, next http.Handler) error {
	if p.settler == nil || len(pc.tokens) == 0 {
		return p.refuse(w, pc, ErrSchemeUnsupported.With("skill %s takes no x402 v2 payment: it has no SPL token price on %s or the agent no fee payer; pay per the X-Payment-* challenge", pc.skill, p.cfg.Network))
	}
	_, tx, err := decodePayment(value, v, p.network)
	if err != nil {
		return p.refuse(w, pc, err)
	}
	if len(tx.sigs) != 2 {
		return p.refuse(w, pc, ErrSignersInvalid.With("the transaction carries %d signatures; exactly 2 are taken", len(tx.sigs)))
	}
	key := solana.SignatureFromBytes(tx.sigs[1]).String() // the payer's: the payment's id before the fee payer signs
	unlock := p.ledger.lock(key)
	defer unlock()
	c, err := p.ledger.claimOf(key)
	switch {
	case err == nil && !c.Pending:
		return p.serveClaim(w, r, pc, key, "", c, next)
	case err != nil && !errors.Is(err, store.ErrNotFound):
		return err
	}
	ep, err := p.exactPayment(pc, tx)
	if err != nil {
		return p.refuse(w, pc, err)
	}
	if c != nil { // pending: submitted before, outcome unknown
		if err := claimFits(pc, key, ep.pay.memo, c); err != nil {
			return p.refuse(w, pc, err)
		}
		return p.settleClaimed(w, r, pc, key, c, ep, true, next)
	}
	c, ttl, err := p.admitExact(w, r, pc, ep, v)
	if err != nil {
		return p.refuse(w, pc, err)
	}
	if err := p.ledger.claim(key, c.Nonce, *c, ttl); err != nil {
		return p.refuse(w, pc, err)
	}
	return p.settleClaimed(w, r, pc, key, c, ep, false, next)
}

// exactPayment runs the rules of the exact scheme on tx against the
// call's token rows and returns the payment with the requirements it meets.
func (p *Paywall) exactPayment(pc *paidCall, tx *svmTx) (*exactPayment, error) {
	pay, err := checkExact(tx, exactTerms{rows: pc.tokens, payTo: p.wallet, feePayer: p.settler.feePayer(),
		maxUnits: p.cfg.MaxComputeUnits, maxPrice: p.cfg.MaxComputeUnitPrice})
	if err != nil {
		return nil, err
	}
	req := requirementsOf(Prices{pay.row}, p.network, p.cfg.Wallet, p.settler.feePayer().String(), pay.memo, int(p.cfg.ChallengeTTL/time.Second))[0]
	return &exactPayment{tx: tx, pay: pay, req: req, resource: pc.resource}, nil
}

// admitExact checks what is left before a payment that passed the rules is
// claimed: its memo is a live nonce issued to this request, the caller is
// within its rate of checks that reach the chain, and the settler finds
// it valid. It returns the claim to make and how long its nonce's mark
// must live.
func (p *Paywall) admitExact(w http.ResponseWriter, r *http.Request, pc *paidCall, ep *exactPayment, v int) (*claimRec, time.Duration, error) {
	terms, err := p.openNonce(ep.pay.memo, pc)
	if err != nil {
		return nil, 0, err
	}
	now := p.now()
	if now.After(terms.Expires) {
		return nil, 0, ErrNonceExpired.With("the challenge expired at %s; pay the fresh one", terms.Expires.UTC().Format(time.RFC3339))
	}
	if !p.proofs.Bucket(pc.addr, now).AllowN(now, 1) {
		retryAfter(w, 5*time.Second)
		return nil, 0, ErrProofRateLimited
	}
	if err := p.settler.verify(r.Context(), ep); err != nil {
		return nil, 0, err
	}
	c := &claimRec{Nonce: ep.pay.memo, Skill: pc.skill, At: now.UnixNano(), Bind: pc.bind.bodyHex(), Pending: true,
		Asset: ep.pay.row.Asset, Amount: ep.pay.row.Amount, Payer: ep.pay.authority.String(), Version: v}
	if terms.Keyed {
		c.Key = pc.bind.keyText()
	}
	return c, terms.Expires.Add(nonceGrace).Sub(now), nil
}

// settleClaimed has the settler land a claimed payment, then serves the
// call. Settlement does not hang on the client's connection: a client
// that goes away finds the answer cached when it retries. A payment that
// did not land and never will is unclaimed, its nonce free again; one
// whose outcome is open stays claimed for the retry.
func (p *Paywall) settleClaimed(w http.ResponseWriter, r *http.Request, pc *paidCall, key string, c *claimRec, ep *exactPayment, resume bool, next http.Handler) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), p.cfg.SettleTimeout)
	tx, err := p.settler.settle(ctx, ep, resume)
	cancel()
	switch {
	case errors.Is(err, ErrSettlementPending):
		return p.refuse(w, pc, err)
	case err != nil:
		if uerr := p.ledger.unclaim(key, c.Nonce); uerr != nil {
			return uerr
		}
		if errors.Is(err, ErrTxRejected) { // a missing account of the wallet's is one cause: say so
			err = p.rejected(context.WithoutCancel(r.Context()), ep.pay.row, err)
		}
		return p.refuse(w, pc, err)
	}
	settle := EncodeHeader(SettleResponse{Success: true, Transaction: tx, Network: p.network, Payer: c.Payer})
	if c, err = p.ledger.settled(key, tx, settle); err != nil {
		return err
	}
	p.log.Info("x402 v2 payment settled", "skill", pc.skill, "transaction", tx, "asset", c.Asset, "amount", c.Amount)
	return p.serveClaimed(w, r, key, c, next)
}
