// Package testkit is what every package's tests share for what takes
// time: Eventually waits for what happens in its own time (a write
// reaching another node, a process starting), polling a condition until
// it holds and failing the test once a deadline passes, Until polls the
// same way and reports instead of failing, and Advance moves a manual
// clock until something happens; Slow leaves the tests that start
// processes, a browser or npm, and heavy scenarios, out of the fast loop
// (go test -short); Waiting lets a package whose tests mostly wait run
// more of them at once; Buffer collects output that goroutines write
// while the test reads it; Port gives a listener a port it can take again
// after a restart; HeapInUse measures the heap a structure holds;
// WireVectors reads the test vectors of docs/wire.md, so
// that tests check the code against the document. A deadline is a bound
// on a loaded machine, never a figure under test: what a duration should
// be is measured by benchmarks.
package testkit

import (
	"bytes"
	"flag"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/agentmesh/mesh/internal/clock"
)

// Interval is how often Eventually asks again; AdvanceInterval how long
// Advance lets the code under test react to each step of the clock.
const (
	Interval        = 10 * time.Millisecond
	AdvanceInterval = 2 * time.Millisecond
)

// Eventually calls cond every Interval until it reports true. If timeout
// passes first, it fails t with the message format and args make (and
// how long it waited).
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	poll(t, timeout, Interval, cond, format, args...)
}

// Advance moves clk on until cond holds: while cond reports false, it
// moves clk by step and lets the code under test react for
// AdvanceInterval of real time. If timeout (real time) passes first, it
// fails t as Eventually does.
func Advance(t testing.TB, timeout time.Duration, clk *clock.Manual, step time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	poll(t, timeout, AdvanceInterval, func() bool {
		if cond() {
			return true
		}
		clk.Advance(step)
		return false
	}, format, args...)
}

// Until calls cond every Interval until it reports true, or timeout
// passes: it reports whether cond came true. For a test that acts again
// when nothing came of a try (a publish that may miss a peer); a test
// that only waits calls Eventually.
func Until(timeout time.Duration, cond func() bool) bool {
	return until(timeout, Interval, cond)
}

func until(timeout, every time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(every)
	}
	return true
}

func poll(t testing.TB, timeout, every time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	if !until(timeout, every, cond) {
		t.Fatalf(format+" (waited %s)", append(args, timeout)...)
	}
}

// Slow skips t under go test -short, saying what makes it slow: it
// starts processes, a browser or npm, or it is a heavy scenario whose
// path a lighter test covers in the fast loop. go test ./... runs it, as
// CI does.
func Slow(t testing.TB, what string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("-short: skipping a test that needs %s", what)
	}
}

// Waiting sets go test's -parallel to n unless the command line gives it:
// call it in TestMain, before m.Run, for a package whose tests spend most
// of their time waiting (on timers, on nodes over loopback) rather than
// computing, so that its t.Parallel tests overlap their waits beyond
// GOMAXPROCS (the default).
func Waiting(n int) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		flag.Set("test.parallel", strconv.Itoa(n))
	}
}

// MainWaiting is the TestMain of such a package: it runs the tests, up to
// n at once, and exits.
func MainWaiting(m *testing.M, n int) {
	Waiting(n)
	os.Exit(m.Run())
}

// Buffer is a bytes.Buffer that goroutines may share: a command's output
// or a logger's, written while the test reads it.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String is what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
