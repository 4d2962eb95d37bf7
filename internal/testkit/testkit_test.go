package testkit

import (
	"fmt"
	"testing"
	"time"
)

// recorder is a testing.TB that records a failure instead of stopping.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
}

func TestEventually(t *testing.T) {
	n := 0
	r := &recorder{TB: t}
	Eventually(r, time.Minute, func() bool { n++; return n == 3 }, "never")
	if r.failed != "" || n != 3 {
		t.Fatalf("a condition that came true: asked %d times, failed %q", n, r.failed)
	}
	calls := 0
	Eventually(r, 0, func() bool { calls++; return calls > 1 }, "node %s never caught up", "b")
	if r.failed != "node b never caught up (waited 0s)" {
		t.Fatalf("failure %q", r.failed)
	}
}
