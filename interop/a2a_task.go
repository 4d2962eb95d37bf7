package interop

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// A2AConfig bounds the tasks the A2A binding keeps for tasks/get,
// tasks/cancel and a payment submitted to a task.
type A2AConfig struct {
	// MaxTasks is how many tasks are kept at once (default 1,000); when it
	// is reached the oldest is forgotten. A task keeps its skill's answer,
	// and a task awaiting payment its input (at most MaxBody).
	MaxTasks int `json:"max_tasks"`
	// TaskTTL is how long a task is kept after its last change (default
	// 1 h). A payment challenge outliving its task can still be paid: the
	// same message with the payment in its metadata is served without the
	// task.
	TaskTTL time.Duration `json:"task_ttl"`
}

// Defaults of A2AConfig.
const (
	DefaultA2AMaxTasks = 1000
	DefaultA2ATaskTTL  = time.Hour
)

func (c *A2AConfig) setDefaults() {
	orDefault(&c.MaxTasks, DefaultA2AMaxTasks)
	orDefault(&c.TaskTTL, DefaultA2ATaskTTL)
}

func (c *A2AConfig) validate() error {
	if c.MaxTasks < 0 || c.TaskTTL < 0 {
		return fmt.Errorf("%w: a2a: max_tasks and task_ttl must not be negative", ErrConfig)
	}
	return nil
}

// A2A task states used by the binding.
const (
	stateInputRequired = "input-required"
	stateCompleted     = "completed"
	stateRejected      = "rejected"
	stateFailed        = "failed"
	stateCanceled      = "canceled"
)

// a2aTask is an A2A Task.
type a2aTask struct {
	Kind      string        `json:"kind"`
	ID        string        `json:"id"`
	ContextID string        `json:"contextId"`
	Status    a2aStatus     `json:"status"`
	Artifacts []a2aArtifact `json:"artifacts,omitempty"`
	// receipts are the x402 extension's receipts of the task's payments,
	// failed and settled, oldest first.
	receipts []SettleResponse
}

// receiptList is the task's receipts, an empty list when it has none.
func (t *a2aTask) receiptList() []SettleResponse {
	if t.receipts == nil {
		return []SettleResponse{}
	}
	return t.receipts
}

type a2aStatus struct {
	State     string      `json:"state"`
	Message   *a2aMessage `json:"message,omitempty"`
	Timestamp string      `json:"timestamp,omitempty"`
}

// a2aMessage is an A2A Message.
type a2aMessage struct {
	Kind      string                     `json:"kind"`
	MessageID string                     `json:"messageId"`
	Role      string                     `json:"role"`
	Parts     []a2aPart                  `json:"parts"`
	TaskID    string                     `json:"taskId,omitempty"`
	ContextID string                     `json:"contextId,omitempty"`
	Metadata  map[string]json.RawMessage `json:"metadata,omitempty"`
}

// a2aPart is a text, data or file part.
type a2aPart struct {
	Kind string          `json:"kind"`
	Text *string         `json:"text,omitempty"`
	Data json.RawMessage `json:"data,omitempty"`
	File json.RawMessage `json:"file,omitempty"`
}

type a2aArtifact struct {
	ArtifactID string    `json:"artifactId"`
	Name       string    `json:"name,omitempty"`
	Parts      []a2aPart `json:"parts"`
}

// terminal: the task takes no more messages.
func (t *a2aTask) terminal() bool { return t.Status.State != stateInputRequired }

// a2aCall is the skill call a task runs.
type a2aCall struct {
	skill string
	input []byte
}

// taskStore keeps the binding's tasks in memory, bounded by A2AConfig.
type taskStore struct {
	cfg A2AConfig
	now func() time.Time

	mu    sync.Mutex
	tasks map[string]*storedTask
	order []string // ids by first store, oldest first
}

type storedTask struct {
	task    a2aTask
	call    a2aCall // its input is kept while the task awaits payment
	updated time.Time
	expires time.Time
}

func newTaskStore(cfg A2AConfig, now func() time.Time) *taskStore {
	return &taskStore{cfg: cfg, now: now, tasks: map[string]*storedTask{}}
}

// put stores t (a new task or a new state of one), forgetting expired
// tasks and, when full, the oldest.
func (s *taskStore) put(t a2aTask, call a2aCall) {
	if t.terminal() {
		call.input = nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if st, ok := s.tasks[t.ID]; ok {
		st.task, st.call, st.updated, st.expires = t, call, now, now.Add(s.cfg.TaskTTL)
		return
	}
	for len(s.order) > 0 {
		st, ok := s.tasks[s.order[0]]
		if ok && now.Before(st.expires) && len(s.tasks) < s.cfg.MaxTasks {
			break
		}
		delete(s.tasks, s.order[0])
		s.order = s.order[1:]
	}
	s.tasks[t.ID] = &storedTask{task: t, call: call, updated: now, expires: now.Add(s.cfg.TaskTTL)}
	s.order = append(s.order, t.ID)
}

// get returns task id and its call, if it is kept and not expired.
func (s *taskStore) get(id string) (a2aTask, a2aCall, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.tasks[id]
	if !ok || !s.now().Before(st.expires) {
		return a2aTask{}, a2aCall{}, false
	}
	return st.task, st.call, true
}

// cancel moves task id to canceled unless it is terminal.
func (s *taskStore) cancel(id string, at time.Time) (a2aTask, *rpcError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.tasks[id]
	if !ok || !s.now().Before(st.expires) {
		return a2aTask{}, rpcErr(rpcTaskNotFound, "task %s not found", id)
	}
	if st.task.terminal() {
		return st.task, rpcErr(rpcTaskNotCancelable, "task %s is %s and cannot be canceled", id, st.task.Status.State)
	}
	st.task.Status = a2aStatus{State: stateCanceled, Timestamp: at.UTC().Format(time.RFC3339)}
	st.call.input = nil
	st.updated = at
	return st.task, nil
}

// inContext lists the kept tasks of context ctx that match keep, the
// most recently changed first.
func (s *taskStore) inContext(ctx string, keep func(a2aTask, time.Time) bool) []a2aTask {
	s.mu.Lock()
	var found []*storedTask
	now := s.now()
	for _, st := range s.tasks {
		if st.task.ContextID == ctx && now.Before(st.expires) && keep(st.task, st.updated) {
			found = append(found, st)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(found, func(x, y *storedTask) int {
		if c := y.updated.Compare(x.updated); c != 0 {
			return c
		}
		return strings.Compare(x.task.ID, y.task.ID)
	})
	out := make([]a2aTask, len(found))
	for i, st := range found {
		out[i] = st.task
	}
	return out
}
