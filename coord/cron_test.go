package coord_test

import (
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/mesh/coord"
	"github.com/agentmesh/mesh/internal/testkit"
)

const cronCluster = `id: crons
crons_owner: %s
crons:
  - id: greet
    schedule: "* * * * *"
    cmd: echo "hello $WHO"
    env: {WHO: world}
  - id: stuck
    schedule: "*/5 * * * *"
    cmd: exec sleep 600
    max_runtime_sec: 30
    restart_policy: on-failure
    retention_runs: 2
`

type runs struct {
	Runs []struct {
		Attempt  int
		Status   string
		ExitCode *int `json:"exit_code"`
		Output   string
	}
}

// advanceUntil moves the clock a second at a time until cond holds.
func (h *harness) advanceUntil(what string, cond func() bool) {
	h.t.Helper()
	testkit.Advance(h.t, 10*time.Second, h.clk, time.Second, cond, "timed out waiting for %s", what)
}

// TestCronsFireTimeOutAndRestart: on the crons owner, a due job runs and
// its record is readable; a job past its max runtime is killed and
// restarted on failure, and only its last retention_runs records stay.
func TestCronsFireTimeOutAndRestart(t *testing.T) {
	t.Parallel()
	dir := project(t)
	(&harness{t: t, dir: dir}).write("cluster.yaml", strings.Replace(cronCluster, "%s", "test-box", 1))
	h := start(t, dir, nil)
	ws := h.socket()
	h.advanceUntil("a run of greet", func() bool {
		var r runs
		h.get("/crons/greet/runs", &r)
		return len(r.Runs) > 0 && r.Runs[0].Status != "running"
	})
	var r runs
	h.get("/crons/greet/runs", &r)
	if r.Runs[0].Status != "succeeded" || *r.Runs[0].ExitCode != 0 || r.Runs[0].Output != "hello world\n" {
		t.Fatalf("greet %+v", r.Runs[0])
	}
	if ev := ws.next("cron.run.finished"); ev["job_id"] != "greet" || ev["status"] != "succeeded" {
		t.Fatalf("event %v", ev)
	}
	h.advanceUntil("stuck to give up", func() bool {
		h.get("/crons/stuck/runs", &r)
		return len(r.Runs) == 2 && r.Runs[0].Attempt == 3 && r.Runs[0].Status == "timeout"
	})
	if r.Runs[1].Attempt != 2 || r.Runs[1].Status != "timeout" {
		t.Fatalf("stuck %+v", r.Runs)
	}
	var list struct {
		Fires bool
		Jobs  []struct {
			ID       string
			Schedule string
			Next     *time.Time
		}
	}
	h.get("/crons", &list)
	if !list.Fires || len(list.Jobs) != 2 || list.Jobs[1].Schedule != "*/5 * * * *" || list.Jobs[1].Next == nil {
		t.Fatalf("crons %+v", list)
	}
	h.wantError("GET", "/crons/nope/runs", "", 404, "cron_not_found")
}

// TestCronsOnAnotherDevice: a daemon that is not the crons owner runs
// nothing and says what it would have fired.
func TestCronsOnAnotherDevice(t *testing.T) {
	t.Parallel()
	dir := project(t)
	(&harness{t: t, dir: dir}).write("cluster.yaml", strings.Replace(cronCluster, "%s", "build-box", 1))
	h := start(t, dir, func(c *coord.Config) { c.DeviceID = "laptop" })
	ws := h.socket()
	evs := ws.until("cron.would_have_fired", func() { h.clk.Advance(time.Second) })
	ev := evs[len(evs)-1]
	if ev["job_id"] != "greet" || ev["crons_owner"] != "build-box" || ev["device_id"] != "laptop" || ev["scheduled_for"] != "2026-03-02T09:01:00Z" {
		t.Fatalf("event %v", ev)
	}
	var r runs
	h.get("/crons/greet/runs", &r)
	if len(r.Runs) != 0 {
		t.Fatalf("runs %+v", r.Runs)
	}
}
