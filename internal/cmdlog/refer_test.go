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
// "@<seq>", its entry, which carries v (a Referrer). Unlog fails for the
// entry of the value failOn.
type refKV struct {
	kv
	failOn string
}

var errUnlog = errors.New("unlog failed")

func (m *refKV) Apply(tx *store.Txn, e *Entry) (any, error) {
	var op kvOp
	if err := json.Unmarshal(e.Op, &op); err != nil {
		return nil, err
	}
	return nil, tx.Set(store.Key("kv", op.K), []byte("@"+strconv.FormatUint(e.Seq, 10)))
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

func (m *refKV) Unlog(tx *store.Txn, e *Entry) (int, error) {
	var op kvOp
	if err := json.Unmarshal(e.Op, &op); err != nil {
		return 0, err
	}
	if op.V == m.failOn {
		return 0, errUnlog
	}
	key := store.Key("kv", op.K)
	if v, err := tx.Get(key); err != nil || string(v) != "@"+strconv.FormatUint(e.Seq, 10) {
		return 0, nil // another entry's since
	}
	return len(op.V), tx.Set(key, []byte(op.V))
}

// TestStateReferringToTheLogStaysWhole: a machine whose state refers to
// the change log's entries (Referrer) gets what they carry into its state
// before the log drops them, in the transaction that does, so that a
// compaction that cannot (here, an error) drops nothing; and a snapshot
// carries the state with what it refers to, which the node installing it
// reads without the log.
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

	if err := src.Compact(0); !errors.Is(err, errUnlog) {
		t.Fatalf("a compaction whose machine failed: %v", err)
	}
	if src.First() != 1 || m.get(t, src, "k3") != "@4" {
		t.Fatalf("a failed compaction changed the log (first %d) or the state (k3 %q)", src.First(), m.get(t, src, "k3"))
	}
	m.failOn = ""
	if err := src.Compact(0); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"k0": "v8", "k1": "v9", "k3": "v3", "k7": "v7"} {
		if got := m.get(t, src, k); got != want {
			t.Fatalf("after the compaction %s is %q, not %q", k, got, want)
		}
	}
	if src.First() != 11 {
		t.Fatalf("the change log starts at %d", src.First())
	}
}
