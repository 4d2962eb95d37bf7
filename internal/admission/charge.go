package admission

import (
	"context"
	"sync"
)

// A write the directory sheds (ErrDirectoryBusy: the log at its capacity,
// or the node that forwarded it over its share) was not the client's
// doing: the tokens it took on its way, from its client's budgets and its
// node's, are given back. Every Admit of a write records what it took in
// the write's context (Charged); whoever learns that the directory shed
// it refunds them (Refund): the directory's proposer, and a node the
// directory answered so.

// charge is what one Admit took for a write.
type charge struct {
	a      *Admitter
	keys   []Key
	parent *charge
	once   sync.Once
}

type chargeKey struct{}

// Charged records in ctx that a took a token of each of keys for the
// write ctx carries.
func (a *Admitter) Charged(ctx context.Context, keys ...Key) context.Context {
	parent, _ := ctx.Value(chargeKey{}).(*charge)
	return context.WithValue(ctx, chargeKey{}, &charge{a: a, keys: keys, parent: parent})
}

// Refund gives back what the write ctx carries took (Charged), once: the
// directory shed it.
func Refund(ctx context.Context) {
	for c, _ := ctx.Value(chargeKey{}).(*charge); c != nil; c = c.parent {
		c.once.Do(func() { c.a.refund(c.keys) })
	}
}

// refund puts a token back in the bucket of each of keys, up to its
// burst.
func (a *Admitter) refund(keys []Key) {
	now := a.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, k := range keys {
		if _, l := a.bucket(k, now); l != nil && l.TokensAt(now) <= float64(l.Burst())-1 {
			l.AllowN(now, -1) // takes minus one: gives one back
		}
	}
}
