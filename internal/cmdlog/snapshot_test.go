package cmdlog

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/agentmesh/mesh/store"
)

func TestSnapshotRoundTripAndCompaction(t *testing.T) {
	src, _ := memLog(t)
	if err := src.BindOrigin("did:key:src"); err != nil {
		t.Fatal(err)
	}
	p := NewLocal(src)
	for i := range 50 {
		propose(t, p, fmt.Sprint("k", i), fmt.Sprint(i))
	}
	// State with an expiry, and a key of this node alone (not in a
	// snapshot).
	src.DB().Update(func(tx *store.Txn) error {
		tx.SetTTL([]byte("kv/ttl"), []byte("t"), time.Hour)
		return tx.Set([]byte("p/local"), []byte("mine"))
	})
	snap, err := src.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	propose(t, p, "after", "x") // not in the image
	var buf bytes.Buffer
	if _, err := snap.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	snap.Close()

	dst, dm := memLog(t)
	propose(t, NewLocal(dst), "stale", "junk") // replaced by the snapshot
	dst.DB().Update(func(tx *store.Txn) error { return tx.Set([]byte("p/dst"), []byte("kept")) })
	h, err := dst.Restore(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if h.Seq != 50 || dst.Seq() != 50 || dst.First() != 51 {
		t.Fatalf("restored seq %d first %d (header %+v)", dst.Seq(), dst.First(), h)
	}
	if dm.get(t, dst, "k49") != "49" || dm.get(t, dst, "stale") != "" || dm.get(t, dst, "after") != "" {
		t.Fatal("restored state differs from the image")
	}
	if o, _ := dst.Origin(); o != "did:key:src" {
		t.Fatalf("origin %q", o)
	}
	dst.DB().View(func(tx *store.Txn) error {
		if ok, _ := tx.Has([]byte("p/local")); ok {
			t.Error("a node-local key travelled in the snapshot")
		}
		if ok, _ := tx.Has([]byte("p/dst")); !ok {
			t.Error("the restore dropped a node-local key")
		}
		return tx.ScanExpiry([]byte("kv/ttl"), func(_, _ []byte, exp uint64) error {
			if exp == 0 {
				t.Error("the expiry was lost")
			}
			return nil
		})
	})
	// The log goes on from the snapshot's seq.
	propose(t, NewLocal(dst), "next", "y")
	if dst.Seq() != 51 {
		t.Fatalf("seq after the snapshot: %d", dst.Seq())
	}
	if _, err := dst.Changes(10, 10, 1<<20); !errors.Is(err, ErrCompacted) {
		t.Fatalf("changes from before the snapshot: %v", err)
	}
	// Compaction keeps the last entries and sends the others to snapshots.
	if err := src.Compact(10); err != nil {
		t.Fatal(err)
	}
	if src.First() != 42 {
		t.Fatalf("first after compaction: %d", src.First())
	}
	if _, err := src.Changes(5, 10, 1<<20); !errors.Is(err, ErrCompacted) {
		t.Fatalf("compacted changes served: %v", err)
	}
	if raw, err := src.Changes(41, 100, 1<<20); err != nil || len(raw) != 10 {
		t.Fatalf("changes after compaction: %d %v", len(raw), err)
	}
}

// TestCompactionsAtOnceOnlyRaiseFirst: a compaction that read the first
// entry before another one ran (a quorum member compacts every minute and
// at each Raft snapshot) neither moves the first entry back nor drops
// entries past the log's last.
func TestCompactionsAtOnceOnlyRaiseFirst(t *testing.T) {
	src, _ := publishedEntries(t, "c", 20)
	if err := src.Compact(5); err != nil {
		t.Fatal(err)
	}
	// The slower one's batches: begun at 1, and past the last entry.
	for _, run := range [][2]uint64{{1, 10}, {14, 30}} {
		if err := src.compactRun(run[0], run[1]); err != nil {
			t.Fatal(err)
		}
	}
	if src.First() != 21 {
		t.Fatalf("first after the two compactions: %d", src.First())
	}
	propose(t, NewLocal(src), "next", "x")
	if raw, err := src.Changes(20, 10, 1<<20); err != nil || len(raw) != 1 {
		t.Fatalf("changes after them: %d %v", len(raw), err)
	}
}

func TestRestoreRefusesBadStreamsAndRecovers(t *testing.T) {
	dir := t.TempDir()
	src, _ := memLog(t)
	for i := range 20 {
		propose(t, NewLocal(src), fmt.Sprint("k", i), "v")
	}
	// Incompressible values: the snapshot spans many compressed blocks,
	// so that a cut one fails in the middle of loading.
	src.DB().Update(func(tx *store.Txn) error {
		for i := range 400 {
			b := make([]byte, 1024)
			rand.Read(b)
			tx.Set([]byte(fmt.Sprint("kv/big", i)), b)
		}
		return nil
	})
	snap, _ := src.Snapshot()
	var buf bytes.Buffer
	snap.WriteTo(&buf)
	snap.Close()

	dst, dm := openLog(t, store.Options{Dir: dir})
	propose(t, NewLocal(dst), "old", "1")
	if _, err := dst.Restore(bytes.NewReader([]byte("not a snapshot"))); err == nil {
		t.Fatal("garbage restored")
	}
	if dst.Seq() != 1 || dm.get(t, dst, "old") != "1" {
		t.Fatal("a stream refused before it began changed the log")
	}
	// Cut short: the log is left empty, never half of each.
	if _, err := dst.Restore(io.LimitReader(bytes.NewReader(buf.Bytes()), int64(buf.Len()/2))); err == nil {
		t.Fatal("a truncated snapshot restored")
	}
	if dst.Seq() != 0 || dm.get(t, dst, "old") != "" {
		t.Fatalf("after a cut restore: seq %d", dst.Seq())
	}
	// A crash in the middle of a restore: Open finishes emptying.
	dst.DB().Update(func(tx *store.Txn) error {
		tx.Set([]byte("kv/half"), []byte("x"))
		return tx.Set(restoringKey, []byte(`["kv/","l/"]`))
	})
	dst.DB().Close()
	again, am := openLog(t, store.Options{Dir: dir})
	if again.Seq() != 0 || am.get(t, again, "half") != "" {
		t.Fatal("a half restore survived a restart")
	}
	if _, err := again.Restore(bytes.NewReader(buf.Bytes())); err != nil || again.Seq() != 20 {
		t.Fatalf("restore after recovery: %v, seq %d", err, again.Seq())
	}
}
