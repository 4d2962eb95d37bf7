package interop

import (
	"context"
	"encoding/hex"
	"errors"
	"net/http"
	"time"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/httpx"
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
// A caller that never pays lowers its own score: when an invoice is
// overdue the provider files a signed reputation report about the caller's
// agent through the registry with success=false, paid=true, disputed=true
// (reliability counts successes, settlement paid-and-not-disputed over
// paid). A settled invoice files success=true, paid=true, disputed=false.
// Neither carries latency_ms: no call was timed, so speed is not touched.
//
// The invoice check touches only the invoices it watches (x/w/<nonce>):
// an invoice is watched from its reservation, in the same transaction,
// until a check finds nothing left to do about it (paid and its settlement
// reported, or its default reported). The check then retires it: it moves
// to a removal queue (x/r/<time>/<nonce>) and is removed InvoiceRetention
// after that check (the first after the report), at the first poll that
// read the wallet past that time, with the caller's open mark of a default
// never paid (the default is remembered by the caller's reputation). Until
// then a late payment of a default still settles it. An invoice is deleted
// early only when its call was not delivered (released or dropped), and
// then with its index entry. So an invoice unpaid and not yet reported
// never leaves the check's sight; a reported default never paid does, and
// is removed after the retention.

// invoicePrefix opens invoice nonces; the poller settles memos that carry it.
const invoicePrefix = "inv_"

// servePostpay serves a trusted caller and invoices it; served is false
// when the caller is not eligible. The caller's one open invoice is
// reserved atomically before the skill runs, so concurrent calls get one
// delivery on credit between them; a 5xx answer releases it.
func (p *Paywall) servePostpay(w http.ResponseWriter, r *http.Request, skill string, lamports uint64, next http.Handler) (bool, error) {
	c := CallerFrom(r.Context())
	min := p.cfg.PostpayMinReputation
	if min == nil || c.Pubkey == nil || p.registry == nil {
		return false, nil
	}
	pubHex := hex.EncodeToString(c.Pubkey)
	if open, err := p.ledger.openInvoice(pubHex); err != nil || open {
		return false, err // spares the registry lookup; the reservation decides
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
	nonce := randomToken(invoicePrefix, 16)
	inv := invoiceRec{Caller: identity.EncodePublicKey(c.Pubkey), AgentID: id, Skill: skill, Lamports: lamports,
		Created: now.UnixNano(), Due: now.Add(p.cfg.PostpayDue).UnixNano(), Pending: true}
	if ok, err := p.ledger.reserveInvoice(pubHex, nonce, inv); err != nil || !ok {
		return false, err
	}
	p.running.Store(nonce, struct{}{})
	defer p.running.Delete(nonce)
	rec := runPaid(r, "postpay", next)
	if rec.status >= 500 {
		if err := p.ledger.releaseInvoice(pubHex, nonce); err != nil {
			p.log.Error("post-pay: releasing the invoice of a failed call", "invoice", nonce, "err", err)
		}
		rec.flush(w)
		return true, nil
	}
	due := p.now().Add(p.cfg.PostpayDue)
	if err := p.ledger.deliveredInvoice(nonce, due); err != nil {
		// Served but not owed would be a service without payment: the
		// answer is withheld, and nothing is owed.
		p.log.Error("post-pay: marking an invoice delivered failed; the answer is withheld", "invoice", nonce, "err", err)
		if err := p.ledger.releaseInvoice(pubHex, nonce); err != nil {
			p.log.Error("post-pay: releasing the invoice of a withheld answer", "invoice", nonce, "err", err)
		}
		return true, httpx.ErrUnavailable.With("the provider could not record the invoice, so the answer is withheld and nothing is owed; try again")
	}
	BuildChallenge(rec.header, Offer{Network: p.cfg.Network, PayTo: p.cfg.Wallet, Lamports: lamports, Nonce: nonce,
		Resource: "/v1/" + skill, ExpiresAt: due}, "", "")
	rec.header.Set(HeaderPostpayDue, due.UTC().Format(time.RFC3339))
	rec.flush(w)
	return true, nil
}

// openInvoice reports whether the caller (hex key) has an open invoice.
func (l *ledger) openInvoice(pubHex string) (bool, error) { return l.has(store.Key("x", "o", pubHex)) }

// reserveInvoice stores inv under nonce as the caller's open invoice,
// unless the caller already has one (ok false, nothing stored).
func (l *ledger) reserveInvoice(pubHex, nonce string, inv invoiceRec) (ok bool, err error) {
	openKey := store.Key("x", "o", pubHex)
	err = l.update(func(tx *store.Txn) error {
		if open, err := tx.Has(openKey); err != nil || open {
			return err
		}
		if err := tx.SetJSON(store.Key("x", "i", nonce), inv); err != nil {
			return err
		}
		if err := tx.Set(store.Key("x", "w", nonce), nil); err != nil {
			return err
		}
		ok = true
		return tx.Set(openKey, []byte(nonce))
	})
	return ok, err
}

// releaseInvoice removes an invoice whose call was not delivered.
func (l *ledger) releaseInvoice(pubHex, nonce string) error {
	return l.update(func(tx *store.Txn) error { return deleteInvoice(tx, pubHex, nonce) })
}

// deleteInvoice removes invoice nonce of the caller pubHex, its index
// entry and, when it is the caller's open one, the open mark.
func deleteInvoice(tx *store.Txn, pubHex, nonce string) error {
	if err := closeInvoice(tx, pubHex, nonce); err != nil {
		return err
	}
	if err := tx.Delete(store.Key("x", "w", nonce)); err != nil {
		return err
	}
	return tx.Delete(store.Key("x", "i", nonce))
}

// callerHex is the hex key of the invoice's caller, that of its open mark.
func (inv *invoiceRec) callerHex() (string, error) {
	pub, err := identity.DecodePublicKey(inv.Caller)
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(pub), nil
}

// done: nothing is left to do about the invoice: it was paid and its
// settlement reported, or its default was reported.
func (inv *invoiceRec) done() bool {
	return !inv.Pending && !inv.Unsettled && (inv.PaidSig != "" || inv.Reported)
}

// closeInvoice clears the caller's open mark if it names nonce.
func closeInvoice(tx *store.Txn, pubHex, nonce string) error {
	openKey := store.Key("x", "o", pubHex)
	cur, err := tx.Get(openKey)
	if errors.Is(err, store.ErrNotFound) || err == nil && string(cur) != nonce {
		return nil
	} else if err != nil {
		return err
	}
	return tx.Delete(openKey)
}

// deliveredInvoice marks an invoice's call answered: from now on it is
// owed, by due (counted from the answer, however long the call ran).
func (l *ledger) deliveredInvoice(nonce string, due time.Time) error {
	ik := store.Key("x", "i", nonce)
	return l.update(func(tx *store.Txn) error {
		var inv invoiceRec
		if err := tx.GetJSON(ik, &inv); err != nil {
			return err
		}
		inv.Pending, inv.Due = false, due.UnixNano()
		return tx.SetJSON(ik, inv)
	})
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
		if err := tx.GetJSON(ik, &inv); err != nil { // as it is now: a check may have marked it
			return err
		}
		inv.PaidSig, inv.Unsettled = sig, !inv.Reported
		if err := tx.SetJSON(ik, inv); err != nil {
			return err
		}
		pubHex, err := inv.callerHex()
		if err != nil {
			return err
		}
		return closeInvoice(tx, pubHex, nonce)
	})
	if err != nil || !done || !inv.Unsettled {
		return err
	}
	if over, refused := p.report(ctx, inv, false); over {
		err = p.ledger.markInvoice(nonce, func(inv *invoiceRec) { inv.Unsettled, inv.Refused = false, refused })
	}
	return err
}

// checkInvoices goes through the watched invoices: it reports the callers
// of overdue invoices, once each, files the settlement reports of paid
// invoices that failed before, and retires the invoices done with. An
// invoice whose call is not answered by its due time is dropped, unless
// the call is still running here (a call pending past its due time that is
// not running was cut short by a crash: nothing was delivered). Each
// invoice is judged as it is in the ledger then, not as the scan saw it:
// a call may be answered, or an invoice paid, meanwhile.
func (p *Paywall) checkInvoices(ctx context.Context) error {
	p.checking.Lock()
	defer p.checking.Unlock()
	now := p.now().UnixNano()
	var done, overdue, unsettled, orphans []string
	err := p.db().View(func(tx *store.Txn) error {
		prefix := store.Key("x", "w", "")
		return tx.Scan(prefix, nil, func(k, _ []byte) (bool, error) {
			nonce := string(k[len(prefix):])
			var inv invoiceRec
			err := tx.GetJSON(store.Key("x", "i", nonce), &inv)
			switch {
			case errors.Is(err, store.ErrNotFound):
				orphans = append(orphans, nonce)
				return true, nil
			case err != nil:
				return false, err
			}
			switch {
			case inv.done():
				done = append(done, nonce)
			case inv.Unsettled:
				unsettled = append(unsettled, nonce)
			case inv.PaidSig == "" && !inv.Reported && inv.Due < now:
				overdue = append(overdue, nonce)
			}
			return true, nil
		})
	})
	if err != nil {
		return err
	}
	for _, nonce := range orphans {
		if err := p.ledger.dropOrphan(nonce); err != nil {
			return err
		}
		p.log.Warn("post-pay: an index entry without its invoice removed", "invoice", nonce)
	}
	removeAt := p.now().Add(p.cfg.InvoiceRetention)
	for _, nonce := range done { // done invoices never reopen
		if err := p.ledger.retireInvoice(nonce, removeAt); err != nil {
			return err
		}
	}
	if g, err := p.ledger.gap(); err != nil {
		return err
	} else if g != nil {
		overdue = nil // the wallet's backlog is still being read: a payment may be in it
	}
	for _, nonce := range unsettled {
		if err := p.settleReport(ctx, nonce); err != nil {
			return err
		}
	}
	for _, nonce := range overdue {
		if _, running := p.running.Load(nonce); running {
			continue // answered late; owed from its answer
		}
		inv, dropped, err := p.ledger.dropIfPending(nonce)
		if errors.Is(err, store.ErrNotFound) {
			continue // released (its call failed), or another check dropped it
		} else if err != nil {
			return err
		}
		if dropped {
			p.log.Warn("post-pay invoice of a call never answered dropped", "agent", inv.AgentID, "invoice", nonce)
			continue
		}
		if inv.PaidSig != "" || inv.Reported || inv.Due >= now {
			continue
		}
		over, refused := p.report(ctx, inv, true)
		if !over {
			continue
		}
		if err := p.ledger.markInvoice(nonce, func(inv *invoiceRec) { inv.Reported, inv.Refused = true, refused }); err != nil {
			return err
		}
		if !refused {
			p.log.Info("post-pay invoice overdue; caller reported", "agent", inv.AgentID, "invoice", nonce)
		}
	}
	return nil
}

// dropIfPending removes invoice nonce if its call was never answered, and
// returns the invoice as it is now.
func (l *ledger) dropIfPending(nonce string) (inv invoiceRec, dropped bool, err error) {
	err = l.update(func(tx *store.Txn) error {
		if err := tx.GetJSON(store.Key("x", "i", nonce), &inv); err != nil || !inv.Pending {
			return err
		}
		pubHex, err := inv.callerHex()
		if err != nil {
			return err
		}
		dropped = true
		return deleteInvoice(tx, pubHex, nonce)
	})
	return inv, dropped, err
}

// retireInvoice moves invoice nonce, done with, from the check's index
// to the queue of invoices removed at removeAt; one no longer in the index
// (retired or removed meanwhile) is left as it is, so that it is never
// queued twice.
func (l *ledger) retireInvoice(nonce string, removeAt time.Time) error {
	wk := store.Key("x", "w", nonce)
	return l.update(func(tx *store.Txn) error {
		if ok, err := tx.Has(wk); err != nil || !ok {
			return err
		}
		if err := tx.Delete(wk); err != nil {
			return err
		}
		return tx.Set(queueKey(retiredQueue, removeAt.UnixNano(), nonce), nil)
	})
}

// dropOrphan removes the index entry of invoice nonce if the invoice is
// gone (deleted by a version that kept no index): nothing is left to
// check.
func (l *ledger) dropOrphan(nonce string) error {
	return l.update(func(tx *store.Txn) error {
		if ok, err := tx.Has(store.Key("x", "i", nonce)); err != nil || ok {
			return err
		}
		return tx.Delete(store.Key("x", "w", nonce))
	})
}

// dropRetired removes invoice nonce, retired and now due, with the
// caller's open mark when it names it (a default never paid): the caller
// may be served on credit again if its reputation allows. One already
// gone (removed by a version that kept no queue) is done with.
func dropRetired(tx *store.Txn, _ int64, nonce string) error {
	var inv invoiceRec
	if err := tx.GetJSON(store.Key("x", "i", nonce), &inv); errors.Is(err, store.ErrNotFound) {
		return nil
	} else if err != nil {
		return err
	}
	pubHex, err := inv.callerHex()
	if err != nil {
		return err
	}
	return deleteInvoice(tx, pubHex, nonce)
}

// settleReport files the settlement report of paid invoice nonce, unless
// it was filed meanwhile.
func (p *Paywall) settleReport(ctx context.Context, nonce string) error {
	var inv invoiceRec
	err := p.db().View(func(tx *store.Txn) error { return tx.GetJSON(store.Key("x", "i", nonce), &inv) })
	if errors.Is(err, store.ErrNotFound) {
		return nil
	} else if err != nil {
		return err
	}
	if !inv.Unsettled {
		return nil
	}
	over, refused := p.report(ctx, inv, false)
	if !over {
		return nil
	}
	return p.ledger.markInvoice(nonce, func(inv *invoiceRec) { inv.Unsettled, inv.Refused = false, refused })
}

// markInvoice records what mark changes in invoice nonce.
func (l *ledger) markInvoice(nonce string, mark func(*invoiceRec)) error {
	ik := store.Key("x", "i", nonce)
	return l.update(func(tx *store.Txn) error {
		var inv invoiceRec
		if err := tx.GetJSON(ik, &inv); err != nil {
			return err
		}
		mark(&inv)
		return tx.SetJSON(ik, inv)
	})
}

// report files the settlement report about an invoice's caller and
// says whether that is over: filed, or refused by the registry for good
// (refused; a 4xx answer other than 429, logged). Otherwise a later check
// files it again.
func (p *Paywall) report(ctx context.Context, inv invoiceRec, disputed bool) (over, refused bool) {
	if p.registry == nil || inv.AgentID == "" {
		return false, false
	}
	// A default is a failed exchange (success false): reliability and
	// settlement both fall. No latency is invented for either outcome.
	err := p.registry.Report(ctx, inv.AgentID, Report{Success: !disputed, Paid: true, Disputed: disputed, Capability: inv.Skill})
	var re *RegistryError
	switch {
	case err == nil:
		return true, false
	case errors.As(err, &re) && re.Final():
		p.log.Error("the registry refused a settlement report for good; it is not filed again, and the invoice is done with",
			"agent", inv.AgentID, "disputed", disputed, "err", err)
		return true, true
	}
	p.log.Warn("filing a settlement report failed; retried later", "agent", inv.AgentID, "err", err)
	return false, false
}
