package runs

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentmesh/mesh/internal/atomicfile"
	"github.com/agentmesh/mesh/internal/clock"
)

// Statuses of a run: running, then one of the three ends.
const (
	StatusRunning   = "running"
	StatusDone      = "done"
	StatusCancelled = "cancelled"
	StatusFailed    = "failed"
)

var (
	// ErrNotFound is a run that does not exist.
	ErrNotFound = errors.New("no such run")
	// ErrEnded is a run that already ended.
	ErrEnded = errors.New("the run has ended")
	// ErrTooMany: MaxRunning runs are running already.
	ErrTooMany = errors.New("too many runs are running")
)

// Run is a story run.
type Run struct {
	ID      string    `json:"id"`
	Conv    string    `json:"conv"`
	AgentID string    `json:"agent_id"`
	Tasks   []string  `json:"tasks"`
	Cursor  int       `json:"cursor"`
	Status  string    `json:"status"`
	Error   string    `json:"error,omitempty"`
	Item    string    `json:"item_id,omitempty"`
	Created time.Time `json:"created"`
	Updated time.Time `json:"updated"`
}

// Config configures a Manager.
type Config struct {
	// Dir keeps the runs, one file each.
	Dir string
	// Keep is how many ended runs are kept (100); MaxRunning bounds the
	// runs running at once (16).
	Keep, MaxRunning int
	// Files confines the writes of the runs (default: Dir).
	Files  atomicfile.Root
	Clock  clock.Clock
	Logger *slog.Logger
	Emit   func(typ string, fields map[string]any)
	// Send sends the run's current task to its conversation as a chat
	// turn and returns the turn's item id.
	Send func(r Run) (string, error)
	// Pending says whether a chat item is still queued or under way.
	Pending func(conv, item string) bool
}

// Manager keeps the runs.
type Manager struct {
	cfg  Config
	mu   sync.Mutex
	runs map[string]*Run
	next int
}

// New returns a manager; Load reads the runs kept.
func New(cfg Config) *Manager {
	if cfg.Keep <= 0 {
		cfg.Keep = 100
	}
	if cfg.MaxRunning <= 0 {
		cfg.MaxRunning = 16
	}
	if cfg.Files.Dir() == "" {
		cfg.Files = atomicfile.NewRoot(cfg.Dir, nil)
	}
	return &Manager{cfg: cfg, runs: map[string]*Run{}}
}

// Load reads the runs on disk; it must come before the chat engine
// starts, so that the end of a turn started then finds its run.
func (m *Manager) Load() error {
	entries, err := os.ReadDir(m.cfg.Dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(m.cfg.Dir, e.Name()))
		var r Run
		if err != nil || json.Unmarshal(b, &r) != nil || r.ID+".json" != e.Name() {
			m.cfg.Logger.Warn("runs: unreadable run record skipped", "file", e.Name())
			continue
		}
		m.runs[r.ID] = &r
		if n, err := strconv.Atoi(strings.TrimPrefix(r.ID, "r")); err == nil && n > m.next {
			m.next = n
		}
	}
	return nil
}

// Resume sends again the current task of each running run whose turn the
// chat no longer has (the daemon stopped between the two writes).
func (m *Manager) Resume() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.runs {
		if r.Status == StatusRunning && !m.cfg.Pending(r.Conv, r.Item) {
			m.send(r)
		}
	}
}

// Create starts a run of tasks in conversation conv.
func (m *Manager) Create(conv, agentID string, tasks []string) (Run, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	running := 0
	for _, r := range m.runs {
		if r.Status == StatusRunning {
			running++
		}
	}
	if running >= m.cfg.MaxRunning {
		return Run{}, fmt.Errorf("%w: %d", ErrTooMany, running)
	}
	m.next++
	now := m.cfg.Clock.Now().UTC()
	r := &Run{ID: fmt.Sprintf("r%d", m.next), Conv: conv, AgentID: agentID, Tasks: tasks, Status: StatusRunning,
		Created: now, Updated: now}
	m.runs[r.ID] = r
	m.emit("run.started", r)
	m.send(r)
	return *r, nil
}

// send sends r's current task, failing r when the chat refuses it.
func (m *Manager) send(r *Run) {
	item, err := m.cfg.Send(*r)
	if err != nil {
		m.end(r, StatusFailed, "sending task "+r.Tasks[r.Cursor]+": "+err.Error())
		return
	}
	r.Item = item
	m.save(r)
}

// TurnEnded advances the run whose turn ended: to its next task, or done;
// a failed turn fails the run.
func (m *Manager) TurnEnded(runID, item string, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.runs[runID]
	if r == nil || r.Status != StatusRunning || r.Item != item {
		return
	}
	if !ok {
		m.end(r, StatusFailed, "the turn of task "+r.Tasks[r.Cursor]+" failed")
		return
	}
	r.Cursor++
	if r.Cursor == len(r.Tasks) {
		m.end(r, StatusDone, "")
		return
	}
	m.emit("run.progress", r)
	m.send(r)
}

// Cancel ends a running run; a turn of it under way finishes, but no other
// task is sent.
func (m *Manager) Cancel(id string) (Run, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.runs[id]
	switch {
	case r == nil:
		return Run{}, ErrNotFound
	case r.Status != StatusRunning:
		return *r, ErrEnded
	}
	m.end(r, StatusCancelled, "")
	return *r, nil
}

func (m *Manager) end(r *Run, status, why string) {
	r.Status, r.Error = status, why
	m.emit("run."+status, r)
	m.save(r)
	m.prune()
}

func (m *Manager) emit(typ string, r *Run) {
	r.Updated = m.cfg.Clock.Now().UTC()
	task := ""
	if r.Cursor < len(r.Tasks) {
		task = r.Tasks[r.Cursor]
	}
	m.cfg.Emit(typ, map[string]any{"run_id": r.ID, "conv": r.Conv, "status": r.Status, "cursor": r.Cursor, "task": task, "error": r.Error})
}

func (m *Manager) save(r *Run) {
	b, _ := json.MarshalIndent(r, "", "  ")
	if err := m.cfg.Files.Write(filepath.Join(m.cfg.Dir, r.ID+".json"), b, 0o644); err != nil {
		m.cfg.Logger.Error("runs: cannot record a run", "run", r.ID, "err", err)
	}
}

// prune drops the oldest ended runs past Keep.
func (m *Manager) prune() {
	var ended []*Run
	for _, r := range m.runs {
		if r.Status != StatusRunning {
			ended = append(ended, r)
		}
	}
	sort.Slice(ended, func(i, j int) bool { return ended[i].Updated.Before(ended[j].Updated) })
	for _, r := range ended[:max(0, len(ended)-m.cfg.Keep)] {
		delete(m.runs, r.ID)
		m.cfg.Files.Remove(filepath.Join(m.cfg.Dir, r.ID+".json"))
	}
}

// List returns the runs, newest first.
func (m *Manager) List() []Run {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Run, 0, len(m.runs))
	for _, r := range m.runs {
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Created.Equal(out[j].Created) {
			return out[i].Created.After(out[j].Created)
		}
		return len(out[i].ID) > len(out[j].ID) || len(out[i].ID) == len(out[j].ID) && out[i].ID > out[j].ID
	})
	return out
}

// Coordinating says whether conversation conv has a running run.
func (m *Manager) Coordinating(conv string) bool { return m.running(conv) }

// Running says whether any run is running.
func (m *Manager) Running() bool { return m.running("") }

// running says whether a run of conv (any, when empty) is running.
func (m *Manager) running(conv string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.runs {
		if (conv == "" || r.Conv == conv) && r.Status == StatusRunning {
			return true
		}
	}
	return false
}
