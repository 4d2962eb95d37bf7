package registryapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/cmdlog"
	"github.com/agentmesh/mesh/internal/storetest"
	"github.com/agentmesh/mesh/store"
)

// storedRow is the row of id as the store holds it, decoded.
func storedRow(t *testing.T, db *store.DB, id string) map[string]json.RawMessage {
	t.Helper()
	var row map[string]json.RawMessage
	if err := db.View(func(tx *store.Txn) error { return tx.GetJSON(agentKey(id), &row) }); err != nil {
		t.Fatalf("the row of %s: %v", id, err)
	}
	return row
}

// cardReads is what h serves of id's card and record: the row's card,
// the mirrored card's name and the DHT record published.
func cardReads(t *testing.T, h *harness, id string) string {
	t.Helper()
	row, err := h.dir.Lookup(id)
	if err != nil {
		t.Fatal(err)
	}
	mirrored := h.want(h.do("GET", "/agent/"+id+"/.well-known/agent.json", ""), 200, "").str("name")
	pubs, err := h.dir.Publications(id, rowDirKey, time.Unix(1e9, 0))
	if err != nil || len(pubs) != 2 {
		t.Fatalf("the publications of %s: %d, %v", id, len(pubs), err)
	}
	return fmt.Sprintf("card %s, mirrored %q, record %x", row.FullCard, mirrored, pubs[0].Value)
}

// wantHeld fails unless the stored row of id holds its record and card
// itself (held) or refers to its log entry for them.
func wantHeld(t *testing.T, db *store.DB, id string, held bool) {
	t.Helper()
	row := storedRow(t, db, id)
	if (row["record"] != nil) != held || (row["full_card"] != nil) != held || (row["record_logged"] == nil) != held || (row["card_logged"] == nil) != held {
		t.Fatalf("the stored row of %s (held %v): %v", id, held, row)
	}
}

// logHolds reports whether the store of h holds log entry seq.
func logHolds(t *testing.T, h *harness, seq uint64) bool {
	t.Helper()
	err := h.log.DB().View(func(tx *store.Txn) error {
		_, err := cmdlog.EntryAt(tx, seq)
		return err
	})
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		t.Fatal(err)
	}
	return err == nil
}

// TestRowsReferToTheirLogEntry: the row of a signed registration that
// hands its card over leaves out the signed request and the card, which
// its log entry carries, yet serves both as before; a snapshot carries
// the row with them (the node installing it has no log to refer to); a
// compaction of the change log past the entry keeps it while the row
// refers to it (the change feed no longer serves it), and the row serves
// the same; the kept entry goes once the row lets go of it: the agent
// registers again (its row refers to its new entry), or goes.
func TestRowsReferToTheirLogEntry(t *testing.T) {
	h := newHarness(t)
	key, body, r := registerCard(h, "ref")
	tok := h.token("ref", r.str("api_key"))
	first := h.seq()
	wantHeld(t, h.log.DB(), "ref", false)
	served := cardReads(t, h, "ref")

	buf := storetest.Snapshot(t, h.log)
	replica := newHarnessOn(t, storetest.DB(t))
	if _, err := replica.log.Restore(buf); err != nil {
		t.Fatal(err)
	}
	wantHeld(t, replica.log.DB(), "ref", true)
	if got := cardReads(t, replica, "ref"); got != served {
		t.Fatalf("from the snapshot:\n%s\nnot\n%s", got, served)
	}

	h.want(h.do("POST", "/v1/agents/register", `{"agent_id":"other","capabilities":[]}`), 201, "")
	if err := h.log.Compact(0); err != nil {
		t.Fatal(err)
	}
	if _, err := h.log.Changes(0, 10, 1<<20); !errors.Is(err, cmdlog.ErrCompacted) || h.log.First() != h.seq()+1 {
		t.Fatalf("the change log after a compaction: first %d, seq %d, %v", h.log.First(), h.seq(), err)
	}
	if !logHolds(t, h, first) || logHolds(t, h, h.seq()) {
		t.Fatalf("the compaction kept entry %d %v (a row refers to it), entry %d %v (none does)", first, logHolds(t, h, first), h.seq(), logHolds(t, h, h.seq()))
	}
	wantHeld(t, h.log.DB(), "ref", false)
	if got := cardReads(t, h, "ref"); got != served {
		t.Fatalf("after the compaction:\n%s\nnot\n%s", got, served)
	}

	h.want(h.signed(key, "POST", "/v1/agents/register", body), 200, "")
	again := h.seq()
	wantHeld(t, h.log.DB(), "ref", false)
	if row, err := h.dir.Lookup("ref"); err != nil || row.RecordSeq != again || row.FullCard == nil || logHolds(t, h, first) {
		t.Fatalf("registered again: %+v, %v; the entry it referred to kept: %v", row, err, logHolds(t, h, first))
	}
	if err := h.log.Compact(0); err != nil {
		t.Fatal(err)
	}
	h.want(h.do("DELETE", "/v1/agents/me", "", bearer(tok)...), 200, "")
	if logHolds(t, h, again) {
		t.Fatal("the entry of a deleted agent's row was kept")
	}
}

// rowDirKey attests the records cardReads compares.
var rowDirKey = identity.GenerateKey()

// TestARowWhoseEntryIsGoneSpoilsNoPass: a row referring to a log entry
// that is gone (the release before compacted the store, not knowing rows
// refer to entries; or the store is damaged) leaves snapshots and the
// search index's build to every other row, instead of failing them.
func TestARowWhoseEntryIsGoneSpoilsNoPass(t *testing.T) {
	h := newHarness(t)
	registerCard(h, "lost")
	lost := h.seq()
	h.want(h.do("POST", "/v1/agents/register", `{"agent_id":"kept","capabilities":["echo"]}`), 201, "")
	if err := h.log.DB().Update(func(tx *store.Txn) error { return tx.Delete(store.Key("l", store.U64(lost))) }); err != nil {
		t.Fatal(err)
	}
	replica := newHarnessOn(t, storetest.DB(t))
	if _, err := replica.log.Restore(storetest.Snapshot(t, h.log)); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"lost", "kept"} {
		if _, err := replica.dir.Lookup(id); err != nil {
			t.Fatalf("%s from the snapshot: %v", id, err)
		}
	}
	if err := h.dir.BuildIndex(t.Context()); err != nil {
		t.Fatalf("the index's build: %v", err)
	}
	if got := h.want(h.do("POST", "/v1/search", `{"capabilities":["echo"]}`), 200, ""); !strings.Contains(got.raw, `"kept"`) {
		t.Fatalf("search after the build: %s", got.raw)
	}
}
