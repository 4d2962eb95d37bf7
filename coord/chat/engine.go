package chat

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// Engine keeps the conversations and runs their turns.
type Engine struct {
	cfg     Config
	cmdType string // the agent type of messages without an agent id
	mu      sync.Mutex
	convs   map[string]*conv
	// rateHits counts the rate-limited attempts in a row of each agent
	// type; paused are the types paused, until when.
	rateHits map[string]int
	paused   map[string]time.Time
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

// New checks cfg; it reads and starts nothing.
func New(cfg Config) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Engine{cfg: cfg, cmdType: commandType(cfg.AgentCmd), convs: map[string]*conv{}, rateHits: map[string]int{},
		paused: map[string]time.Time{}, ctx: ctx, cancel: cancel}, nil
}

// Enabled reports whether an agent command is configured.
func (e *Engine) Enabled() bool { return e.cfg.AgentCmd != "" }

// Start reads the conversations on disk. A turn the daemon was answering
// when it stopped is put back at the head of its queue, with a system
// message saying so, and each queue starts again.
func (e *Engine) Start() error {
	convs, err := loadConvs(e.cfg.Dir, e.cfg.Files)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.convs = convs
	for _, c := range convs {
		if c.st.Live != nil {
			c.st.Queue = append([]Item{*c.st.Live}, c.st.Queue...)
			c.st.Live = nil
			m := Message{Role: RoleSystem, Text: "the daemon stopped during this turn; it runs again"}
			if err := e.record(c, &m); err != nil {
				return err
			}
			if err := c.save(); err != nil {
				return err
			}
		}
		if len(c.st.Queue) > 0 && e.Enabled() {
			if err := e.sendNext(c, false); err != nil {
				return err
			}
		}
	}
	return nil
}

// Close kills the agents of live turns and waits for them. Their items
// stay live on disk: the next Start runs them again.
func (e *Engine) Close() {
	e.cancel()
	e.wg.Wait()
}

// Request is a message sent to a conversation.
type Request struct {
	Conv, Text, AgentID, RunID string
	Uploads                    []Upload
}

// Result says what became of a request: started now, or queued at
// Position (1 is next).
type Result struct {
	Started  bool      `json:"started"`
	Conv     string    `json:"conv"`
	ItemID   string    `json:"item_id"`
	StreamID string    `json:"stream_id,omitempty"`
	Position int       `json:"position,omitempty"`
	Skipped  []Skipped `json:"skipped_uploads,omitempty"`
	// ResumesAt, on a message that waits for its agent type's pause,
	// is when the pause ends.
	ResumesAt *time.Time `json:"resumes_at,omitempty"`
}

// Dispatch starts a turn for r, or queues it behind the live one. A
// message without text whose attachments were all skipped is refused
// (ErrNoContent, with the skipped ones in the result): the agent would be
// asked nothing.
func (e *Engine) Dispatch(r Request) (Result, error) {
	switch {
	case !e.Enabled():
		return Result{}, ErrDisabled
	case !ValidID(r.Conv):
		return Result{}, ErrConvID
	case len(r.Text) > e.cfg.MaxText:
		return Result{}, fmt.Errorf("%w: longer than %d bytes", ErrText, e.cfg.MaxText)
	case strings.TrimSpace(r.Text) == "" && len(r.Uploads) == 0:
		return Result{}, fmt.Errorf("%w: a message needs text or attachments", ErrText)
	}
	kept, skipped := e.decodeUploads(r.Uploads)
	if strings.TrimSpace(r.Text) == "" && len(kept) == 0 {
		return Result{Conv: r.Conv, Skipped: skipped}, fmt.Errorf("%w: the message has no text and none of its attachments could be kept", ErrNoContent)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	c, err := e.open(r.Conv)
	if err != nil {
		return Result{}, err
	}
	pausedUntil := e.pausedUntil(r.AgentID)
	start := c.st.Live == nil && len(c.st.Queue) == 0 && pausedUntil.IsZero()
	if !start && len(c.st.Queue) >= e.cfg.QueueMax {
		return Result{}, fmt.Errorf("%w: %d messages wait already", ErrQueueFull, len(c.st.Queue))
	}
	c.st.Items++
	it := Item{ID: fmt.Sprintf("q%d", c.st.Items), Text: r.Text, AgentID: r.AgentID, RunID: r.RunID,
		QueuedAt: e.cfg.Clock.Now().UTC()}
	res := Result{Conv: r.Conv, ItemID: it.ID, Skipped: skipped}
	if it.Attachments, err = e.saveUploads(c, it.ID, kept); err != nil {
		return Result{}, err
	}
	if start {
		res.Started = true
		res.StreamID, err = e.begin(c, it, false)
		return res, err
	}
	c.st.Queue = append(c.st.Queue, it)
	res.Position = len(c.st.Queue)
	if !pausedUntil.IsZero() {
		res.ResumesAt = &pausedUntil
	}
	e.cfg.Emit("queue.item.added", map[string]any{"conv": r.Conv, "item_id": it.ID, "position": res.Position})
	return res, c.save()
}

// open returns conversation id, creating it.
func (e *Engine) open(id string) (*conv, error) {
	if c, ok := e.convs[id]; ok {
		return c, nil
	}
	if len(e.convs) >= e.cfg.MaxConvs {
		return nil, fmt.Errorf("%w: %d", ErrTooMany, e.cfg.MaxConvs)
	}
	now := e.cfg.Clock.Now().UTC()
	c := &conv{dir: filepath.Join(e.cfg.Dir, id), files: e.cfg.Files, st: convState{ID: id, Created: now, Updated: now, Queue: []Item{}}}
	if err := e.cfg.Files.MkdirAll(c.dir, 0o755); err != nil {
		return nil, err
	}
	e.convs[id] = c
	return c, c.save()
}

// begin makes it the live turn of c, records the operator's message and
// starts the turn. Called with e.mu held.
func (e *Engine) begin(c *conv, it Item, wasLive bool) (string, error) {
	c.st.Streams++
	stream := fmt.Sprintf("s%d", c.st.Streams)
	c.st.Live = &it
	m := Message{Role: RoleOperator, Text: it.Text, StreamID: stream, Attachments: it.Attachments, AgentID: it.AgentID, RunID: it.RunID}
	if err := e.record(c, &m); err != nil {
		return "", err
	}
	if err := c.save(); err != nil {
		return "", err
	}
	if !wasLive {
		e.cfg.Emit("conv.activity", map[string]any{"conv": c.st.ID, "live": true})
	}
	e.wg.Add(1)
	go e.turn(c, it, stream)
	return stream, nil
}

// sendNext starts the head of c's queue. Called with e.mu held.
func (e *Engine) sendNext(c *conv, wasLive bool) error {
	next := c.st.Queue[0]
	c.st.Queue = c.st.Queue[1:]
	stream, err := e.begin(c, next, wasLive)
	if err == nil {
		e.cfg.Emit("queue.item.sent", map[string]any{"conv": c.st.ID, "item_id": next.ID, "stream_id": stream})
	}
	return err
}

// ConvView is a conversation as the snapshot shows it. Live: a turn is
// under way; Waiting: messages wait in its queue; Coordinating: it drives
// a story run.
type ConvView struct {
	ID                string    `json:"id"`
	Live              bool      `json:"live"`
	Coordinating      bool      `json:"coordinating"`
	Waiting           bool      `json:"waiting"`
	LastFinalStreamID string    `json:"last_final_stream_id"`
	Anchor            *Anchor   `json:"anchor"`
	Queued            int       `json:"queued"`
	Messages          int64     `json:"messages"`
	Created           time.Time `json:"created"`
	Updated           time.Time `json:"updated"`
}

// Snapshot lists the conversations, most recently updated first.
func (e *Engine) Snapshot() []ConvView {
	e.mu.Lock()
	out := make([]ConvView, 0, len(e.convs))
	for _, c := range e.convs {
		out = append(out, ConvView{ID: c.st.ID, Live: c.st.Live != nil, Waiting: len(c.st.Queue) > 0,
			LastFinalStreamID: c.st.LastFinal, Anchor: c.st.Anchor, Queued: len(c.st.Queue), Messages: c.st.Messages,
			Created: c.st.Created, Updated: c.st.Updated})
	}
	e.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Updated.Equal(out[j].Updated) {
			return out[i].Updated.After(out[j].Updated)
		}
		return out[i].ID < out[j].ID
	})
	for i := range out {
		if e.cfg.Coordinating != nil {
			out[i].Coordinating = e.cfg.Coordinating(out[i].ID)
		}
	}
	return out
}

// Messages returns up to limit messages of conversation id older than
// message before (0: the newest), oldest first, and whether there are
// older ones.
func (e *Engine) Messages(id string, before int64, limit int) ([]Message, bool, error) {
	e.mu.Lock()
	c, ok := e.convs[id]
	e.mu.Unlock()
	if !ok {
		return nil, false, ErrNoConv
	}
	// JSON escapes a byte in at most 6: an answer and a message at their
	// limits, escaped, with room for the other fields.
	return readMessages(c.dir, before, limit, 6*(e.cfg.MaxOutput+e.cfg.MaxText)+64<<10)
}

// Queue returns the items waiting in conversation id, next first, and the
// live one (nil when none).
func (e *Engine) Queue(id string) ([]Item, *Item, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	c, ok := e.convs[id]
	if !ok {
		return nil, nil, ErrNoConv
	}
	var live *Item
	if c.st.Live != nil {
		l := *c.st.Live
		live = &l
	}
	return append([]Item{}, c.st.Queue...), live, nil
}

// Active reports whether any conversation has a turn under way or
// waiting.
func (e *Engine) Active() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, c := range e.convs {
		if c.st.Live != nil || len(c.st.Queue) > 0 {
			return true
		}
	}
	return false
}

// Pending reports whether item of conversation id is queued or under way.
func (e *Engine) Pending(id, item string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	c, ok := e.convs[id]
	if !ok {
		return false
	}
	if c.st.Live != nil && c.st.Live.ID == item {
		return true
	}
	return slices.ContainsFunc(c.st.Queue, func(it Item) bool { return it.ID == item })
}

// Unqueue takes item out of conversation id's queue; an item under way is
// left to finish.
func (e *Engine) Unqueue(id, item string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	c, ok := e.convs[id]
	if !ok {
		return ErrNoConv
	}
	i := slices.IndexFunc(c.st.Queue, func(it Item) bool { return it.ID == item })
	if i < 0 {
		return nil
	}
	c.st.Queue = slices.Delete(c.st.Queue, i, i+1)
	e.cfg.Emit("queue.item.removed", map[string]any{"conv": id, "item_id": item})
	return c.save()
}
