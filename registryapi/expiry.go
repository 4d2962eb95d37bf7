package registryapi

import (
	"context"
	"errors"
	"time"

	"github.com/agentmesh/mesh/internal/cmdlog"
	"github.com/agentmesh/mesh/store"
)

// Registrations that are never used expire. A new registration made
// through a directory with an activation window (Config.ActivationWindow)
// carries its deadline, ActivateBy, in its command; the agent's first
// token (ActivateOp), or a registration by its owner, clears it. The
// directory sweeps the registrations whose deadline passed (SweepExpired)
// and proposes their expiry (ExpireOp), which every node applies alike.
// A catalog listing is never dropped: an expired registration over one
// leaves it catalog-only, as a delete does.

// DefaultActivationWindow is how long a new registration waits for its
// agent's first token: every client takes one at once (the README's walk
// through, the node's agent runtime), so a registration still without one
// a day later was abandoned or never meant to be used.
const DefaultActivationWindow = 24 * time.Hour

// sweepBatch bounds the registrations one expiry command drops.
const sweepBatch = 500

// errActive refuses an activation of a registration already in use, so
// that it takes no log entry.
var errActive = errors.New("registry: registration already active")

// errNothingExpired refuses an expiry that would drop nothing.
var errNothingExpired = errors.New("registry: no registration to expire")

// awaitActivation gives new registration a its deadline (none when by is 0).
func awaitActivation(tx *store.Txn, a *Agent, by int64) error {
	a.ActivateBy = by
	if by == 0 {
		return nil
	}
	return tx.Set(activationKey(by, a.ID), []byte(store.U64(a.Reg)))
}

// activated clears a's deadline: its registration is in use (or going).
func activated(tx *store.Txn, a *Agent) error {
	if a.ActivateBy == 0 {
		return nil
	}
	err := tx.Delete(activationKey(a.ActivateBy, a.ID))
	a.ActivateBy = 0
	return err
}

func applyActivate(tx *store.Txn, op *ActivateOp) (Result, error) {
	a, err := registeredAgent(tx, op.AgentID, op.Reg)
	if err != nil {
		return Result{}, err
	}
	if a.ActivateBy == 0 {
		return Result{}, errActive
	}
	if err := activated(tx, a); err != nil {
		return Result{}, err
	}
	return Result{Agent: a}, putAgent(tx, a)
}

func applyExpire(tx *store.Txn, cmd *Command, op *ExpireOp) (Result, int64, error) {
	var res Result
	var delta int64
	for _, ar := range op.Agents {
		a, err := registeredAgent(tx, ar.AgentID, ar.Reg)
		if errors.Is(err, ErrAgentNotFound) {
			continue // deleted, or registered anew, since
		}
		if err != nil {
			return Result{}, 0, err
		}
		if a.ActivateBy == 0 || a.ActivateBy > cmd.At {
			continue // in use, or not due by this command's clock
		}
		_, d, err := deregister(tx, cmd, a)
		if err != nil {
			return Result{}, 0, err
		}
		res.Expired++
		delta += d
	}
	if res.Expired == 0 {
		return Result{}, 0, errNothingExpired
	}
	return res, delta, nil
}

// activate marks the registration of ag as in use, once: the token
// handler calls it before it issues ag's first token.
func (a *API) activate(ctx context.Context, ag *Agent) error {
	if ag.ActivateBy == 0 {
		return nil
	}
	_, err := a.propose(ctx, Command{At: a.now().UnixNano(), Activate: &ActivateOp{AgentID: ag.ID, Reg: ag.Reg}})
	if errors.Is(err, errActive) || errors.Is(err, ErrAgentNotFound) {
		return nil // a token issued meanwhile activated it; or it went: Issue's token is then useless anyway
	}
	return err
}

// SweepExpired proposes to p the expiry of the registrations whose
// activation deadline is past at now, at most sweepBatch of them, and
// returns how many expired. The directory calls it periodically.
func (d *Directory) SweepExpired(ctx context.Context, p cmdlog.Proposer, now time.Time) (int, error) {
	var due []AgentReg
	err := d.db.View(func(tx *store.Txn) error {
		// Keys sort by deadline: those up to now come before this one.
		end := activationKey(now.UnixNano()+1, "")
		return tx.Scan([]byte("e/"), nil, func(k, v []byte) (bool, error) {
			if string(k) >= string(end) {
				return false, nil
			}
			reg, _ := store.ParseU64(string(v))
			id := string(k[len(end):]) // after "e/<deadline>/"
			due = append(due, AgentReg{AgentID: id, Reg: reg})
			return len(due) < sweepBatch, nil
		})
	})
	if err != nil || len(due) == 0 {
		return 0, err
	}
	res, err := cmdlog.ResultAs[Result](p.Propose(ctx, Kind, now.UnixNano(), Command{Expire: &ExpireOp{Agents: due}}))
	if errors.Is(err, errNothingExpired) {
		return 0, nil
	}
	return res.Expired, err
}
