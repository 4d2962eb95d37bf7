package registryapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/agentmesh/mesh/internal/cmdlog"
	"github.com/agentmesh/mesh/store"
)

// A row refers to its registration's log entry for the agent's signed
// request (Agent.Record) and, when the request carried it, the full card
// (Agent.FullCard), instead of holding them beside the entry that does
// (RecordLogged, CardLogged): the store keeps a card once, in the entry.
// The entry is the one that set the record (RecordSeq). What refers to it
// is kept whole where the change log is not (cmdlog.Referrer): a snapshot
// carries the row with its record and card (Inline), and the compaction
// of the change log keeps the entry while the row refers to it (Refers),
// until the row lets go of it (releaseLog: the agent registers again, or
// goes). A row written before (with its record and card) reads as it is.

var _ cmdlog.Referrer = (*Directory)(nil)

// referLog makes a, which registration cmd has just written, refer to
// cmd's entry for what the entry carries: the record, if cmd set it, and
// the full card, if cmd's signed request carried it (CardSigned).
func referLog(a *Agent, cmd *Command) {
	if a.RecordSeq != cmd.Seq || a.Record == nil {
		// A card of an earlier entry stays while cmd kept it.
		a.CardLogged = a.CardLogged && a.CardFrom == cardFromRegistration && a.FullCard == nil
		return
	}
	a.RecordLogged = true
	a.CardLogged = cmd.Register.CardSigned && a.CardFrom == cardFromRegistration && a.FullCard != nil
}

// putAgent stores row a, without what it refers to in the log.
func putAgent(tx *store.Txn, a *Agent) error {
	if a.RecordLogged || a.CardLogged {
		row := *a
		if row.RecordLogged {
			row.Record = nil
		}
		if row.CardLogged {
			row.FullCard = nil
		}
		a = &row
	}
	return tx.SetJSON(agentKey(a.ID), a)
}

// fromLog fills in row a what it refers to in the log and the caller
// reads, as tx reads it: its record, its full card.
func fromLog(tx *store.Txn, a *Agent, record, card bool) error {
	needRecord, needCard := record && a.RecordLogged && a.Record == nil, card && a.CardLogged && a.FullCard == nil
	if !needCard && !needRecord {
		return nil
	}
	e, err := cmdlog.EntryAt(tx, a.RecordSeq)
	if err != nil {
		return fmt.Errorf("registry: the record of %q at log entry %d: %w", a.ID, a.RecordSeq, err)
	}
	s, err := loggedRecord(e)
	if err != nil {
		return fmt.Errorf("registry: the record of %q: %w", a.ID, err)
	}
	if needRecord {
		a.Record = s
	}
	if needCard {
		a.FullCard = signedFullCard(s)
	}
	return nil
}

// fromLogOrBare is fromLog for a pass over every row (a snapshot, the
// search index's build): a row whose entry is gone (a store that the
// release before this one compacted, or a damaged one) goes on without its
// record and card, named in the log, rather than failing the whole pass:
// every snapshot, or every search.
func fromLogOrBare(tx *store.Txn, a *Agent, record, card bool) {
	if err := fromLog(tx, a, record, card); err != nil {
		slog.Warn("registry: an agent's row goes on without its signed registration", "agent", a.ID, "err", err)
		a.RecordLogged, a.CardLogged = false, false
	}
}

// loggedRecord is the signed request that registration entry e carries.
func loggedRecord(e *cmdlog.Entry) (*Signed, error) {
	var cmd Command
	if err := json.Unmarshal(e.Op, &cmd); err != nil {
		return nil, err
	}
	if cmd.Register == nil || cmd.Register.Signed == nil {
		return nil, fmt.Errorf("log entry %d is no signed registration", e.Seq)
	}
	return cmd.Register.Signed, nil
}

// hasRecord reports whether a has a DHT record, held or in the log.
func (a *Agent) hasRecord() bool { return a.Record != nil || a.RecordLogged }

// Inline implements cmdlog.Referrer: a row with its record and card.
func (d *Directory) Inline(tx *store.Txn, key, val []byte) ([]byte, error) {
	if !bytes.HasPrefix(key, []byte("a/")) || !bytes.Contains(val, []byte(`"record_logged":true`)) && !bytes.Contains(val, []byte(`"card_logged":true`)) {
		return val, nil
	}
	var a Agent
	if err := json.Unmarshal(val, &a); err != nil {
		return nil, err
	}
	fromLogOrBare(tx, &a, true, true)
	a.RecordLogged, a.CardLogged = false, false
	return json.Marshal(&a)
}

// Refers implements cmdlog.Referrer: whether the row of the agent that
// registration entry e registered refers to it.
func (d *Directory) Refers(tx *store.Txn, e *cmdlog.Entry) (bool, error) {
	ids := RegisteredAgents(e)
	if len(ids) == 0 {
		return false, nil
	}
	a, err := getAgent(tx, ids[0])
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	return err == nil && a.loggedSeq() == e.Seq, err
}

// loggedSeq is the log entry that row a refers to, 0 for none.
func (a *Agent) loggedSeq() uint64 {
	if a.RecordLogged || a.CardLogged {
		return a.RecordSeq
	}
	return 0
}

// releaseLog lets go of the log entry that row a referred to as was (its
// loggedSeq before a change), unless a still refers to it: an entry the
// compacted change log kept for the row alone goes.
func releaseLog(tx *store.Txn, was uint64, a *Agent) error {
	if was == 0 || a != nil && a.loggedSeq() == was {
		return nil
	}
	return cmdlog.Release(tx, was)
}
