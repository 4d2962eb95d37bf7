package cmdlog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentmesh/mesh/store"
)

// kv is a toy Machine: an op {"k","v"} sets k to v; an empty k is refused.
type kv struct{ committed []uint64 }

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

func (m *kv) Committed(e *Entry) { m.committed = append(m.committed, e.Seq) }
func (m *kv) State() [][]byte    { return [][]byte{[]byte("kv/")} }
func (m *kv) Restored()          {}

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
	if l.Seq() != 2 || len(seen) != 2 || seen[1].Seq != 2 || !reflect.DeepEqual(m.committed, []uint64{1, 2}) {
		t.Fatalf("seq %d, published %v, committed %v", l.Seq(), seen, m.committed)
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

func TestReplicaAppliesInOrderAndFillsGaps(t *testing.T) {
	src, _ := memLog(t)
	dst, dm := memLog(t)
	p := NewLocal(src)
	var published []Entry
	p.OnCommit = func(e Entry) { published = append(published, e) }
	for i := range 5 {
		propose(t, p, fmt.Sprintf("r%d", i), fmt.Sprint(i))
	}
	var calls atomic.Int32
	rep := NewReplica(dst, fetchFrom(src, &calls), nil)
	rep.PollInterval = time.Hour // only gaps and kicks trigger a catch-up here
	// Gossip delivers 1, then 4 (a gap), then 1 again (a duplicate).
	rep.offer(context.Background(), published[0])
	if dst.Seq() != 1 || calls.Load() != 0 {
		t.Fatalf("after seq 1: seq %d, %d fetches", dst.Seq(), calls.Load())
	}
	rep.offer(context.Background(), published[3])
	if dst.Seq() != 5 {
		t.Fatalf("gap not filled: seq %d", dst.Seq())
	}
	rep.offer(context.Background(), published[0])
	if _, caught, err := rep.Status(); !caught || err != nil {
		t.Fatalf("status: caught up %v, %v", caught, err)
	}
	for i := range 5 {
		if v := dm.get(t, dst, fmt.Sprintf("r%d", i)); v != fmt.Sprint(i) {
			t.Fatalf("replica r%d = %q", i, v)
		}
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

func TestAppendRecordsTheConsensusIndex(t *testing.T) {
	dir := t.TempDir()
	l, _ := openLog(t, store.Options{Dir: dir})
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		done <- l.Wait(ctx, 2)
	}()
	e := Entry{At: 1, Kind: "kv", Op: []byte(`{"K":"a","V":"1"}`)}
	if _, err := l.Append(&e, 7); err != nil || e.Seq != 1 || l.Index() != 7 {
		t.Fatalf("append: %v seq %d index %d", err, e.Seq, l.Index())
	}
	// A refused entry takes no seq and leaves the index alone.
	bad := Entry{At: 2, Kind: "kv", Op: []byte(`{"K":""}`)}
	if _, err := l.Append(&bad, 8); !errors.Is(err, errEmptyKey) || l.Index() != 7 || l.Seq() != 1 {
		t.Fatalf("refused append: %v index %d seq %d", err, l.Index(), l.Seq())
	}
	e2 := Entry{At: 3, Kind: "kv", Op: []byte(`{"K":"b","V":"2"}`)}
	if _, err := l.Append(&e2, 9); err != nil || e2.Seq != 2 {
		t.Fatalf("append: %v seq %d", err, e2.Seq)
	}
	if err := <-done; err != nil {
		t.Fatalf("Wait: %v", err)
	}
	l.DB().Close()
	l2, m2 := openLog(t, store.Options{Dir: dir})
	if l2.Index() != 9 || l2.Seq() != 2 || m2.get(t, l2, "b") != "2" {
		t.Fatalf("after reopening: index %d seq %d", l2.Index(), l2.Seq())
	}
	short, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := l2.Wait(short, 3); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait for a seq never committed: %v", err)
	}
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
