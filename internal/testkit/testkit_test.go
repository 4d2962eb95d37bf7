package testkit

import (
	"fmt"
	"testing"
	"time"

	"github.com/agentmesh/mesh/internal/clock"
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

func TestUntil(t *testing.T) {
	n := 0
	if !Until(time.Minute, func() bool { n++; return n == 3 }) || n != 3 {
		t.Fatalf("a condition that came true on the third call: asked %d times", n)
	}
	n = 0
	if Until(0, func() bool { n++; return false }) || n == 0 {
		t.Fatalf("a condition never true: Until reported true, or never asked (%d)", n)
	}
}

func TestAdvance(t *testing.T) {
	clk := clock.NewManual(time.Unix(0, 0))
	fired := clk.After(time.Hour)
	r := &recorder{TB: t}
	Advance(r, time.Minute, clk, 10*time.Minute, func() bool {
		select {
		case <-fired:
			return true
		default:
			return false
		}
	}, "never")
	if r.failed != "" || !clk.Now().Equal(time.Unix(0, 0).Add(time.Hour)) {
		t.Fatalf("advanced to %v, failed %q; want an hour on, in 10-minute steps", clk.Now(), r.failed)
	}
	Advance(r, 0, clk, time.Second, func() bool { return r.failed != "" }, "the %s never came", "timer") // the recorder goes on after a failure
	if r.failed != "the timer never came (waited 0s)" {
		t.Fatalf("failure %q", r.failed)
	}
}
