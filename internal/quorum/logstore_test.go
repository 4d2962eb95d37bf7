package quorum

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/agentmesh/mesh/store"
)

// openTestLogStore opens a store with o and Raft's log on it.
func openTestLogStore(t *testing.T, o store.Options) (*store.DB, *logStore) {
	t.Helper()
	db, err := store.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	s, err := openLogStore(db)
	if err != nil {
		t.Fatal(err)
	}
	return db, s
}

func TestLogStore(t *testing.T) {
	dir := t.TempDir()
	open := func() (*store.DB, *logStore) { return openTestLogStore(t, store.Options{Dir: dir}) }
	db, s := open()
	if f, _ := s.FirstIndex(); f != 0 {
		t.Fatalf("empty store: first %d", f)
	}
	big := bytes.Repeat([]byte("x"), maxBatchBytes/2+1) // batches split
	var logs []*raft.Log
	for i := uint64(1); i <= 10; i++ {
		l := &raft.Log{Index: i, Term: 1 + i/5, Type: raft.LogCommand, Data: []byte{byte(i)}, AppendedAt: time.Unix(0, int64(i))}
		if i%3 == 0 {
			l.Data, l.Extensions = big, []byte("ext")
		}
		logs = append(logs, l)
	}
	if err := s.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	var got raft.Log
	if err := s.GetLog(6, &got); err != nil || got.Term != 2 || !bytes.Equal(got.Data, big) || string(got.Extensions) != "ext" || got.AppendedAt.UnixNano() != 6 {
		t.Fatalf("get 6: %v %+v", err, got.Index)
	}
	if err := s.GetLog(11, &got); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("missing entry: %v", err)
	}
	// Compaction behind a snapshot, then a conflicting suffix.
	if err := s.DeleteRange(1, 4); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRange(9, 10); err != nil {
		t.Fatal(err)
	}
	if f, _ := s.FirstIndex(); f != 5 {
		t.Fatalf("first %d", f)
	}
	if l, _ := s.LastIndex(); l != 8 {
		t.Fatalf("last %d", l)
	}
	if err := s.SetUint64([]byte("CurrentTerm"), 7); err != nil {
		t.Fatal(err)
	}
	if v, _ := s.Get([]byte("nothing")); v == nil || len(v) != 0 {
		t.Fatalf("missing stable key: %v", v)
	}
	db.Close()
	db, s = open()
	defer db.Close()
	if f, _ := s.FirstIndex(); f != 5 {
		t.Fatalf("first after reopen %d", f)
	}
	if l, _ := s.LastIndex(); l != 8 {
		t.Fatalf("last after reopen %d", l)
	}
	if v, _ := s.GetUint64([]byte("CurrentTerm")); v != 7 {
		t.Fatalf("term after reopen %d", v)
	}
	if err := s.DeleteRange(5, 8); err != nil {
		t.Fatal(err)
	}
	if f, _ := s.FirstIndex(); f != 0 {
		t.Fatalf("emptied store: first %d", f)
	}
}

func FuzzDecodeLog(f *testing.F) {
	f.Add(encodeLog(&raft.Log{Index: 1, Term: 2, Data: []byte("d"), Extensions: []byte("e")}))
	f.Fuzz(func(t *testing.T, b []byte) {
		var l, again raft.Log
		if decodeLog(b, &l) != nil {
			return
		}
		if err := decodeLog(encodeLog(&l), &again); err != nil || !bytes.Equal(again.Data, l.Data) ||
			!bytes.Equal(again.Extensions, l.Extensions) || again.Index != l.Index || again.Term != l.Term {
			t.Fatalf("an entry does not survive encoding: %v", err)
		}
	})
}

// TestLogStoreReadsRecentEntriesFromMemory: the entries stored last are
// read back without the store (here closed under it), at most
// recentCount of them and recentBytes in all; a deletion from the log
// forgets them, and a replaced entry reads as its replacement.
func TestLogStoreReadsRecentEntriesFromMemory(t *testing.T) {
	open := func() (*store.DB, *logStore) { return openTestLogStore(t, store.Options{InMemory: true}) }
	db, s := open()
	entry := func(i uint64, data []byte) *raft.Log {
		return &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: data}
	}
	var logs []*raft.Log
	for i := uint64(1); i <= recentCount+10; i++ {
		logs = append(logs, entry(i, []byte{byte(i)}))
	}
	if err := s.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	if err := s.StoreLogs([]*raft.Log{entry(recentCount+10, []byte("again"))}); err != nil {
		t.Fatal(err)
	}
	held := func(i uint64) (raft.Log, bool) {
		var l raft.Log
		return l, s.GetLog(i, &l) == nil
	}
	db.Close() // what is read now comes from memory
	for i := uint64(11); i < recentCount+10; i++ {
		if l, ok := held(i); !ok || l.Data[0] != byte(i) {
			t.Fatalf("entry %d, among the last %d stored: %v %v", i, recentCount, ok, l.Data)
		}
	}
	if l, ok := held(recentCount + 10); !ok || string(l.Data) != "again" {
		t.Fatalf("the entry stored again: %v %q", ok, l.Data)
	}
	if _, ok := held(10); ok {
		t.Fatalf("entry 10, past the last %d stored, read from memory", recentCount)
	}

	db, s = open()
	defer db.Close()
	big := bytes.Repeat([]byte("x"), recentBytes/5) // an in-memory store takes 1 MiB a value
	for i := uint64(1); i <= 8; i++ {
		if err := s.StoreLogs([]*raft.Log{entry(i, big)}); err != nil {
			t.Fatal(err)
		}
	}
	if n, b := len(s.recent.order), s.recent.bytes; n > 5 || b > recentBytes {
		t.Fatalf("%d entries of %d bytes held, at most %d", n, b, recentBytes)
	}
	if err := s.DeleteRange(7, 8); err != nil {
		t.Fatal(err)
	}
	if _, ok := held(8); ok {
		t.Fatal("a deleted entry still read")
	}
	if l, ok := held(6); !ok || len(l.Data) != len(big) {
		t.Fatal("an entry kept lost by a deletion of others")
	}
}
