package cron

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentmesh/mesh/internal/clock"
	"github.com/agentmesh/mesh/internal/testkit"
)

func TestParseSchedule(t *testing.T) {
	from := time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC) // a Thursday
	for _, tc := range []struct {
		expr string
		next string // RFC 3339, or "" for an error
	}{
		{"* * * * *", "2026-01-01T00:01:00Z"},
		{"*/15 2 * * 1-5", "2026-01-01T02:00:00Z"},
		{" 30  4 1,15 * * ", "2026-01-01T04:30:00Z"},
		{"0 0 1 * 0", "2026-01-04T00:00:00Z"}, // day of month or Sunday, as cron does
		{"0 0 * * 7", "2026-01-04T00:00:00Z"},
		{"@daily", ""},
		{"0 0 * * MON", ""},
		{"* * * * * *", ""},
		{"* * * *", ""},
		{"61 * * * *", ""},
		{"5-1 * * * *", ""},
		{",, * * * *", ""},
		{"*/0 * * * *", ""},
		{"0 0 31 2 *", ""}, // never comes
		{"0 0 ? * *", ""},
		{"0 0 L * *", ""},
		{"0\t0 * * *", ""},
		{"", ""},
	} {
		s, err := ParseSchedule(tc.expr)
		if tc.next == "" {
			if !errors.Is(err, ErrSchedule) {
				t.Errorf("%q: err %v, want ErrSchedule", tc.expr, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.expr, err)
			continue
		}
		if got := s.Next(from).Format(time.RFC3339); got != tc.next {
			t.Errorf("%q: next %s, want %s", tc.expr, got, tc.next)
		}
	}
}

// FuzzSchedule: a schedule that parses has exactly five fields of the
// allowed characters and a next time after any time.
func FuzzSchedule(f *testing.F) {
	for _, s := range []string{"* * * * *", "*/5 1-3 1,15 * 1-5", "0 0 31 2 *", "@daily", "1 2 3 4 5 6", "9999 * * * *", "1-2/3,4 * * * *"} {
		f.Add(s)
	}
	from := time.Date(2026, 3, 29, 1, 30, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, expr string) {
		s, err := ParseSchedule(expr)
		if err != nil {
			return
		}
		if len(strings.Fields(expr)) != 5 || strings.Trim(expr, "0123456789*/,- ") != "" {
			t.Fatalf("accepted %q", expr)
		}
		if n := s.Next(from); !n.After(from) {
			t.Fatalf("%q: next %v is not after %v", expr, n, from)
		}
	})
}

func TestNewJobDefaults(t *testing.T) {
	neg, big := -5, 5000
	j, warns, err := NewJob(Spec{ID: "nightly-backup", Schedule: "0 3 * * *", Cmd: "true", RestartPolicy: "sometimes",
		MaxRuntimeSec: &neg, RetentionRuns: &big})
	if err != nil {
		t.Fatal(err)
	}
	if j.Name != "nightly-backup" || !j.Enabled || j.MaxRuntime() != DefaultMaxRuntime || j.RestartPolicy != RestartNever ||
		j.RetentionRuns != DefaultRetentionRuns || j.Destructive || len(warns) != 3 {
		t.Fatalf("job %+v, warnings %q", j, warns)
	}
	for _, bad := range []Spec{
		{ID: "Nightly", Schedule: "* * * * *", Cmd: "x"},
		{ID: "a--b", Schedule: "* * * * *", Cmd: "x"},
		{ID: "", Schedule: "* * * * *", Cmd: "x"},
		{ID: "ok", Schedule: "@hourly", Cmd: "x"},
		{ID: "ok", Schedule: "* * * * *", Cmd: ""},
	} {
		if _, _, err := NewJob(bad); !errors.Is(err, ErrJob) {
			t.Errorf("%+v: err %v, want ErrJob", bad, err)
		}
	}
}

type events struct {
	mu   sync.Mutex
	list []map[string]any
}

func (e *events) emit(typ string, f map[string]any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	f["type"] = typ
	e.list = append(e.list, f)
}

func (e *events) count(typ, job string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, f := range e.list {
		if f["type"] == typ && (job == "" || f["job_id"] == job) {
			n++
		}
	}
	return n
}

func job(t *testing.T, s Spec) Job {
	t.Helper()
	j, _, err := NewJob(s)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// advanceUntil moves clk forward a second at a time until cond holds,
// failing after 20 s of real time.
func advanceUntil(t *testing.T, clk *clock.Manual, what string, cond func() bool) {
	t.Helper()
	testkit.Advance(t, 20*time.Second, clk, time.Second, cond, "timed out waiting for %s", what)
}

func newScheduler(t *testing.T, device string) (*Scheduler, *clock.Manual, *events) {
	clk := clock.NewManual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	ev := &events{}
	proj := t.TempDir()
	s := New(Config{Project: proj, RunsDir: filepath.Join(proj, ".coord", "cron"), DeviceID: device, Clock: clk, Emit: ev.emit})
	t.Cleanup(s.Close)
	return s, clk, ev
}

// TestCronFiresTimesOutAndRestarts: the owner fires a due job; a run past
// max_runtime_sec is killed (timeout) and restarted per on-failure, at
// most MaxRestarts times; only the last retention_runs records stay.
func TestCronFiresTimesOutAndRestarts(t *testing.T) {
	s, clk, ev := newScheduler(t, "laptop")
	one, keep := 60, 3
	s.SetJobs([]Job{
		job(t, Spec{ID: "hang", Schedule: "* * * * *", Cmd: "echo started; exec sleep 600", MaxRuntimeSec: &one,
			RestartPolicy: RestartOnFailure, RetentionRuns: &keep}),
		job(t, Spec{ID: "hello", Schedule: "1 0 * * *", Cmd: "echo hello $WHO; pwd", Cwd: "sub", Env: map[string]string{"WHO": "world"}}),
	}, "laptop")
	if err := os.Mkdir(filepath.Join(s.cfg.Project, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	s.Start()
	advanceUntil(t, clk, "four attempts of hang", func() bool {
		return ev.count("cron.run.finished", "hang") == MaxRestarts+1 && ev.count("cron.run.finished", "hello") == 1
	})
	runs := s.Runs("hang")
	if len(runs) != keep {
		t.Fatalf("%d records of hang kept, want %d", len(runs), keep)
	}
	for i, r := range runs {
		if r.Status != StatusTimeout || r.Attempt != MaxRestarts-i || !strings.Contains(r.Output, "started") {
			t.Fatalf("run %d: %+v", i, r)
		}
		if d := r.EndedAt.Sub(r.StartedAt); d < time.Minute {
			t.Fatalf("run %d killed after %v, before its max runtime", i, d)
		}
	}
	hello := s.Runs("hello")
	if len(hello) != 1 || hello[0].Status != StatusSucceeded || *hello[0].ExitCode != 0 ||
		hello[0].Output != "hello world\n"+filepath.Join(s.cfg.Project, "sub")+"\n" {
		t.Fatalf("hello runs %+v", hello)
	}
	if n := ev.count("cron.would_have_fired", ""); n != 0 {
		t.Fatalf("the owner reported %d firings it would have made", n)
	}
}

// TestCronOnlyTheOwnerFires: another device reports cron.would_have_fired
// and runs nothing; a disabled job neither fires nor is reported.
func TestCronOnlyTheOwnerFires(t *testing.T) {
	s, clk, ev := newScheduler(t, "desktop")
	off := false
	marker := filepath.Join(t.TempDir(), "ran")
	s.SetJobs([]Job{
		job(t, Spec{ID: "touch", Schedule: "* * * * *", Cmd: "touch " + marker}),
		job(t, Spec{ID: "off", Schedule: "* * * * *", Cmd: "true", Enabled: &off}),
	}, "laptop")
	s.Start()
	advanceUntil(t, clk, "two would-have-fired", func() bool { return ev.count("cron.would_have_fired", "") >= 2 })
	if _, err := os.Stat(marker); err == nil || len(s.Runs("touch")) != 0 {
		t.Fatal("a daemon that is not the crons owner ran a job")
	}
	ev.mu.Lock()
	defer ev.mu.Unlock()
	for _, e := range ev.list {
		if e["job_id"] != "touch" || e["crons_owner"] != "laptop" || e["device_id"] != "desktop" {
			t.Fatalf("event %v", e)
		}
	}
}
