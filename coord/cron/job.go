package cron

import (
	"fmt"
	"regexp"
	"time"
)

// Defaults of a job's optional fields.
const (
	DefaultMaxRuntime    = 7200 * time.Second
	DefaultRetentionRuns = 30
	// MaxRetentionRuns bounds how many run records a job may keep.
	MaxRetentionRuns = 1000
)

// Restart policies: what happens when a run ends.
const (
	RestartNever     = "never"
	RestartOnFailure = "on-failure" // a run that failed or timed out runs again
	RestartAlways    = "always"     // every run runs again
)

// MaxRestarts bounds the restarts of one firing, so that a job that
// always fails (or, under always, always succeeds) does not loop until the
// next firing.
const MaxRestarts = 3

// Spec is a job as cluster.yaml writes it: nil for a field left out.
type Spec struct {
	ID            string            `yaml:"id"`
	Name          string            `yaml:"name"`
	Schedule      string            `yaml:"schedule"`
	Cmd           string            `yaml:"cmd"`
	Cwd           string            `yaml:"cwd"`
	Env           map[string]string `yaml:"env"`
	Enabled       *bool             `yaml:"enabled"`
	MaxRuntimeSec *int              `yaml:"max_runtime_sec"`
	RestartPolicy string            `yaml:"restart_policy"`
	RetentionRuns *int              `yaml:"retention_runs"`
	Destructive   bool              `yaml:"destructive"`
}

// Job is a valid cron job.
type Job struct {
	ID            string            `json:"id"`
	Name          string            `json:"name"`
	Schedule      Schedule          `json:"schedule"`
	Cmd           string            `json:"cmd"`
	Cwd           string            `json:"cwd,omitempty"`
	Env           map[string]string `json:"env,omitempty"`
	Enabled       bool              `json:"enabled"`
	MaxRuntimeSec int               `json:"max_runtime_sec"`
	RestartPolicy string            `json:"restart_policy"`
	RetentionRuns int               `json:"retention_runs"`
	Destructive   bool              `json:"destructive"`
}

var kebab = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)

// NewJob validates s and fills its defaults. An error makes the job
// unusable (it is skipped); warnings name fields that fell back to their
// default.
func NewJob(s Spec) (Job, []string, error) {
	var warns []string
	if len(s.ID) > 64 || !kebab.MatchString(s.ID) {
		return Job{}, nil, fmt.Errorf("%w: id %q is not kebab-case (a-z, 0-9 and single dashes, at most 64)", ErrJob, s.ID)
	}
	sched, err := ParseSchedule(s.Schedule)
	if err != nil {
		return Job{}, nil, fmt.Errorf("%w %q: %w", ErrJob, s.ID, err)
	}
	if s.Cmd == "" {
		return Job{}, nil, fmt.Errorf("%w %q: cmd is empty", ErrJob, s.ID)
	}
	j := Job{ID: s.ID, Name: s.Name, Schedule: sched, Cmd: s.Cmd, Cwd: s.Cwd, Env: s.Env,
		Enabled: s.Enabled == nil || *s.Enabled, MaxRuntimeSec: int(DefaultMaxRuntime.Seconds()),
		RestartPolicy: s.RestartPolicy, RetentionRuns: DefaultRetentionRuns, Destructive: s.Destructive}
	if j.Name == "" {
		j.Name = j.ID
	}
	if s.MaxRuntimeSec != nil {
		if *s.MaxRuntimeSec > 0 {
			j.MaxRuntimeSec = *s.MaxRuntimeSec
		} else {
			warns = append(warns, fmt.Sprintf("cron %q: max_runtime_sec %d is not positive; using %d", s.ID, *s.MaxRuntimeSec, int(DefaultMaxRuntime.Seconds())))
		}
	}
	switch j.RestartPolicy {
	case RestartNever, RestartOnFailure, RestartAlways:
	case "":
		j.RestartPolicy = RestartNever
	default:
		warns = append(warns, fmt.Sprintf("cron %q: restart_policy %q is not never, on-failure or always; using never", s.ID, s.RestartPolicy))
		j.RestartPolicy = RestartNever
	}
	if s.RetentionRuns != nil {
		if n := *s.RetentionRuns; n >= 1 && n <= MaxRetentionRuns {
			j.RetentionRuns = n
		} else {
			warns = append(warns, fmt.Sprintf("cron %q: retention_runs %d is outside 1..%d; using %d", s.ID, n, MaxRetentionRuns, DefaultRetentionRuns))
		}
	}
	return j, warns, nil
}

// MaxRuntime is how long a run may take before it is killed.
func (j Job) MaxRuntime() time.Duration { return time.Duration(j.MaxRuntimeSec) * time.Second }
