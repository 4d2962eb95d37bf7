package interop

import (
	"context"
	"encoding/hex"
	"errors"
	"net/http"
	"time"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/store"
)

// Post-pay (spec 3.4): a signed caller whose registered agent has a
// reputation score of at least PostpayMinReputation is served first and
// handed an invoice: the answer carries the X-Payment-* headers of a
// challenge (nonce = invoice id) and X-Postpay-Due. The caller pays the
// link whenever it likes before the due time; the deposit poller sees the
// transfer (memo = invoice id) and settles the invoice. A caller has at most
// one open invoice: while one is unpaid it pre-pays like anyone else.
//
// A caller that never pays lowers its own settlement score: when an
// invoice is overdue the provider files a signed reputation report about
// the caller's agent through the registry with paid=true, disputed=true
// (settlement counts paid-and-not-disputed over paid). A settled invoice
// files paid=true, disputed=false.

// invoicePrefix opens invoice nonces; the poller settles memos that carry it.
const invoicePrefix = "inv_"

// servePostpay serves a trusted caller and invoices it; served is false
// when the caller is not eligible.
func (p *Paywall) servePostpay(w http.ResponseWriter, r *http.Request, skill string, lamports uint64, next http.Handler) (bool, error) {
	c := CallerFrom(r.Context())
	min := p.cfg.PostpayMinReputation
	if min == nil || c.Pubkey == nil || p.registry == nil {
		return false, nil
	}
	openKey := store.Key("x", "o", hex.EncodeToString(c.Pubkey))
	if err := p.db().View(func(tx *store.Txn) error {
		_, err := tx.Get(openKey)
		return err
	}); err == nil {
		return false, nil // an invoice is still open
	} else if !errors.Is(err, store.ErrNotFound) {
		return false, err
	}
	id, score, err := p.registry.AgentByKey(r.Context(), c.Pubkey)
	if err != nil {
		p.log.Warn("post-pay: reputation lookup failed; pre-pay instead", "err", err)
		return false, nil
	}
	if id == "" || score == nil || *score < *min {
		return false, nil
	}
	now := p.now()
	due := now.Add(p.cfg.PostpayDue)
	rec := newCapture()
	next.ServeHTTP(withPaidBy(rec, r, "postpay"))
	if rec.status >= 500 {
		rec.flush(w)
		return true, nil
	}
	nonce := randomToken(invoicePrefix, 16)
	inv := invoiceRec{Caller: identity.EncodePublicKey(c.Pubkey), AgentID: id, Skill: skill, Lamports: lamports,
		Created: now.UnixNano(), Due: due.UnixNano()}
	err = p.ledger.update(func(tx *store.Txn) error {
		if err := tx.SetJSON(store.Key("x", "i", nonce), inv); err != nil {
			return err
		}
		return tx.Set(openKey, []byte(nonce))
	})
	if err != nil {
		return false, err
	}
	BuildChallenge(rec.header, Offer{Network: p.cfg.Network, PayTo: p.cfg.Wallet, Lamports: lamports, Nonce: nonce,
		Resource: "/v1/" + skill, ExpiresAt: due}, "", "")
	rec.header.Set(HeaderPostpayDue, due.UTC().Format(time.RFC3339))
	rec.flush(w)
	return true, nil
}

// settleInvoice marks an invoice paid by the transaction sig, exactly once.
func (p *Paywall) settleInvoice(ctx context.Context, sig, nonce string, paid Paid, now int64) error {
	ik := store.Key("x", "i", nonce)
	var inv invoiceRec
	err := p.db().View(func(tx *store.Txn) error { return tx.GetJSON(ik, &inv) })
	if errors.Is(err, store.ErrNotFound) {
		_, err = p.ledger.recordDeposit(sig, depositRec{Outcome: outcomeUnmatched, Lamports: paid.Lamports, At: now}, nil)
		return err
	} else if err != nil {
		return err
	}
	if inv.PaidSig != "" || paid.Lamports < inv.Lamports {
		_, err := p.ledger.recordDeposit(sig, depositRec{Outcome: outcomeUnmatched, Lamports: paid.Lamports, At: now}, nil)
		return err
	}
	done, err := p.ledger.recordDeposit(sig, depositRec{Outcome: outcomeInvoice, Lamports: paid.Lamports, At: now}, func(tx *store.Txn) error {
		inv.PaidSig = sig
		if err := tx.SetJSON(ik, inv); err != nil {
			return err
		}
		pub, err := identity.DecodePublicKey(inv.Caller)
		if err != nil {
			return err
		}
		return tx.Delete(store.Key("x", "o", hex.EncodeToString(pub)))
	})
	if done && !inv.Reported {
		p.report(ctx, inv, false)
	}
	return err
}

// checkInvoices reports the callers of overdue invoices, once each.
func (p *Paywall) checkInvoices(ctx context.Context) error {
	now := p.now().UnixNano()
	var overdue []string
	var invs []invoiceRec
	err := p.db().View(func(tx *store.Txn) error {
		prefix := store.Key("x", "i", "")
		return tx.Scan(prefix, nil, func(k, v []byte) (bool, error) {
			var inv invoiceRec
			if err := jsonUnmarshal(v, &inv); err != nil {
				return false, err
			}
			if inv.PaidSig == "" && !inv.Reported && inv.Due < now {
				overdue = append(overdue, string(k[len(prefix):]))
				invs = append(invs, inv)
			}
			return true, nil
		})
	})
	if err != nil {
		return err
	}
	for i, nonce := range overdue {
		if !p.report(ctx, invs[i], true) {
			continue
		}
		inv := invs[i]
		inv.Reported = true
		if err := p.ledger.update(func(tx *store.Txn) error { return tx.SetJSON(store.Key("x", "i", nonce), inv) }); err != nil {
			return err
		}
		p.log.Info("post-pay invoice overdue; caller reported", "agent", inv.AgentID, "invoice", nonce)
	}
	return nil
}

// report files the settlement report about an invoice's caller.
func (p *Paywall) report(ctx context.Context, inv invoiceRec, disputed bool) bool {
	if p.registry == nil || inv.AgentID == "" {
		return false
	}
	err := p.registry.Report(ctx, inv.AgentID, Report{Success: true, Paid: true, Disputed: disputed, Capability: inv.Skill})
	if err != nil {
		p.log.Warn("filing a settlement report failed; retried later", "agent", inv.AgentID, "err", err)
		return false
	}
	return true
}
