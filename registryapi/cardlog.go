package registryapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/agentmesh/mesh/internal/cmdlog"
	"github.com/agentmesh/mesh/store"
)

// How a full card reaches every node: through the canonical log, like the
// rest of the row. A registration carries the card its agent hands over;
// for the others the directory fetches the card from the agent's endpoint
// (node/cardprobe.go) and proposes a CardOp, only when the card differs
// from the one kept, so the log grows with the changes of cards, never
// with the probes.

// errCardUnchanged refuses a CardOp that would change nothing, so that it
// takes no log entry.
var errCardUnchanged = errors.New("registry: card unchanged")

// keepFullCard sets the full card of registration op on row a (before
// op's endpoint is): the card op carries; else a fetched card stays while
// the same owner keeps the same endpoint, and goes otherwise.
func keepFullCard(a *Agent, op *RegisterOp, created bool, now time.Time) {
	switch card := op.fullCard(); {
	case card != nil:
		a.FullCard, a.CardFrom, a.CardAt = card, cardFromRegistration, now
	case created || a.Endpoint != op.Endpoint || a.CardFrom != cardFromFetch:
		a.FullCard, a.CardFrom, a.CardAt = nil, "", time.Time{}
	}
}

// signCard leaves out of op the full card its signed request carries:
// the log entry keeps the card once, in the request as its agent signed
// it (CardSigned). A card that the request does not carry as such stays.
func (op *RegisterOp) signCard() {
	if op.FullCard != nil && op.Signed != nil && bytes.Equal(signedFullCard(op.Signed), op.FullCard) {
		op.FullCard, op.CardSigned = nil, true
	}
}

// fullCard is the full card of registration op: its own, or the one its
// signed request carries (CardSigned); nil for none.
func (op *RegisterOp) fullCard() json.RawMessage {
	if op.CardSigned && op.Signed != nil {
		return signedFullCard(op.Signed)
	}
	return op.FullCard
}

// signedFullCard is the full card that the register request s carries,
// compacted as the directory keeps it; nil for none. Apply runs it, on
// entries logged by any release: it only compacts the card, which the
// handler admitted (signCard), and checks nothing of it, so that a
// card's rules (its size, its skills) may change without changing what
// an entry logged before them applies to.
func signedFullCard(s *Signed) json.RawMessage {
	var body struct {
		FullCard json.RawMessage `json:"full_card"`
	}
	if json.Unmarshal([]byte(s.Body), &body) != nil || len(body.FullCard) == 0 || string(bytes.TrimSpace(body.FullCard)) == "null" {
		return nil
	}
	var card bytes.Buffer
	if json.Compact(&card, body.FullCard) != nil {
		return nil
	}
	return card.Bytes()
}

func applyCard(tx *store.Txn, cmd *Command, op *CardOp) (Result, error) {
	a, err := registeredAgent(tx, op.AgentID, op.Reg)
	if err != nil {
		return Result{}, err
	}
	card, _, err := parseFullCard(op.Card)
	if err != nil {
		return Result{}, err
	}
	switch {
	case a.CardFrom == cardFromRegistration:
		return Result{}, errCardUnchanged // the agent's own card wins
	case bytes.Equal(card, a.FullCard):
		return Result{}, errCardUnchanged
	}
	a.FullCard, a.CardFrom, a.CardAt = card, cardFromFetch, cmd.Time()
	return Result{Agent: a}, putAgent(tx, a)
}

// ProbeTarget is a registered agent whose endpoint the directory probes.
type ProbeTarget struct {
	AgentID  string
	Reg      uint64
	Endpoint string
	// Pushed: the agent hands its card over itself; the probe only feeds
	// liveness.
	Pushed bool
}

// ProbesDue returns up to max registered agents with an endpoint, after
// agent id after in id order, whose last probe is at least every old at
// now, and the id to resume from ("" once the walk went round). It reads
// at most scan rows.
func (d *Directory) ProbesDue(after string, scan, max int, now time.Time, every time.Duration) ([]ProbeTarget, string, error) {
	var due []ProbeTarget
	next, read := "", 0
	start := agentKey(after + "\x00")
	if after == "" {
		start = nil
	}
	err := d.db.View(func(tx *store.Txn) error {
		return tx.Scan([]byte("a/"), start, func(_, v []byte) (bool, error) {
			var a Agent
			if err := json.Unmarshal(v, &a); err != nil {
				return false, err
			}
			read++
			if a.Registered() && a.Endpoint != "" && d.probeDue(&a, now, every) {
				due = append(due, ProbeTarget{AgentID: a.ID, Reg: a.Reg, Endpoint: a.Endpoint, Pushed: a.CardFrom == cardFromRegistration})
			}
			if read >= scan || len(due) >= max {
				next = a.ID
				return false, nil
			}
			return true, nil
		})
	})
	return due, next, err
}

// FirstProbe returns the probe of agent id's first probe: none when id is
// not registered, has no endpoint, or was probed since it registered.
func (d *Directory) FirstProbe(id string) (ProbeTarget, bool) {
	a, err := d.Agent(id)
	if err != nil || a.Endpoint == "" {
		return ProbeTarget{}, false
	}
	if b, ok := d.presence.get(id); ok && b.Reg == a.Reg && b.Live != nil {
		return ProbeTarget{}, false
	}
	return ProbeTarget{AgentID: a.ID, Reg: a.Reg, Endpoint: a.Endpoint, Pushed: a.CardFrom == cardFromRegistration}, true
}

// RegisteredAgents returns the agents entry e registered: their first
// probe is due.
func RegisteredAgents(e *cmdlog.Entry) []string {
	if e.Kind != Kind {
		return nil
	}
	var cmd struct {
		Register *struct {
			AgentID string `json:"agent_id"`
		} `json:"register"`
	}
	if json.Unmarshal(e.Op, &cmd) != nil || cmd.Register == nil {
		return nil
	}
	return []string{cmd.Register.AgentID}
}

// probeDue reports whether a's last probe, of whichever endpoint, is every
// old: an owner who changes endpoints does not get more probes for it.
func (d *Directory) probeDue(a *Agent, now time.Time, every time.Duration) bool {
	b, ok := d.presence.get(a.ID)
	return !ok || b.Reg != a.Reg || b.Live == nil || now.Sub(b.Live.CheckedAt()) >= every
}

// ProposeCard proposes to p the full card fetched from registration reg
// of agent id, unless it is the card kept already (or the agent hands its
// own over): then it proposes nothing.
func (d *Directory) ProposeCard(ctx context.Context, p cmdlog.Proposer, now time.Time, id string, reg uint64, raw []byte) (bool, error) {
	card, _, err := admitFullCard(raw)
	if err != nil {
		return false, err
	}
	a, err := d.Lookup(id)
	if err != nil || a.Reg != reg || a.CardFrom == cardFromRegistration || bytes.Equal(a.FullCard, card) {
		return false, nil
	}
	_, err = p.Propose(ctx, Kind, now.UnixNano(), Command{Card: &CardOp{AgentID: id, Reg: reg, Card: card}})
	if errors.Is(err, errCardUnchanged) || errors.Is(err, ErrAgentNotFound) {
		return false, nil
	}
	return err == nil, err
}
