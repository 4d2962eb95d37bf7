package cmdlog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/agentmesh/mesh/store"
)

// refKV is kv whose state refers to the log: an op {"k","v"} sets k to
// "@<seq>", its entry, which carries v (a Referrer); Apply lets go of
// the entry k referred to before. Refers fails for the entry of the value
// failOn.
type refKV struct {
	kv
	failOn string
}

var errRefers = errors.New("refers failed")

func (m *refKV) Apply(tx *store.Txn, e *Entry) (any, error) {
	var op kvOp
	if err := json.Unmarshal(e.Op, &op); err != nil {
		return nil, err
	}
	key := store.Key("kv", op.K)
	if v, err := tx.Get(key); err == nil {
		was, _ := strconv.ParseUint(strings.TrimPrefix(string(v), "@"), 10, 64)
		if err := Release(tx, was); err != nil {
			return nil, err
		}
	}
	return nil, tx.Set(key, []byte("@"+strconv.FormatUint(e.Seq, 10)))
}

func (m *refKV) Inline(tx *store.Txn, key, val []byte) ([]byte, error) {
	seq, ok := strings.CutPrefix(string(val), "@")
	if !ok {
		return val, nil
	}
	n, _ := strconv.ParseUint(seq, 10, 64)
	e, err := EntryAt(tx, n)
	if err != nil {
		return nil, err
	}
	var op kvOp
	if err := json.Unmarshal(e.Op, &op); err != nil {
		return nil, err
	}
	return []byte(op.V), nil
}

func (m *refKV) Refers(tx *store.Txn, e *Entry) (bool, error) {
	var op kvOp
	if err := json.Unmarshal(e.Op, &op); err != nil {
		return false, err
	}
	if op.V == m.failOn {
		return false, errRefers
	}
	v, err := tx.Get(store.Key("kv", op.K))
	return err == nil && string(v) == "@"+strconv.FormatUint(e.Seq, 10), nil
}

// TestStateReferringToTheLogStaysWhole: a machine whose state refers to
// the change log's entries (Referrer) keeps them through compactions
// while it refers to them, though the change feed no longer serves them,
// and lets go of them when it no longer does (Release); a compaction that
// cannot tell (here, an error) drops nothing; a snapshot carries the
// state with what it refers to, which the node installing it reads
// without the log.
func TestStateReferringToTheLogStaysWhole(t *testing.T) {
	db, err := store.Open(store.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	src, err := Open(db)
	if err != nil {
		t.Fatal(err)
	}
	m := &refKV{failOn: "v7"}
	src.Handle("kv", m)
	p := NewLocal(src)
	for i := range 10 {
		propose(t, p, fmt.Sprint("k", i%8), fmt.Sprint("v", i)) // k0 and k1 set twice
	}
	if got := m.get(t, src, "k3"); got != "@4" {
		t.Fatalf("k3 is %q", got)
	}

	snap, err := src.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	_, err = snap.WriteTo(&buf)
	snap.Close()
	if err != nil {
		t.Fatal(err)
	}
	dst, dm := memLog(t)
	if _, err := dst.Restore(&buf); err != nil {
		t.Fatal(err)
	}
	if dm.get(t, dst, "k3") != "v3" || dm.get(t, dst, "k0") != "v8" {
		t.Fatalf("the snapshot carried k3 %q, k0 %q", dm.get(t, dst, "k3"), dm.get(t, dst, "k0"))
	}

	held := func(seq uint64) bool {
		err := db.View(func(tx *store.Txn) error { _, err := EntryAt(tx, seq); return err })
		return err == nil
	}
	if err := src.Compact(0); !errors.Is(err, errRefers) {
		t.Fatalf("a compaction whose machine failed: %v", err)
	}
	if src.First() != 1 || !held(1) || !held(2) {
		t.Fatalf("a failed compaction dropped entries (first %d)", src.First())
	}
	m.failOn = ""
	if err := src.Compact(0); err != nil {
		t.Fatal(err)
	}
	if src.First() != 11 {
		t.Fatalf("the change log starts at %d", src.First())
	}
	if _, err := src.Changes(0, 10, 1<<20); !errors.Is(err, ErrCompacted) {
		t.Fatalf("the changes of a compacted log: %v", err)
	}
	for seq := range uint64(11) {
		// Entries 1 and 2 set k0 and k1 again at 9 and 10.
		if want := seq >= 3; held(seq) != want {
			t.Fatalf("after the compaction entry %d is kept: %v", seq, held(seq))
		}
	}
	propose(t, p, "k3", "v10") // k3 lets go of entry 4
	if held(4) || !held(11) || m.get(t, src, "k3") != "@11" {
		t.Fatalf("k3 set again: entry 4 kept %v, k3 %q", held(4), m.get(t, src, "k3"))
	}
}
