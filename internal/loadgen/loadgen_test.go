package loadgen

import (
	"os"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"testing"
	"time"
)

// TestMergePoolsLatencies: runs merged are one run of all their requests,
// its percentiles those of all their latencies, not an average of theirs.
func TestMergePoolsLatencies(t *testing.T) {
	ms := time.Millisecond
	run := func(n, errs int64, elapsed time.Duration, lat ...time.Duration) Result {
		r := Result{Requests: n, Errors: errs, Elapsed: elapsed}
		r.summarise(lat)
		return r
	}
	fast := run(3, 0, time.Second, 1*ms, 2*ms, 3*ms)
	slow := run(1, 1, time.Second, 100*ms)
	m := Merge(fast, slow)
	if m.Requests != 4 || m.Errors != 1 || m.Elapsed != 2*time.Second || m.PerSecond != 2 {
		t.Fatalf("merged %+v: want 4 requests, 1 error in 2 s, 2 a second", m)
	}
	if m.P50 != 3*ms || m.Max != 100*ms || fast.P50 != 2*ms || slow.P50 != 100*ms {
		t.Fatalf("merged p50 %s max %s (runs' p50 %s and %s): want 3ms, 100ms", m.P50, m.Max, fast.P50, slow.P50)
	}
	if again := Merge(m); again.P50 != m.P50 || again.P99 != m.P99 || again.Requests != m.Requests {
		t.Fatalf("a merged run merged again changed: %+v against %+v", again, m)
	}
}

// TestWordsAreSpelledOnFirstUse: a process that links this package (every
// mesh command, a node too) holds none of the vocabulary's 20,001 words
// until it draws words. Run in a process of its own, where nothing drew
// words before.
func TestWordsAreSpelledOnFirstUse(t *testing.T) {
	if os.Getenv("LOADGEN_FRESH") == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestWordsAreSpelledOnFirstUse$")
		cmd.Env = append(os.Environ(), "LOADGEN_FRESH=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		return
	}
	objects := func() uint64 {
		runtime.GC()
		s := []metrics.Sample{{Name: "/gc/heap/objects:objects"}}
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	before := objects()
	w := NewWords(1)
	if added := objects() - before; added < 20_000 {
		t.Fatalf("drawing words first added %d objects to the heap: the vocabulary was spelled before", added)
	}
	runtime.KeepAlive(w)
}
