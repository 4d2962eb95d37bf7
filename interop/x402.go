package interop

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/gagliardetto/solana-go"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/httpx"
	"github.com/agentmesh/mesh/store"
)

// paidCall is one request to a priced skill, as the paywall sees it.
type paidCall struct {
	skill    string
	lamports uint64
	tokens   Prices // its token rows on the payment network, mints filled in
	bind     binding
	addr     string // the client's address (addrKey)
	resource ResourceInfo
}

// challenge answers 402 with a fresh nonce bound to the request; cause
// says why. Without the x402 mode there is nothing to pay per call: the
// 402 says to top up.
func (p *Paywall) challenge(w http.ResponseWriter, pc *paidCall, cause *httpx.Error) error {
	if !p.cfg.has(ModeX402) {
		return cause.With("%s; this agent takes prepaid deposits only: POST /v1/topup, then call with X-Api-Key", cause.Detail)
	}
	key, err := p.ledger.macKey()
	if err != nil {
		return err
	}
	exp := time.Unix(p.now().Add(p.cfg.ChallengeTTL).Unix(), 0) // the nonce keeps whole seconds
	nonce := newNonce(key, p.cfg.Network, p.cfg.Wallet, nonceTerms{Expires: exp, Lamports: pc.lamports}, pc.bind)
	var body []byte
	if pc.lamports > 0 {
		body = BuildChallenge(w.Header(), Offer{Network: p.cfg.Network, PayTo: p.cfg.Wallet, Lamports: pc.lamports,
			Nonce: nonce, Resource: "/v1/" + pc.skill, ExpiresAt: exp}, cause.Code, cause.Detail)
	} else {
		if cause == ErrPaymentRequired {
			cause = cause.With("%s: skill %s is priced only in SPL tokens, which x402 v2 pays (%s); "+
				"the seed's X-Payment-Proof, a prepaid balance and post-pay are in lamports and pay nothing of it", cause.Detail, pc.skill, strings.ToUpper(HeaderPaymentRequired))
		}
		body = tokensOnlyChallenge(pc.tokens, p.cfg.Wallet, cause.Code, cause.Detail)
	}
	if p.settler != nil && len(pc.tokens) > 0 {
		w.Header().Set(HeaderPaymentRequired, EncodeHeader(PaymentRequired{X402Version: X402Version2, Error: cause.Detail,
			Resource: pc.resource, Accepts: requirementsOf(pc.tokens, p.network, p.cfg.Wallet, p.settler.feePayer().String(),
				nonce, int(p.cfg.ChallengeTTL/time.Second))}))
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusPaymentRequired)
	w.Write(append(body, '\n'))
	return nil
}

// refuse answers a failed check: 402 causes come with a fresh challenge,
// anything else is returned as an error.
func (p *Paywall) refuse(w http.ResponseWriter, pc *paidCall, err error) error {
	var e *httpx.Error
	if errors.As(err, &e) && e.Status == http.StatusPaymentRequired {
		if e.Cause() != nil {
			p.log.Warn("payment check failed upstream", "code", e.Code, "err", e)
		}
		return p.challenge(w, pc, e)
	}
	return err
}

// serveProof serves a request that carries X-Payment-Proof: a signature
// already claimed replays its answer to the request it paid for; a new one
// is verified, claimed, and served.
func (p *Paywall) serveProof(w http.ResponseWriter, r *http.Request, pc *paidCall, proof string, next http.Handler) error {
	if pc.lamports == 0 {
		return p.refuse(w, pc, errTokensOnly("skill "+pc.skill+" is"))
	}
	if len(proof) > 100 { // before decoding: base58 costs quadratic time
		return p.refuse(w, pc, ErrProofMalformed)
	}
	sig, err := solana.SignatureFromBase58(proof)
	if err != nil {
		return p.refuse(w, pc, ErrProofMalformed)
	}
	unlock := p.ledger.lock(sig.String())
	defer unlock()
	nonce := r.Header.Get(HeaderPaymentNonce)
	if c, err := p.ledger.claimOf(sig.String()); err == nil {
		return p.serveClaim(w, r, pc, sig.String(), nonce, c, next)
	} else if !errors.Is(err, store.ErrNotFound) {
		return err
	}
	v, err := p.verifyProof(r.Context(), pc, sig, nonce)
	if errors.Is(err, ErrProofRateLimited) {
		retryAfter(w, 5*time.Second)
	}
	if err != nil {
		return p.refuse(w, pc, err)
	}
	c := claimRec{Nonce: v.nonce, Skill: pc.skill, Lamports: v.paid.Lamports, At: p.now().UnixNano(), Bind: pc.bind.bodyHex()}
	if v.terms.Keyed {
		c.Key = pc.bind.keyText()
	}
	if err := p.ledger.claim(sig.String(), v.nonce, c, v.terms.Expires.Add(nonceGrace).Sub(p.now())); err != nil {
		return p.refuse(w, pc, err)
	}
	p.log.Info("x402 payment accepted", "skill", pc.skill, "signature", sig.String(), "lamports", v.paid.Lamports)
	return p.serveClaimed(w, r, sig.String(), &c, next)
}

// claimFits checks that a claimed payment is presented for the request it
// paid for: the same nonce (when the request names one) and binding.
func claimFits(pc *paidCall, sig, nonce string, c *claimRec) error {
	if nonce != "" && c.Nonce != nonce {
		return ErrProofUsed.With("transaction %s already paid for another challenge", sig)
	}
	if c.Bind != pc.bind.bodyHex() || c.Key != "" && c.Key != pc.bind.keyText() {
		return ErrPaymentBinding.With("transaction %s paid for another request; only the same skill, body and Mesh-Sig key are served", sig)
	}
	return nil
}

// serveClaim answers a payment already claimed as key: only the request
// it paid for (same nonce, same binding) is served, from the cached answer
// when there is one.
func (p *Paywall) serveClaim(w http.ResponseWriter, r *http.Request, pc *paidCall, key, nonce string, c *claimRec, next http.Handler) error {
	if err := claimFits(pc, c.tx(key), nonce, c); err != nil {
		return p.refuse(w, pc, err)
	}
	if !c.Served && c.Runs >= maxUncachedRuns {
		return ErrAnswerGone.With("the answer paid by %s was too large to keep and has been served %d times", c.tx(key), c.Runs)
	}
	if !c.Served {
		return p.serveClaimed(w, r, key, c, next) // its answer failed or was too large to keep: serve again
	}
	h := w.Header()
	p.paidHeaders(h, r, c.Status, key, c, c.At/int64(time.Second))
	h.Set(HeaderPaymentReplay, "true")
	if c.Type != "" {
		h.Set("Content-Type", c.Type)
	}
	w.WriteHeader(c.Status)
	w.Write(c.Body)
	return nil
}

// verified is a proof that passed every check of spec 3.3.
type verified struct {
	nonce string
	terms nonceTerms
	paid  Paid
}

// verifyProof runs the checks of spec 3.3 on an unclaimed signature. The
// nonce (from X-Payment-Nonce, else the memo) must have been issued to
// this very request; with the header it is checked before the chain is
// asked, so forged nonces cost no RPC call.
func (p *Paywall) verifyProof(ctx context.Context, pc *paidCall, sig solana.Signature, nonce string) (verified, error) {
	v := verified{nonce: nonce}
	var err error
	if nonce != "" {
		if v.terms, err = p.openProofNonce(nonce, pc); err != nil {
			return v, err
		}
	}
	if now := p.now(); !p.proofs.Bucket(pc.addr, now).AllowN(now, 1) {
		return v, ErrProofRateLimited
	}
	res, err := p.chain.Transaction(ctx, sig)
	if err != nil {
		return v, err
	}
	if v.paid, err = inspect(res, p.wallet); err != nil {
		return v, err
	}
	if v.paid.Signature != sig.String() {
		return v, ErrTxMalformed.With("the RPC returned another transaction than %s", sig)
	}
	if nonce == "" { // no X-Payment-Nonce: the memo names the challenge
		if len(v.paid.Memos) != 1 {
			return v, checkPayment(v.paid, pc.lamports, "")
		}
		v.nonce = string(v.paid.Memos[0])
		if v.terms, err = p.openProofNonce(v.nonce, pc); err != nil {
			return v, err
		}
	}
	if err := checkPayment(v.paid, v.terms.Lamports, v.nonce); err != nil {
		return v, err
	}
	landed := p.now()
	if v.paid.BlockTime > 0 {
		landed = time.Unix(v.paid.BlockTime, 0)
	}
	if landed.After(v.terms.Expires) {
		return v, ErrNonceExpired.With("nonce expired at %s; the transaction landed at %s",
			v.terms.Expires.UTC().Format(time.RFC3339), landed.UTC().Format(time.RFC3339))
	}
	return v, nil
}

// openProofNonce is openNonce for the seed's proof: a nonce of a
// challenge that priced nothing in lamports (a skill priced only in
// tokens) takes none.
func (p *Paywall) openProofNonce(nonce string, pc *paidCall) (nonceTerms, error) {
	t, err := p.openNonce(nonce, pc)
	if err == nil && t.Lamports == 0 {
		return t, errTokensOnly("the challenge of this nonce was")
	}
	return t, err
}

// errTokensOnly refuses the seed's proof of what (a skill, a challenge)
// is priced only in tokens.
func errTokensOnly(what string) error {
	return ErrSchemeUnsupported.With("%s priced only in SPL tokens, which x402 v2 pays (%s, then %s); "+
		"X-Payment-Proof pays nothing of it", what, strings.ToUpper(HeaderPaymentRequired), strings.ToUpper(HeaderPaymentSignature))
}

// openNonce checks that nonce was issued here to this request, is not
// past its grace period and is not paid yet.
func (p *Paywall) openNonce(nonce string, pc *paidCall) (nonceTerms, error) {
	key, err := p.ledger.macKey()
	if err != nil {
		return nonceTerms{}, err
	}
	t, err := openNonce(key, p.cfg.Network, p.cfg.Wallet, nonce, pc.bind)
	if err != nil {
		return t, err
	}
	if late := t.Expires.Add(nonceGrace); p.now().After(late) {
		return t, ErrNonceExpired.With("nonce expired at %s; proofs of it were taken until %s",
			t.Expires.UTC().Format(time.RFC3339), late.UTC().Format(time.RFC3339))
	}
	if used, err := p.ledger.nonceUsed(nonce); err != nil || used {
		if used {
			return t, ErrNonceUsed
		}
		return t, err
	}
	return t, nil
}

// serveClaimed runs next for a payment claimed as key and caches its
// answer. A 5xx answer is not cached, so a retry with the same proof runs
// again; nor is one over maxCachedBody: a replay of it runs the skill
// again (for the same request, which the binding ensures) rather than
// serve less, up to maxUncachedRuns runs in all.
func (p *Paywall) serveClaimed(w http.ResponseWriter, r *http.Request, key string, c *claimRec, next http.Handler) error {
	rec := runPaid(r, "x402", next)
	p.paidHeaders(rec.header, r, rec.status, key, c, p.now().Unix())
	if rec.status < 500 {
		if err := p.ledger.served(key, rec.status, rec.header.Get("Content-Type"), rec.body.Bytes()); err != nil {
			p.log.Error("caching a paid answer", "signature", key, "err", err)
		}
	}
	rec.flush(w)
	return nil
}

// paidHeaders sets what an answer paid per x402 carries: the receipt, the
// transaction (X-Payment-Proof) and, for x402 v2, the settlement receipt.
func (p *Paywall) paidHeaders(h http.Header, r *http.Request, status int, key string, c *claimRec, at int64) {
	receipt := identity.Receipt{By: ModeX402, Ref: c.tx(key), Lamports: c.Lamports, Asset: c.Asset, Amount: c.Amount, At: at}
	if payer, err := solana.PublicKeyFromBase58(c.Payer); err == nil {
		receipt.Payer = identity.EncodePublicKey(payer[:])
	}
	p.receipts.attach(h, r, status, receipt)
	h.Set(HeaderPaymentProof, c.tx(key))
	if c.Settle != "" {
		h.Set(responseHeaderOf(c.Version), c.Settle)
	}
}

// tx is the signature of the transaction that paid the claim keyed key.
func (c *claimRec) tx(key string) string {
	if c.Tx != "" {
		return c.Tx
	}
	return key
}
