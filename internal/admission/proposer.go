package admission

import (
	"context"

	"github.com/agentmesh/mesh/internal/cmdlog"
)

// Proposer meters the directory's log: every proposal takes a token from
// the directory budget before Next sequences it, whoever proposed it (a
// client of this node, a forwarded request, another node's proposal). It
// wraps whichever proposer orders the log, so the meter stays on the
// propose path when that changes. The directory's own housekeeping
// (expiries) goes through unmetered (Unmetered).
type Proposer struct {
	Next     cmdlog.Proposer
	Admitter *Admitter
}

var _ cmdlog.Proposer = Proposer{}

// Propose implements cmdlog.Proposer. A refused proposal returns
// ErrDirectoryBusy and is not logged; the tokens its write took on its
// way are given back (Refund).
func (p Proposer) Propose(ctx context.Context, kind string, at int64, op any) (any, error) {
	surface := kind
	if s, ok := op.(interface{ Surface() string }); ok {
		surface = s.Surface()
	}
	if unmetered(ctx) {
		return p.Next.Propose(ctx, kind, at, op)
	}
	if err := p.Admitter.Admit(surface, Key{Directory, ""}); err != nil {
		Refund(ctx)
		return nil, err
	}
	return p.Next.Propose(ctx, kind, at, op)
}

type unmeteredKey struct{}

// Unmetered marks ctx as the directory's own housekeeping (expiries and
// the like): Proposer lets its proposals through whatever the budget.
func Unmetered(ctx context.Context) context.Context {
	return context.WithValue(ctx, unmeteredKey{}, true)
}

func unmetered(ctx context.Context) bool {
	v, _ := ctx.Value(unmeteredKey{}).(bool)
	return v
}
