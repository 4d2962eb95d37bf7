package registryapi

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

func memDirectory(t *testing.T) *Directory {
	t.Helper()
	db, err := store.Open(store.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	d, err := OpenDirectory(db)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// fetchFrom serves a replica from a directory, as the changes protocol does.
func fetchFrom(src *Directory, calls *atomic.Int32) ChangesFunc {
	return func(_ context.Context, since uint64) ([]Command, uint64, error) {
		calls.Add(1)
		raw, err := src.Changes(since, 2, 1<<20) // small batches: several rounds
		cmds := make([]Command, len(raw))
		for i, r := range raw {
			json.Unmarshal(r, &cmds[i])
		}
		return cmds, src.Seq(), err
	}
}

func TestReplicaAppliesInOrderAndFillsGaps(t *testing.T) {
	src, dst := memDirectory(t), memDirectory(t)
	log := NewLocalLog(src)
	var published []Command
	log.OnCommit = func(c Command) { published = append(published, c) }
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	for i := range 5 {
		if _, err := log.Propose(context.Background(), Command{At: at, Register: &RegisterOp{
			AgentID: fmt.Sprintf("r%d", i), Capabilities: []string{}, APIKeyHash: "h"}}); err != nil {
			t.Fatal(err)
		}
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
		a, _ := src.Lookup(fmt.Sprintf("r%d", i))
		b, err := dst.Lookup(fmt.Sprintf("r%d", i))
		if err != nil || !reflect.DeepEqual(a, b) {
			t.Fatalf("replica row r%d differs: %+v vs %+v (%v)", i, a, b, err)
		}
	}
}

func TestReplicaWaitForAndFailure(t *testing.T) {
	src, dst := memDirectory(t), memDirectory(t)
	log := NewLocalLog(src)
	at := time.Now().UnixNano()
	log.Propose(context.Background(), Command{At: at, Register: &RegisterOp{AgentID: "w", Capabilities: []string{}, APIKeyHash: "h"}})
	down := errors.New("directory unreachable")
	var fail atomic.Bool
	fail.Store(true)
	var calls atomic.Int32
	fetch := fetchFrom(src, &calls)
	rep := NewReplica(dst, func(ctx context.Context, since uint64) ([]Command, uint64, error) {
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
	if _, err := dst.Agent("w"); err != nil {
		t.Fatal(err)
	}
}
