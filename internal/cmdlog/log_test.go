package cmdlog

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentmesh/mesh/store"
)

// kv is a toy Machine: an op {"k","v"} sets k to v; an empty k is refused.
type kv struct {
	committed []uint64
	results   []any // what Committed was told Apply returned
}

type kvOp struct{ K, V string }

var errEmptyKey = errors.New("empty key")

func (m *kv) Apply(tx *store.Txn, e *Entry) (any, error) {
	var op kvOp
	if err := json.Unmarshal(e.Op, &op); err != nil {
		return nil, err
	}
	if op.K == "" {
		return nil, errEmptyKey
	}
	return op.V, tx.Set(store.Key("kv", op.K), []byte(op.V))
}

func (m *kv) Committed(e *Entry, res any) {
	m.committed, m.results = append(m.committed, e.Seq), append(m.results, res)
}
func (m *kv) State() [][]byte { return [][]byte{[]byte("kv/")} }
func (m *kv) Restored()       {}

func (m *kv) get(t *testing.T, l *Log, k string) string {
	t.Helper()
	var v []byte
	err := l.DB().View(func(tx *store.Txn) error {
		var err error
		v, err = tx.Get(store.Key("kv", k))
		return err
	})
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		t.Fatal(err)
	}
	return string(v)
}

func openLog(t *testing.T, opts store.Options) (*Log, *kv) {
	t.Helper()
	db, err := store.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	l, err := Open(db)
	if err != nil {
		t.Fatal(err)
	}
	m := &kv{}
	l.Handle("kv", m)
	return l, m
}

func memLog(t *testing.T) (*Log, *kv) { return openLog(t, store.Options{InMemory: true}) }

// fetchFrom serves a replica from a log, as the changes protocol does.
func fetchFrom(src *Log, calls *atomic.Int32) ChangesFunc {
	return func(_ context.Context, since uint64) ([]Entry, uint64, error) {
		calls.Add(1)
		raw, err := src.Changes(since, 2, 1<<20) // small batches: several rounds
		entries := make([]Entry, len(raw))
		for i, r := range raw {
			json.Unmarshal(r, &entries[i])
		}
		return entries, src.Seq(), err
	}
}

func propose(t *testing.T, p Proposer, k, v string) {
	t.Helper()
	if _, err := p.Propose(context.Background(), "kv", time.Now().UnixNano(), kvOp{k, v}); err != nil {
		t.Fatal(err)
	}
}

func TestLocalProposeCommitAndRefuse(t *testing.T) {
	l, m := memLog(t)
	p := NewLocal(l)
	var seen []Entry
	p.OnCommit = func(e Entry) { seen = append(seen, e) }
	res, err := p.Propose(context.Background(), "kv", 7, kvOp{"a", "1"})
	if err != nil || res != "1" {
		t.Fatalf("propose: %v %v", res, err)
	}
	// A refused operation takes no seq, is not logged and is not published.
	if _, err := p.Propose(context.Background(), "kv", 8, kvOp{"", "x"}); !errors.Is(err, errEmptyKey) {
		t.Fatalf("refused op: %v", err)
	}
	if _, err := p.Propose(context.Background(), "nope", 9, kvOp{"b", "2"}); !errors.Is(err, ErrUnknownKind) {
		t.Fatalf("unknown kind: %v", err)
	}
	propose(t, p, "b", "2")
	if l.Seq() != 2 || len(seen) != 2 || seen[1].Seq != 2 || !reflect.DeepEqual(m.committed, []uint64{1, 2}) || !reflect.DeepEqual(m.results, []any{"1", "2"}) {
		t.Fatalf("seq %d, published %v, committed %v with %v", l.Seq(), seen, m.committed, m.results)
	}
	if seen[0].At != 7 || seen[0].Time() != time.Unix(0, 7).UTC() {
		t.Fatalf("entry clock: %+v", seen[0])
	}
	if _, err := l.Commit(&Entry{Seq: 5, Kind: "kv", Op: []byte(`{"K":"c"}`)}); !errors.Is(err, ErrOutOfOrder) {
		t.Fatalf("out of order commit: %v", err)
	}
	raw, err := l.Changes(0, 10, 1<<20)
	if err != nil || len(raw) != 2 {
		t.Fatalf("changes: %d %v", len(raw), err)
	}
	if raw, _ := l.Changes(0, 10, 1); len(raw) != 1 {
		t.Fatalf("byte limit: the first entry always comes, no more: %d", len(raw))
	}
	if raw, _ := l.Changes(1, 10, 1<<20); len(raw) != 1 {
		t.Fatalf("changes since 1: %d", len(raw))
	}
}

func TestLogSurvivesRestartAndBindsOrigin(t *testing.T) {
	dir := t.TempDir()
	l, _ := openLog(t, store.Options{Dir: dir})
	if err := l.BindOrigin("did:key:one"); err != nil {
		t.Fatal(err)
	}
	propose(t, NewLocal(l), "a", "1")
	l.DB().Close()
	l2, m2 := openLog(t, store.Options{Dir: dir})
	if l2.Seq() != 1 || m2.get(t, l2, "a") != "1" {
		t.Fatalf("after restart: seq %d", l2.Seq())
	}
	if err := l2.BindOrigin("did:key:one"); err != nil {
		t.Fatal(err)
	}
	if err := l2.BindOrigin("did:key:two"); err == nil {
		t.Fatal("a store with one directory's log accepted another's")
	}
	// A store with changes but no recorded origin cannot be adopted either.
	l3, _ := memLog(t)
	propose(t, NewLocal(l3), "x", "y")
	if err := l3.BindOrigin("did:key:one"); err == nil {
		t.Fatal("changes of unknown origin adopted")
	}
}

// publishedEntries commits count entries on a log of their own, setting
// <prefix><i> to <i>, and returns the log and the entries.
func publishedEntries(t *testing.T, prefix string, count int) (*Log, []Entry) {
	t.Helper()
	src, _ := memLog(t)
	p := NewLocal(src)
	var es []Entry
	p.OnCommit = func(e Entry) { es = append(es, e) }
	for i := range count {
		propose(t, p, fmt.Sprintf("%s%d", prefix, i), fmt.Sprint(i))
	}
	return src, es
}

func TestReplicaAppliesInOrderAndFillsGaps(t *testing.T) {
	src, published := publishedEntries(t, "r", 7)
	dst, dm := memLog(t)
	var calls atomic.Int32
	rep := NewReplica(dst, fetchFrom(src, &calls), nil)
	rep.PollInterval = time.Hour // only gaps and kicks trigger a catch-up here
	// Gossip delivers 1, then 3 and 2 together (one overtook the other),
	// then 5 (a gap), then 1 again (a duplicate).
	ctx := context.Background()
	rep.offer(ctx, published[:1])
	rep.offer(ctx, []Entry{published[2], published[1]})
	if dst.Seq() != 3 || calls.Load() != 0 {
		t.Fatalf("after seq 3: seq %d, %d fetches", dst.Seq(), calls.Load())
	}
	rep.offer(ctx, published[4:5])
	if dst.Seq() != 7 || calls.Load() == 0 {
		t.Fatalf("gap not filled: seq %d, %d fetches", dst.Seq(), calls.Load())
	}
	rep.offer(ctx, published[:1])
	if _, caught, err := rep.Status(); !caught || err != nil {
		t.Fatalf("status: caught up %v, %v", caught, err)
	}
	for i := range 7 {
		if v := dm.get(t, dst, fmt.Sprintf("r%d", i)); v != fmt.Sprint(i) {
			t.Fatalf("replica r%d = %q", i, v)
		}
	}
}

// TestCommitBatch: entries of the next seqs commit in one transaction,
// the machine learning of each in order; entries out of order are
// refused; a refused entry leaves those before it committed, as Commit
// one at a time would.
func TestCommitBatch(t *testing.T) {
	_, es := publishedEntries(t, "b", 4)
	dst, dm := memLog(t)
	if n, err := dst.CommitBatch(es[1:]); n != 0 || !errors.Is(err, ErrOutOfOrder) {
		t.Fatalf("entries after a gap: %d committed, %v", n, err)
	}
	if n, err := dst.CommitBatch(es[:3]); n != 3 || err != nil || dst.Seq() != 3 {
		t.Fatalf("a batch: %d committed, %v, seq %d", n, err, dst.Seq())
	}
	if !slices.Equal(dm.committed, []uint64{1, 2, 3}) {
		t.Fatalf("the machine learnt of %v", dm.committed)
	}
	for i, e := range es[:3] {
		var op kvOp
		json.Unmarshal(e.Op, &op)
		if dm.results[i] != op.V {
			t.Fatalf("entry %d committed with %v, Apply returned %q", e.Seq, dm.results[i], op.V)
		}
	}
	bad := es[3]
	bad.Op = json.RawMessage(`{"K":""}`) // refused by the machine
	next := Entry{Seq: 5, At: 5, Kind: "kv", Op: json.RawMessage(`{"K":"b9","V":"9"}`)}
	if n, err := dst.CommitBatch([]Entry{bad, next}); n != 0 || !errors.Is(err, errEmptyKey) || dst.Seq() != 3 {
		t.Fatalf("a refused first entry: %d committed, %v, seq %d", n, err, dst.Seq())
	}
	if n, err := dst.CommitBatch([]Entry{es[3], {Seq: 5, At: 5, Kind: "kv", Op: json.RawMessage(`{"K":""}`)}}); n != 1 || !errors.Is(err, errEmptyKey) || dst.Seq() != 4 {
		t.Fatalf("a refused second entry: %d committed, %v, seq %d", n, err, dst.Seq())
	}
	for i := range 4 {
		if v := dm.get(t, dst, fmt.Sprintf("b%d", i)); v != fmt.Sprint(i) {
			t.Fatalf("b%d = %q", i, v)
		}
	}
}

// seqAtCommit is kv noting, as it learns of each entry committed, the
// log's seq then: the seq before the entry's transaction.
type seqAtCommit struct {
	*kv
	l      *Log
	before map[uint64]bool
}

func (m seqAtCommit) Committed(e *Entry, _ any) { m.before[m.l.Seq()] = true }

// TestCommitBatchLargerThanATransaction: entries too large together for
// one of the store's transactions (a memtable of 8 MiB takes 1.2 MiB)
// commit in a few transactions, not one each.
func TestCommitBatchLargerThanATransaction(t *testing.T) {
	l, m := openLog(t, store.Options{Dir: t.TempDir()})
	txns := seqAtCommit{kv: m, l: l, before: map[uint64]bool{}}
	l.Handle("kv", txns)
	var es []Entry
	for i := range maxApplied {
		op, _ := json.Marshal(kvOp{fmt.Sprint("k", i), strings.Repeat("v", 3900)})
		es = append(es, Entry{Seq: uint64(i + 1), At: 1, Kind: "kv", Op: op})
	}
	if n, err := l.CommitBatch(es); n != len(es) || err != nil || l.Seq() != uint64(len(es)) {
		t.Fatalf("%d committed, %v, seq %d", n, err, l.Seq())
	}
	if len(txns.before) > 8 {
		t.Fatalf("%d entries committed in %d transactions", len(es), len(txns.before))
	}
	if v := m.get(t, l, fmt.Sprint("k", len(es)-1)); len(v) != 3900 {
		t.Fatalf("the last entry's value: %d bytes", len(v))
	}
}

func TestReplicaWaitForAndFailure(t *testing.T) {
	src, _ := memLog(t)
	dst, dm := memLog(t)
	propose(t, NewLocal(src), "w", "1")
	down := errors.New("directory unreachable")
	var fail atomic.Bool
	fail.Store(true)
	var calls atomic.Int32
	fetch := fetchFrom(src, &calls)
	rep := NewReplica(dst, func(ctx context.Context, since uint64) ([]Entry, uint64, error) {
		if fail.Load() {
			return nil, 0, down
		}
		return fetch(ctx, since)
	}, nil)
	rep.PollInterval = 10 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { rep.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	short, c2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer c2()
	if err := rep.WaitFor(short, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitFor while the directory is down: %v", err)
	}
	if _, caught, err := rep.Status(); caught || !errors.Is(err, down) {
		t.Fatalf("status while down: caught up %v, err %v", caught, err)
	}
	fail.Store(false)
	long, c3 := context.WithTimeout(context.Background(), 5*time.Second)
	defer c3()
	if err := rep.WaitFor(long, 1); err != nil {
		t.Fatalf("WaitFor after recovery: %v", err)
	}
	if dm.get(t, dst, "w") != "1" {
		t.Fatal("replica missing the entry after recovery")
	}
}

func TestReplicaSyncFetchesWhatGossipMissed(t *testing.T) {
	src, _ := memLog(t)
	dst, dm := memLog(t)
	p := NewLocal(src)
	var calls atomic.Int32
	rep := NewReplica(dst, fetchFrom(src, &calls), nil)
	rep.PollInterval = time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { rep.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	for i := range 3 {
		propose(t, p, fmt.Sprintf("k%d", i), "v") // never offered: gossip lost
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := rep.Sync(sctx); err != nil {
			t.Fatal(err)
		}
		scancel()
		if dm.get(t, dst, fmt.Sprintf("k%d", i)) != "v" {
			t.Fatalf("Sync returned before k%d arrived", i)
		}
	}
}

// kvPending is a Pending of the kv machine.
func kvPending(at int64, index uint64, k, v, write string) Pending {
	op, _ := json.Marshal(kvOp{k, v})
	return Pending{At: at, Kind: "kv", Op: op, Index: index, Write: write}
}

// TestAppendBatchAppliesInOrderAroundRefusals: a batch is applied in
// order, each entry with the next seq, one refused in the middle taking
// none and changing nothing (though it wrote before it refused), the
// consensus index of the last one recorded; the machine learns of each
// in order, with what its Apply returned, and the whole survives a
// restart.
func TestAppendBatchAppliesInOrderAroundRefusals(t *testing.T) {
	dir := t.TempDir()
	l, m := openLog(t, store.Options{Dir: dir})
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		done <- l.Wait(ctx, 4)
	}()
	got, err := l.AppendBatch([]Pending{
		kvPending(1, 7, "a", "1", ""),
		kvPending(2, 8, "b", "2", ""),
		kvPending(3, 9, "", "half-written", ""), // refused
		kvPending(4, 10, "c", "3", ""),
		kvPending(5, 11, "", "", ""), // refused, last
	})
	if err != nil || len(got) != 5 {
		t.Fatalf("append: %v, %d results", err, len(got))
	}
	for i, want := range []uint64{1, 2, 0, 3, 0} {
		if got[i].Entry.Seq != want || (want == 0) != (got[i].Err != nil) {
			t.Fatalf("entry %d: seq %d err %v, want seq %d", i, got[i].Entry.Seq, got[i].Err, want)
		}
	}
	if !errors.Is(got[2].Err, errEmptyKey) || got[3].Res != "3" || got[3].Entry.At != 4 {
		t.Fatalf("results: %+v", got)
	}
	if l.Seq() != 3 || l.Index() != 10 || !reflect.DeepEqual(m.committed, []uint64{1, 2, 3}) || !reflect.DeepEqual(m.results, []any{"1", "2", "3"}) {
		t.Fatalf("seq %d index %d committed %v with %v", l.Seq(), l.Index(), m.committed, m.results)
	}
	if _, err := l.AppendBatch([]Pending{kvPending(6, 12, "d", "4", "")}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Wait: %v", err)
	}
	raw, _ := l.Changes(0, 10, 1<<20)
	var keys []string
	for _, r := range raw {
		var e Entry
		json.Unmarshal(r, &e)
		var op kvOp
		json.Unmarshal(e.Op, &op)
		keys = append(keys, fmt.Sprint(e.Seq, op.K))
	}
	if !reflect.DeepEqual(keys, []string{"1a", "2b", "3c", "4d"}) {
		t.Fatalf("change log: %v", keys)
	}
	l.DB().Close()
	l2, m2 := openLog(t, store.Options{Dir: dir})
	if l2.Index() != 12 || l2.Seq() != 4 || m2.get(t, l2, "c") != "3" || m2.get(t, l2, "") != "" {
		t.Fatalf("after reopening: index %d seq %d", l2.Index(), l2.Seq())
	}
	short, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := l2.Wait(short, 5); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait for a seq never committed: %v", err)
	}
}

// TestAppendBatchAppliesAWriteOnce: a second attempt of a write, in the
// same batch or a later one, within WriteWindow of the first (by the
// entries' clocks), applies nothing and returns what the first produced;
// the log forgets writes past the window, also in a snapshot's copy.
func TestAppendBatchAppliesAWriteOnce(t *testing.T) {
	l, m := memLog(t)
	sec := int64(time.Second)
	got, err := l.AppendBatch([]Pending{
		kvPending(1*sec, 1, "x", "first", "w1"),
		kvPending(2*sec, 2, "x", "second", "w1"), // a repeat in the same batch
		kvPending(3*sec, 3, "y", "1", "w2"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if !got[1].Repeat || got[1].Entry.Seq != 1 || string(got[1].Res.(json.RawMessage)) != `"first"` || got[2].Entry.Seq != 2 {
		t.Fatalf("results: %+v", got)
	}
	// What the log remembers, as a leader asks it of a write sent again.
	for _, c := range []struct {
		id   string
		at   int64
		want bool
	}{{"w1", 2 * sec, true}, {"w1", 1*sec + int64(WriteWindow), false}, {"w9", 2 * sec, false}} {
		if got, err := l.Remembers(c.id, time.Unix(0, c.at)); err != nil || got != c.want {
			t.Fatalf("Remembers(%s) at %v: %v %v, want %v", c.id, c.at, got, err, c.want)
		}
	}
	// A refused attempt is not remembered: the next one applies.
	if got, _ := l.AppendBatch([]Pending{kvPending(4*sec, 4, "", "", "w3"), kvPending(5*sec, 5, "z", "1", "w3")}); got[0].Err == nil || got[1].Repeat || got[1].Entry.Seq != 3 {
		t.Fatalf("a write refused, then tried again: %+v", got)
	}
	later := 3*sec + int64(WriteWindow) - 1
	if got, _ := l.AppendBatch([]Pending{kvPending(later, 6, "y", "again", "w2")}); !got[0].Repeat || got[0].Entry.Seq != 2 {
		t.Fatalf("a repeat just within the window: %+v", got)
	}
	if m.get(t, l, "x") != "first" || m.get(t, l, "y") != "1" || l.Seq() != 3 {
		t.Fatalf("a repeat was applied: x=%s y=%s seq %d", m.get(t, l, "x"), m.get(t, l, "y"), l.Seq())
	}
	// A snapshot carries the writes remembered.
	snap, err := l.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	snap.WriteTo(&buf)
	snap.Close()
	other, _ := memLog(t)
	if _, err := other.Restore(&buf); err != nil {
		t.Fatal(err)
	}
	for _, lg := range []*Log{l, other} {
		if got, _ := lg.AppendBatch([]Pending{kvPending(later, 7, "y", "again", "w2")}); !got[0].Repeat {
			t.Fatalf("a repeat after a snapshot: %+v", got)
		}
		// Past the window the same id is a write of its own, and the log
		// forgets what it no longer needs.
		past := 1*sec + int64(WriteWindow)
		if got, _ := lg.AppendBatch([]Pending{kvPending(past, 8, "x", "new", "w1")}); got[0].Repeat || got[0].Entry.Seq != 4 {
			t.Fatalf("the same write id past the window: %+v", got)
		}
		if n := countKeys(t, lg, writePrefix); n != 3 { // w1 anew, w2 and w3 (their windows are not over)
			t.Fatalf("%d writes remembered, want 3", n)
		}
		lg.AppendBatch([]Pending{kvPending(past+int64(WriteWindow)+1, 9, "q", "1", "")})
		if n, a := countKeys(t, lg, writePrefix), countKeys(t, lg, writeAgePrefix); n != 0 || a != 0 {
			t.Fatalf("writes remembered past their window: %d (by age %d)", n, a)
		}
	}
}

// TestAppendBatchForgetsWritesAcrossBatches: writes past the window are
// forgotten a bounded number per batch, the oldest first, until none is
// left, also by a log opened again midway (which knows nothing yet of the
// writes its state remembers), and a write older than the window in the
// batch that remembers it is forgotten at once, as every member does.
func TestAppendBatchForgetsWritesAcrossBatches(t *testing.T) {
	dir := t.TempDir()
	l, _ := openLog(t, store.Options{Dir: dir})
	sec := int64(time.Second)
	var ps []Pending
	for i := range 40 {
		ps = append(ps, kvPending(int64(i+1)*sec, uint64(i+1), "k", strconv.Itoa(i), "w"+strconv.Itoa(i)))
	}
	if _, err := l.AppendBatch(ps); err != nil {
		t.Fatal(err)
	}
	index := uint64(40)
	next := func(lg *Log, at int64) { // one entry, no write: forgets at most 18
		t.Helper()
		index++
		if _, err := lg.AppendBatch([]Pending{kvPending(at, index, "x", "1", "")}); err != nil {
			t.Fatal(err)
		}
	}
	past := 40*sec + int64(WriteWindow) + 1
	next(l, 20*sec) // within the window of every write: none forgotten
	if n := countKeys(t, l, writeAgePrefix); n != 40 {
		t.Fatalf("%d writes remembered before any window ended, want 40", n)
	}
	next(l, past)
	if n := countKeys(t, l, writeAgePrefix); n != 22 {
		t.Fatalf("%d writes remembered after one batch past their window, want 22", n)
	}
	l.DB().Close()
	l, _ = openLog(t, store.Options{Dir: dir})
	next(l, past)
	if n, w := countKeys(t, l, writeAgePrefix), countKeys(t, l, writePrefix); n != 4 || w != 4 {
		t.Fatalf("%d writes remembered (%d by age) after a restart and a second batch, want 4", w, n)
	}
	next(l, past)
	next(l, past) // nothing left to forget
	// A write whose clock is already past the window of the batch's last.
	if _, err := l.AppendBatch([]Pending{kvPending(past-int64(WriteWindow)-1, index+1, "y", "1", "old"), kvPending(past, index+2, "y", "2", "")}); err != nil {
		t.Fatal(err)
	}
	if n, w := countKeys(t, l, writeAgePrefix), countKeys(t, l, writePrefix); n != 0 || w != 0 {
		t.Fatalf("%d writes remembered (%d by age) past their window, want none", w, n)
	}
}

// TestAppendBatchFindsAWriteAfterARestart: the writes a log remembers
// are known to it again once opened anew, before any write is appended:
// a second attempt of one sent before the restart applies nothing, a new
// write applies.
func TestAppendBatchFindsAWriteAfterARestart(t *testing.T) {
	dir := t.TempDir()
	l, _ := openLog(t, store.Options{Dir: dir})
	sec := int64(time.Second)
	if _, err := l.AppendBatch([]Pending{kvPending(sec, 1, "x", "first", "w1"), kvPending(2*sec, 2, "y", "1", "w2")}); err != nil {
		t.Fatal(err)
	}
	l.DB().Close()
	l, m := openLog(t, store.Options{Dir: dir})
	got, err := l.AppendBatch([]Pending{kvPending(3*sec, 3, "z", "1", "w3"), kvPending(4*sec, 4, "x", "second", "w1")})
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Repeat || got[0].Entry.Seq != 3 || !got[1].Repeat || got[1].Entry.Seq != 1 || m.get(t, l, "x") != "first" {
		t.Fatalf("after a restart: %+v, x=%s", got, m.get(t, l, "x"))
	}
}

func countKeys(t *testing.T, l *Log, prefix []byte) int {
	t.Helper()
	n := 0
	l.DB().View(func(tx *store.Txn) error {
		return tx.Scan(prefix, nil, func(_, _ []byte) (bool, error) { n++; return true, nil })
	})
	return n
}

func TestAdoptOrigin(t *testing.T) {
	l, _ := memLog(t)
	propose(t, NewLocal(l), "a", "1") // fetched before the directory named itself
	if err := l.AdoptOrigin("did:key:q"); err != nil {
		t.Fatal(err)
	}
	if o, _ := l.Origin(); o != "did:key:q" {
		t.Fatalf("origin %q", o)
	}
	if err := l.AdoptOrigin("did:key:other"); !errors.Is(err, ErrOtherOrigin) {
		t.Fatalf("another origin adopted: %v", err)
	}
	// An empty store is bound anew.
	e, _ := memLog(t)
	if err := e.BindOrigin("did:key:a"); err != nil {
		t.Fatal(err)
	}
	if err := e.BindOrigin("did:key:b"); err != nil {
		t.Fatalf("an empty store keeps its first origin: %v", err)
	}
}
