package cmdlog

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/mesh/store"
)

// crashDirEnv names, in the process TestCommitBatchSurvivesAKill starts,
// the store it commits batches to until it is killed.
const crashDirEnv = "CMDLOG_CRASH_DIR"

// TestCommitBatchSurvivesAKill: a process committing batches (some too
// large for one transaction, committed in parts) is killed (SIGKILL) at
// whatever point it reached, three times; each time the store opens with
// every entry the process saw committed, and the log and the machine's
// state agree: entries 1 to seq, each applied, none after (no part of a
// batch without the rest of its transaction, no gap).
func TestCommitBatchSurvivesAKill(t *testing.T) {
	if dir := os.Getenv(crashDirEnv); dir != "" {
		commitUntilKilled(dir)
		return
	}
	dir := t.TempDir()
	for round := range 3 {
		seen := runAndKill(t, dir)
		l, m := openLog(t, store.Options{Dir: dir})
		seq := l.Seq()
		if seq < seen {
			t.Fatalf("round %d: the store holds seq %d, the process had committed %d", round, seq, seen)
		}
		raw, err := l.Changes(0, int(seq)+1, 1<<30)
		if err != nil || uint64(len(raw)) != seq {
			t.Fatalf("round %d: %d entries in the log, seq %d, %v", round, len(raw), seq, err)
		}
		for i, r := range raw {
			var e Entry
			if json.Unmarshal(r, &e) != nil || e.Seq != uint64(i+1) {
				t.Fatalf("round %d: entry %d of the log: %.80s", round, i+1, r)
			}
		}
		for s := uint64(1); s <= seq+1; s++ {
			if applied := m.get(t, l, fmt.Sprint("c", s)) != ""; applied != (s <= seq) {
				t.Fatalf("round %d: entry %d applied %v, the log at seq %d", round, s, applied, seq)
			}
		}
		l.DB().Close()
	}
}

// runAndKill runs this test's process on dir, kills it at some point of a
// batch after it reported a few committed, and returns the last seq it
// reported.
func runAndKill(t *testing.T, dir string) uint64 {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCommitBatchSurvivesAKill$")
	cmd.Env = append(os.Environ(), crashDirEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var seen uint64
	lines := bufio.NewScanner(out)
	for batches := 0; batches < 5 && lines.Scan(); {
		if s, ok := strings.CutPrefix(lines.Text(), "committed "); ok {
			seen, _ = strconv.ParseUint(s, 10, 64)
			batches++
		}
	}
	// At once, the kill would find the process starting its next batch;
	// a batch takes a few fsyncs, some milliseconds.
	time.Sleep(time.Duration(rand.Int64N(int64(5 * time.Millisecond))))
	cmd.Process.Kill()
	cmd.Wait()
	if seen == 0 {
		t.Fatalf("the process committed nothing: %v", lines.Err())
	}
	return seen
}

// commitUntilKilled commits batches of entries to the log in dir, fsync on,
// each of a different size, reporting each seq committed, for ever.
func commitUntilKilled(dir string) {
	db, err := store.Open(store.Options{Dir: dir, SyncWrites: true})
	if err != nil {
		panic(err)
	}
	l, err := Open(db)
	if err != nil {
		panic(err)
	}
	l.Handle("kv", &kv{})
	for n := 1; ; n++ {
		var es []Entry
		for i := range 64 + n%4*64 {
			s := l.Seq() + uint64(i) + 1
			op, _ := json.Marshal(kvOp{fmt.Sprint("c", s), strings.Repeat("v", 1000*(1+n%4))})
			es = append(es, Entry{Seq: s, At: int64(s), Kind: "kv", Op: op})
		}
		if _, err := l.CommitBatch(es); err != nil {
			panic(err)
		}
		fmt.Printf("committed %d\n", l.Seq())
	}
}
