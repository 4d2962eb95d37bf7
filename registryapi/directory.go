package registryapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/identity/meshsig"
	"github.com/agentmesh/mesh/internal/cmdlog"
	"github.com/agentmesh/mesh/store"
)

// Kind is the cmdlog entry kind of directory commands.
const Kind = "agents"

// Directory is the canonical agent directory: the cmdlog Machine of Kind
// over the store (see the package documentation), plus its reads. It is
// safe for concurrent use; the log serialises commits.
type Directory struct {
	db *store.DB

	cache *rowCache // decoded rows for reads

	presence *Presence // who heartbeats: soft state, outside the log
	// index is the search's, nil until built (indexing.go); a snapshot's
	// install swaps in a new one.
	index atomic.Pointer[searchIndex]
	ix    indexing
}

var _ cmdlog.Machine = (*Directory)(nil)

// reportTTL keeps a counted report a little longer than the reputation
// window, so that clock skew between nodes never drops one early.
const reportTTL = ReputationWindow + 48*time.Hour

// storedReport is a counted reputation report as kept in the store.
type storedReport struct {
	Seq      uint64    `json:"seq"`
	At       time.Time `json:"at"`
	Reporter string    `json:"reporter"`
	Report   Report    `json:"report"`
	Signed   Signed    `json:"signed"`
	// PaidRef names the payment the report's receipt proves ("by:ref"),
	// "" when it cites none: what the weighted view weighs.
	PaidRef string `json:"paid_ref,omitempty"`
}

// NewDirectory returns the directory kept in db, its search index built,
// and registers it with log, which must use the same store.
func NewDirectory(log *cmdlog.Log) (*Directory, error) {
	d, err := OpenDirectory(log)
	if err == nil {
		err = d.BuildIndex(context.Background())
	}
	return d, err
}

// OpenDirectory is NewDirectory without the search index: it serves
// everything but searches, which answer ErrIndexBuilding until BuildIndex
// is done (a node builds it in the background, so that it serves reads at
// once after a start, however many agents it holds).
func OpenDirectory(log *cmdlog.Log) (*Directory, error) {
	d := &Directory{db: log.DB(), cache: newRowCache(DefaultReadCacheBytes), presence: newPresence(uint64(time.Now().UnixNano()))}
	if err := d.presence.load(d.db); err != nil {
		return nil, fmt.Errorf("registry: loading presence: %w", err)
	}
	log.Handle(Kind, d)
	return d, nil
}

// AgentCount returns how many agents are registered.
func (d *Directory) AgentCount() int64 {
	var n uint64
	d.db.View(func(tx *store.Txn) error {
		var err error
		n, err = cmdlog.GetU64(tx, agentCountKey)
		return err
	})
	return int64(n)
}

// Apply implements cmdlog.Machine: it decodes the command of e and applies
// it to state. Its Result carries the command to Committed.
func (d *Directory) Apply(tx *store.Txn, e *cmdlog.Entry) (any, error) {
	cmd := new(Command)
	if err := json.Unmarshal(e.Op, cmd); err != nil {
		return nil, fmt.Errorf("registry: decode command %d: %w", e.Seq, err)
	}
	cmd.Seq, cmd.At = e.Seq, e.At
	res, delta, err := d.apply(tx, cmd)
	res.cmd = cmd
	if err != nil || delta == 0 {
		return res, err
	}
	n, err := cmdlog.GetU64(tx, agentCountKey)
	if err != nil {
		return nil, err
	}
	return res, tx.Set(agentCountKey, []byte(store.U64(uint64(int64(n)+delta))))
}

// Committed implements cmdlog.Machine: it indexes again, and drops from
// the cache, the rows the command may have changed (a feedback's target
// among them), and drops the heartbeats of an agent it deleted. The
// command is the one Apply decoded (res, the Result it returned); a
// registration that made a new agent is indexed from the row Apply wrote,
// which nothing read back.
func (d *Directory) Committed(_ *cmdlog.Entry, res any) {
	r, _ := res.(Result)
	cmd := r.cmd
	if cmd == nil {
		return // not a result of Apply: nothing it applied
	}
	ids := cmd.agentIDs()
	if cmd.Delete != nil {
		d.presence.forget(cmd.Delete.AgentID)
	}
	if cmd.Feedback != nil {
		ids = append(ids, cmd.Feedback.Target)
	}
	if cmd.Register != nil && r.Created {
		d.indexNew(r.Agent)
	} else {
		d.reindex(ids)
	}
	// After the index: what a read derives from a row it caches (whether
	// it has reports) is read from the index as it is now.
	d.cache.drop(ids)
}

// State implements cmdlog.Machine: the registry's keys (see keys.go);
// heartbeats (p/) are this node's own, and nonces (n/) the log's
// (cmdlog.ClaimNonce).
func (d *Directory) State() [][]byte {
	return [][]byte{[]byte("a/"), []byte("k/"), []byte("t/"), []byte("r/"), []byte("d/"), []byte("e/"), agentCountKey}
}

// Restored implements cmdlog.Machine: every cached row may be stale, and
// the index is built anew. Searches go on with the old index until the
// new one is whole; one that cannot be built leaves the old one, whose
// results are checked against the rows anyway (searchResult).
func (d *Directory) Restored() {
	d.cache.reset()
	_ = d.BuildIndex(context.Background())
	// Rows read while the index was built took from the old one whether
	// they have reports (rollup), and would keep it: they go too.
	d.cache.reset()
}

// apply runs one command against state; delta is the change in the number
// of registered agents.
func (d *Directory) apply(tx *store.Txn, cmd *Command) (Result, int64, error) {
	if cmd.Sig != nil {
		if err := claimNonce(tx, cmd); err != nil {
			return Result{}, 0, err
		}
	}
	switch {
	case cmd.Register != nil:
		return applyRegister(tx, cmd, cmd.Register)
	case cmd.Heartbeat != nil:
		// Logs written before heartbeats moved to Presence carry them; they
		// change nothing any more.
		return Result{}, 0, nil
	case cmd.Delete != nil:
		return applyDelete(tx, cmd, cmd.Delete)
	case cmd.Feedback != nil:
		res, err := applyFeedback(tx, cmd, cmd.Feedback)
		return res, 0, err
	case cmd.Catalog != nil:
		res, err := applyCatalog(tx, cmd.Catalog)
		return res, 0, err
	case cmd.Activate != nil:
		res, err := applyActivate(tx, cmd.Activate)
		return res, 0, err
	case cmd.Expire != nil:
		return applyExpire(tx, cmd, cmd.Expire)
	case cmd.Card != nil:
		res, err := applyCard(tx, cmd, cmd.Card)
		return res, 0, err
	}
	return Result{}, 0, errors.New("registry: command has no operation")
}

// claimNonce makes a signed command's nonce single use on every replica
// (cmdlog.ClaimNonce).
func claimNonce(tx *store.Txn, cmd *Command) error {
	err := cmdlog.ClaimNonce(tx, pubHex(cmd.Sig.Pubkey), cmd.Sig.Nonce, cmd.At, identity.NonceMemory)
	if errors.Is(err, cmdlog.ErrNonceUsed) {
		return meshsig.ErrReplay
	}
	return err
}

func applyRegister(tx *store.Txn, cmd *Command, op *RegisterOp) (Result, int64, error) {
	if op.Pubkey != "" && (cmd.Sig == nil || cmd.Sig.Pubkey != op.Pubkey) {
		return Result{}, 0, ErrSigKeyMismatch
	}
	now := cmd.Time()
	a, err := getAgent(tx, op.AgentID)
	if errors.Is(err, store.ErrNotFound) {
		a, err = &Agent{ID: op.AgentID}, nil
	}
	if err != nil {
		return Result{}, 0, err
	}
	var delta int64
	created := !a.Registered()
	switch {
	case created:
		a.Reg, a.RegisteredAt, delta = cmd.Seq, now, 1
		if err := awaitActivation(tx, a, op.ActivateBy); err != nil {
			return Result{}, 0, err
		}
	case !isOwner(a, cmd, op.OwnerReg):
		return Result{}, 0, ErrIDTaken
	default: // its owner is back: the registration is in use
		if err := activated(tx, a); err != nil {
			return Result{}, 0, err
		}
	}
	if op.Pubkey != "" && op.Pubkey != a.Pubkey {
		if err := bindPubkey(tx, cmd, a, op.Pubkey); err != nil {
			return Result{}, 0, err
		}
	}
	keepFullCard(a, op, created, now)
	a.Capabilities, a.Endpoint, a.APIKeyHash, a.Card = op.Capabilities, op.Endpoint, op.APIKeyHash, op.Card
	if op.Signed != nil && cmd.Sig != nil && cmd.Sig.Pubkey == a.Pubkey {
		a.Record, a.RecordSeq = op.Signed, cmd.Seq
	}
	a.UpdatedAt, a.LastSeen = now, now
	if err := tx.SetJSON(agentKey(a.ID), a); err != nil {
		return Result{}, 0, err
	}
	return Result{Agent: a, Created: created}, delta, nil
}

// isOwner reports whether the command proves it acts for the current owner
// of a: a Mesh-Sig by the bound key, or a bearer token of this registration.
func isOwner(a *Agent, cmd *Command, ownerReg uint64) bool {
	if cmd.Sig != nil && a.Pubkey != "" && cmd.Sig.Pubkey == a.Pubkey {
		return true
	}
	return ownerReg != 0 && ownerReg == a.Reg
}

// bindPubkey binds pub to a, unbinding its former key, whose DHT record
// gets a tombstone.
func bindPubkey(tx *store.Txn, cmd *Command, a *Agent, pub string) error {
	holder, err := tx.Get(pubkeyKey(pubHex(pub)))
	switch {
	case err == nil && string(holder) != a.ID:
		return ErrPubkeyInUse
	case err != nil && !errors.Is(err, store.ErrNotFound):
		return err
	}
	if a.Pubkey != "" {
		if err := unbindPubkey(tx, cmd, a); err != nil {
			return err
		}
	}
	a.Pubkey = pub
	raw, _ := identity.DecodePublicKey(pub)
	a.DID = identity.DIDFromPublicKey(raw)
	return tx.Set(pubkeyKey(pubHex(pub)), []byte(a.ID))
}

// registeredAgent loads the agent that registration reg refers to, or
// ErrAgentNotFound when the id is gone or has changed hands.
func registeredAgent(tx *store.Txn, id string, reg uint64) (*Agent, error) {
	a, err := getAgent(tx, id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && (!a.Registered() || a.Reg != reg)) {
		return nil, ErrAgentNotFound
	}
	return a, err
}

// unbindPubkey frees a's key for others and, if a has a DHT record,
// leaves a tombstone for it.
func unbindPubkey(tx *store.Txn, cmd *Command, a *Agent) error {
	if a.Record != nil {
		if err := addTombstone(tx, cmd, a.ID, a.DID); err != nil {
			return err
		}
	}
	return tx.Delete(pubkeyKey(pubHex(a.Pubkey)))
}

func applyDelete(tx *store.Txn, cmd *Command, op *DeleteOp) (Result, int64, error) {
	a, err := registeredAgent(tx, op.AgentID, op.Reg)
	if err != nil {
		return Result{}, 0, err
	}
	return deregister(tx, cmd, a)
}

// deregister removes a's registration: its key is unbound (a tombstone
// replaces its DHT record), and the row goes unless it holds a catalog
// listing, which stays, catalog-only.
func deregister(tx *store.Txn, cmd *Command, a *Agent) (Result, int64, error) {
	if err := activated(tx, a); err != nil {
		return Result{}, 0, err
	}
	if a.Pubkey != "" {
		if err := unbindPubkey(tx, cmd, a); err != nil {
			return Result{}, 0, err
		}
	}
	if a.Listing == nil {
		return Result{Removed: true}, -1, tx.Delete(agentKey(a.ID))
	}
	a.clearMesh()
	return Result{Agent: a}, -1, tx.SetJSON(agentKey(a.ID), a)
}

func applyFeedback(tx *store.Txn, cmd *Command, op *FeedbackOp) (Result, error) {
	if cmd.Sig == nil {
		return Result{}, errors.New("registry: feedback without signer")
	}
	a, err := getAgent(tx, op.Target)
	if errors.Is(err, store.ErrNotFound) || (err == nil && (!a.Registered() || op.DID != "" && a.DID != op.DID)) {
		return Result{}, ErrAgentNotFound
	}
	if err != nil {
		return Result{}, err
	}
	if a.Pubkey != "" && a.Pubkey == cmd.Sig.Pubkey {
		return Result{}, ErrSelfRating
	}
	now := cmd.Time()
	paidRef, err := receiptRef(a, cmd.Sig.Pubkey, op.Report.Receipt, now)
	if err != nil {
		return Result{}, err
	}
	day := dayKey(a.ID, a.Reg, pubHex(cmd.Sig.Pubkey), now.Format("20060102"))
	n, err := cmdlog.GetU64(tx, day)
	if err != nil {
		return Result{}, err
	}
	counted := n < ReportsPerDay
	if counted {
		if err := tx.SetTTL(day, []byte(store.U64(n+1)), 48*time.Hour); err != nil {
			return Result{}, err
		}
		rep, _ := json.Marshal(storedReport{Seq: cmd.Seq, At: now, Reporter: cmd.Sig.Pubkey, Report: op.Report, Signed: op.Signed, PaidRef: paidRef})
		// Past the window a report counts nowhere; the TTL only collects it
		// (and the reports of registrations since deleted).
		if err := tx.SetTTL(reportKey(a.ID, a.Reg, cmd.At, cmd.Seq), rep, reportTTL); err != nil {
			return Result{}, err
		}
	}
	r, err := rollupIn(tx, a, now)
	return Result{Agent: a, Counted: counted, Rollup: &r}, err
}

func applyCatalog(tx *store.Txn, op *CatalogOp) (Result, error) {
	for i := range op.Listings {
		l := &op.Listings[i]
		a, err := getAgent(tx, l.AgentID)
		if errors.Is(err, store.ErrNotFound) {
			a, err = &Agent{ID: l.AgentID, Capabilities: []string{}}, nil
		}
		if err != nil {
			return Result{}, err
		}
		listing := l.Listing
		a.Listing = &listing
		if err := tx.SetJSON(agentKey(a.ID), a); err != nil {
			return Result{}, err
		}
	}
	return Result{Imported: len(op.Listings)}, nil
}

// receiptRef checks the payment receipt a report by reporter (base64 key)
// on agent a cites, and returns the payment it names ("" for no receipt).
// It must be signed by a's key, name a and the reporter, and date from
// the reputation window ending at now.
func receiptRef(a *Agent, reporter, receipt string, now time.Time) (string, error) {
	if receipt == "" {
		return "", nil
	}
	pub, err := identity.DecodePublicKey(a.Pubkey)
	if err != nil {
		return "", ErrBadReceipt.With("agent %s has no key to sign receipts with", a.ID)
	}
	r, err := identity.OpenReceipt(receipt, pub)
	switch {
	case err != nil:
		return "", ErrBadReceipt.With("%v", err)
	case r.Agent != a.ID:
		return "", ErrBadReceipt.With("the receipt is for agent %q, not %s", r.Agent, a.ID)
	case r.Payer != reporter:
		return "", ErrBadReceipt.With("the receipt was issued to another key than the report's signer")
	case r.Time().After(now.Add(identity.ClockTolerance)) || r.Time().Before(now.Add(-ReputationWindow)):
		return "", ErrBadReceipt.With("the receipt is not from the %d-day reputation window", int(ReputationWindow/(24*time.Hour)))
	}
	return r.By + ":" + r.Ref, nil
}

// rollupIn computes the rollup of a's counted reports in the window ending at now.
func rollupIn(tx *store.Txn, a *Agent, now time.Time) (Rollup, error) {
	var b rollupBuilder
	prefix := reportPrefix(a.ID, a.Reg)
	from := now.Add(-ReputationWindow).UnixNano()
	start := append(append([]byte{}, prefix...), store.U64(uint64(max(from, 0)))...)
	err := tx.Scan(prefix, start, func(_, v []byte) (bool, error) {
		var rep storedReport
		if err := json.Unmarshal(v, &rep); err != nil {
			return false, err
		}
		if rep.At.After(now) {
			return false, nil
		}
		b.add(rep.Report, rep.At, rep.PaidRef)
		return true, nil
	})
	return b.rollup(), err
}

func getAgent(tx *store.Txn, id string) (*Agent, error) {
	var a Agent
	if err := tx.GetJSON(agentKey(id), &a); err != nil {
		return nil, err
	}
	return &a, nil
}
