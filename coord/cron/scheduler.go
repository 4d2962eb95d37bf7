package cron

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/agentmesh/mesh/coord/agentenv"
	"github.com/agentmesh/mesh/internal/atomicfile"
	"github.com/agentmesh/mesh/internal/clock"
)

// Config configures a Scheduler.
type Config struct {
	// Project is the folder a job's relative cwd is taken from.
	Project string
	// RunsDir keeps the run records, one folder per job.
	RunsDir string
	// DeviceID is this daemon's device; only the crons owner fires jobs.
	DeviceID string
	// Files confines the run records and the jobs' cwd (default: Project):
	// a cwd that resolves outside is not run.
	Files atomicfile.Root
	// Env is the environment of the jobs, before their own env (default:
	// agentenv's default allow list over the daemon's environment).
	Env func() []string
	// Tick is how often due jobs are looked for (10 s).
	Tick   time.Duration
	Clock  clock.Clock
	Logger *slog.Logger
	// Emit publishes an event (cron.would_have_fired, cron.run.started,
	// cron.run.finished) to the daemon's socket.
	Emit func(typ string, fields map[string]any)
}

// DefaultTick is the scheduler's tick.
const DefaultTick = 10 * time.Second

// Scheduler fires jobs on their schedules.
type Scheduler struct {
	cfg    Config
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	owner  string
	jobs   map[string]*state
	order  []string
}

type state struct {
	job     Job
	next    time.Time
	running bool
}

// New returns a scheduler; Start runs it.
func New(cfg Config) *Scheduler {
	if cfg.Tick <= 0 {
		cfg.Tick = DefaultTick
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Emit == nil {
		cfg.Emit = func(string, map[string]any) {}
	}
	if cfg.Files.Dir() == "" {
		cfg.Files = atomicfile.NewRoot(cfg.Project, nil)
	}
	if cfg.Env == nil {
		cfg.Env = agentenv.DefaultEnviron
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Scheduler{cfg: cfg, ctx: ctx, cancel: cancel, jobs: map[string]*state{}}
}

// SetJobs replaces the jobs (after cluster.yaml changed). A job whose
// schedule is unchanged keeps its next firing; a run under way goes on.
func (s *Scheduler) SetJobs(jobs []Job, owner string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.jobs
	s.owner, s.jobs, s.order = owner, map[string]*state{}, nil
	for _, j := range jobs {
		st := &state{job: j}
		if o := old[j.ID]; o != nil {
			st.running = o.running
			if o.job.Schedule.String() == j.Schedule.String() {
				st.next = o.next
			}
		}
		s.jobs[j.ID] = st
		s.order = append(s.order, j.ID)
	}
}

// Start ticks until Close.
func (s *Scheduler) Start() {
	t := s.cfg.Clock.NewTicker(s.cfg.Tick)
	s.wg.Go(func() {
		defer t.Stop()
		s.tick(s.cfg.Clock.Now())
		for {
			select {
			case <-s.ctx.Done():
				return
			case now := <-t.C():
				s.tick(now)
			}
		}
	})
}

// Close stops the ticks, kills the runs under way (recorded as killed) and
// waits for them.
func (s *Scheduler) Close() {
	s.cancel()
	s.wg.Wait()
}

// tick fires each enabled job that fell due. A job is first seen without
// firing: it is due at its next time after that.
func (s *Scheduler) tick(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range s.order {
		st := s.jobs[id]
		if !st.job.Enabled {
			continue
		}
		if st.next.IsZero() {
			st.next = st.job.Schedule.Next(now)
			continue
		}
		if now.Before(st.next) {
			continue
		}
		due := st.next
		st.next = st.job.Schedule.Next(now)
		switch {
		case s.owner == "" || s.owner != s.cfg.DeviceID:
			s.cfg.Emit("cron.would_have_fired", map[string]any{"job_id": id, "scheduled_for": due.UTC(),
				"crons_owner": s.owner, "device_id": s.cfg.DeviceID})
		case st.running:
			s.cfg.Logger.Warn("cron: a run is still under way; this firing is skipped", "job", id, "scheduled_for", due)
		default:
			st.running = true
			job := st.job
			s.wg.Go(func() { s.fire(job, due) })
		}
	}
}

// fire runs job, and again per its restart policy.
func (s *Scheduler) fire(job Job, due time.Time) {
	defer func() {
		s.mu.Lock()
		if st := s.jobs[job.ID]; st != nil {
			st.running = false
		}
		s.mu.Unlock()
	}()
	for attempt := 0; ; attempt++ {
		r := s.run(job, due, attempt)
		restart := job.RestartPolicy == RestartAlways || job.RestartPolicy == RestartOnFailure && r.Status != StatusSucceeded
		if !restart || r.Status == StatusKilled || attempt >= MaxRestarts || s.ctx.Err() != nil {
			return
		}
	}
}

// JobView is a job as GET /crons shows it.
type JobView struct {
	Job
	Next    *time.Time `json:"next,omitempty"`
	Running bool       `json:"running"`
}

// Jobs lists the jobs in cluster.yaml's order.
func (s *Scheduler) Jobs() []JobView {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]JobView, 0, len(s.order))
	for _, id := range s.order {
		st := s.jobs[id]
		v := JobView{Job: st.job, Running: st.running}
		if !st.next.IsZero() && st.job.Enabled {
			n := st.next.UTC()
			v.Next = &n
		}
		out = append(out, v)
	}
	return out
}

// Job returns the job id, if there is one.
func (s *Scheduler) Job(id string) (Job, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.jobs[id]
	if st == nil {
		return Job{}, false
	}
	return st.job, true
}
