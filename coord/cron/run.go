package cron

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/agentmesh/mesh/coord/tailbuf"
	"github.com/agentmesh/mesh/internal/atomicfile"
)

// Run statuses.
const (
	StatusRunning   = "running"
	StatusSucceeded = "succeeded"
	StatusFailed    = "failed"  // a non-zero exit, or the command could not start
	StatusTimeout   = "timeout" // killed at max_runtime_sec
	StatusKilled    = "killed"  // killed because the daemon stopped
)

// MaxOutput is how much of a run's output (stdout and stderr together) is
// kept: the last bytes, where errors are.
const MaxOutput = 64 << 10

// Run is the record of one run of a job.
type Run struct {
	ID           string     `json:"id"`
	JobID        string     `json:"job_id"`
	Attempt      int        `json:"attempt"`
	ScheduledFor time.Time  `json:"scheduled_for"`
	StartedAt    time.Time  `json:"started_at"`
	EndedAt      *time.Time `json:"ended_at,omitempty"`
	Status       string     `json:"status"`
	ExitCode     *int       `json:"exit_code,omitempty"`
	Error        string     `json:"error,omitempty"`
	Output       string     `json:"output"`
	Truncated    bool       `json:"output_truncated,omitempty"`
}

// run runs one attempt of job and records it.
func (s *Scheduler) run(job Job, due time.Time, attempt int) Run {
	start := s.cfg.Clock.Now().UTC()
	r := Run{ID: fmt.Sprintf("%020d-%d", start.UnixNano(), attempt), JobID: job.ID, Attempt: attempt,
		ScheduledFor: due.UTC(), StartedAt: start, Status: StatusRunning}
	out := tailbuf.New(MaxOutput)
	cmd := exec.Command("/bin/sh", "-c", job.Cmd)
	dir, cwdErr := s.cwd(job)
	cmd.Dir = dir
	cmd.Env = s.cfg.Env()
	for k, v := range job.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// Output pipes a background grandchild keeps open do not hold the run.
	cmd.WaitDelay = time.Second
	s.save(job, r)
	s.cfg.Emit("cron.run.started", map[string]any{"job_id": job.ID, "run_id": r.ID, "attempt": attempt})
	if cwdErr != nil {
		r.Status, r.Error = StatusFailed, cwdErr.Error()
	} else if err := cmd.Start(); err != nil {
		r.Status, r.Error = StatusFailed, err.Error()
	} else {
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		timeout := s.cfg.Clock.After(job.MaxRuntime())
		select {
		case err := <-done:
			r.Status = exitStatus(err, &r)
		case <-timeout:
			kill(cmd)
			<-done
			r.Status = StatusTimeout
		case <-s.ctx.Done():
			kill(cmd)
			<-done
			r.Status = StatusKilled
		}
	}
	end := s.cfg.Clock.Now().UTC()
	r.EndedAt = &end
	r.Output, r.Truncated = out.String()
	s.save(job, r)
	s.cfg.Emit("cron.run.finished", map[string]any{"job_id": job.ID, "run_id": r.ID, "attempt": attempt,
		"status": r.Status, "exit_code": r.ExitCode})
	s.cfg.Logger.Info("cron run", "job", job.ID, "run", r.ID, "status", r.Status)
	return r
}

// cwd is the folder job runs in: the project, or its cwd (relative to the
// project), which must resolve inside the project.
func (s *Scheduler) cwd(job Job) (string, error) {
	dir := s.cfg.Project
	if job.Cwd != "" {
		dir = job.Cwd
		if !filepath.IsAbs(dir) {
			dir = filepath.Join(s.cfg.Project, dir)
		}
	}
	resolved, err := s.cfg.Files.Resolve(dir)
	if errors.Is(err, atomicfile.ErrOutside) {
		return "", fmt.Errorf("%w %q: it resolves outside the project folder; not run", ErrCwd, job.Cwd)
	}
	if err != nil {
		return "", fmt.Errorf("%w %q: %v", ErrCwd, job.Cwd, err)
	}
	return resolved, nil
}

func exitStatus(err error, r *Run) string {
	var ee *exec.ExitError
	switch {
	case err == nil:
		code := 0
		r.ExitCode = &code
		return StatusSucceeded
	case errors.As(err, &ee):
		code := ee.ExitCode()
		r.ExitCode = &code
	default:
		r.Error = err.Error()
	}
	return StatusFailed
}

// kill ends the run's whole process group.
func kill(cmd *exec.Cmd) {
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
}

// save writes r and drops the job's oldest records past its retention.
func (s *Scheduler) save(job Job, r Run) {
	dir := filepath.Join(s.cfg.RunsDir, job.ID)
	b, _ := json.MarshalIndent(r, "", "  ")
	if err := s.cfg.Files.Write(filepath.Join(dir, r.ID+".json"), b, 0o644); err != nil {
		s.cfg.Logger.Error("cron: cannot record a run", "job", job.ID, "run", r.ID, "err", err)
		return
	}
	names := runFiles(dir)
	for _, n := range names[:max(0, len(names)-job.RetentionRuns)] {
		s.cfg.Files.Remove(filepath.Join(dir, n))
	}
}

// runFiles lists a job's run records, oldest first.
func runFiles(dir string) []string {
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		if n := e.Name(); strings.HasSuffix(n, ".json") && !strings.HasPrefix(n, ".") {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}

// Runs returns the kept records of job id, newest first.
func (s *Scheduler) Runs(id string) []Run {
	dir := filepath.Join(s.cfg.RunsDir, id)
	names := runFiles(dir)
	out := make([]Run, 0, len(names))
	for i := len(names) - 1; i >= 0; i-- {
		b, err := os.ReadFile(filepath.Join(dir, names[i]))
		var r Run
		if err == nil && json.Unmarshal(b, &r) == nil {
			out = append(out, r)
		}
	}
	return out
}
