package chat

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/agentmesh/mesh/internal/atomicfile"
)

// Files of a conversation's folder.
const (
	stateFile    = "state.json"
	timelineFile = "timeline.jsonl"
	uploadsDir   = "uploads"
)

// Roles of messages.
const (
	RoleOperator = "operator"
	RoleAgent    = "agent"
	RoleSystem   = "system"
)

var convIDRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)

// ValidID reports whether id can name a conversation.
func ValidID(id string) bool { return convIDRe.MatchString(id) }

// Message is one entry of a timeline.
type Message struct {
	ID          int64     `json:"id"`
	Role        string    `json:"role"`
	Text        string    `json:"text"`
	TS          time.Time `json:"ts"`
	StreamID    string    `json:"stream_id,omitempty"`
	Attachments []string  `json:"attachments,omitempty"`
	AgentID     string    `json:"agent_id,omitempty"`
	RunID       string    `json:"run_id,omitempty"`
	// Error is the class of a turn that failed (the Class constants).
	Error     string `json:"error,omitempty"`
	Truncated bool   `json:"truncated,omitempty"`
}

// Item is a message waiting for its turn, or the one being answered.
type Item struct {
	ID   string `json:"id"`
	Text string `json:"text"`
	// Attachments are the names of the files kept under uploads/.
	Attachments []string  `json:"attachments,omitempty"`
	AgentID     string    `json:"agent_id,omitempty"`
	RunID       string    `json:"run_id,omitempty"`
	QueuedAt    time.Time `json:"queued_at"`
}

// convState is what state.json keeps of a conversation.
type convState struct {
	ID        string    `json:"id"`
	Created   time.Time `json:"created"`
	Updated   time.Time `json:"updated"`
	Messages  int64     `json:"messages"`
	Streams   int64     `json:"streams"`
	Items     int64     `json:"items"`
	LastFinal string    `json:"last_final_stream_id,omitempty"`
	Anchor    *Anchor   `json:"anchor,omitempty"`
	// Live is the item being answered; a daemon that finds one at start
	// was stopped during the turn.
	Live  *Item  `json:"live,omitempty"`
	Queue []Item `json:"queue"`
}

type conv struct {
	dir   string
	files atomicfile.Root
	st    convState
}

func (c *conv) save() error {
	b, err := json.MarshalIndent(c.st, "", "  ")
	if err != nil {
		return err
	}
	return c.files.Write(filepath.Join(c.dir, stateFile), b, 0o644)
}

// appendMessage numbers m, stamps it and adds it to the timeline.
func (c *conv) appendMessage(m *Message, now time.Time) error {
	c.st.Messages++
	m.ID, m.TS = c.st.Messages, now.UTC()
	c.st.Updated = m.TS
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return c.files.Append(filepath.Join(c.dir, timelineFile), append(b, '\n'), 0o644)
}

// loadConvs reads every conversation folder under dir; files confines
// their writes.
func loadConvs(dir string, files atomicfile.Root) (map[string]*conv, error) {
	out := map[string]*conv{}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if !e.IsDir() || !ValidID(e.Name()) {
			continue
		}
		c := &conv{dir: filepath.Join(dir, e.Name()), files: files}
		b, err := os.ReadFile(filepath.Join(c.dir, stateFile))
		if err != nil {
			continue // a folder without state is no conversation
		}
		if err := json.Unmarshal(b, &c.st); err != nil || c.st.ID != e.Name() {
			return nil, fmt.Errorf("chat: %s: unreadable state: %v", c.dir, err)
		}
		out[c.st.ID] = c
	}
	return out, nil
}

// readMessages returns the last limit messages with an id below before (0:
// no bound), oldest first, and whether older ones exist; maxLine bounds a
// line of the timeline.
func readMessages(dir string, before int64, limit, maxLine int) ([]Message, bool, error) {
	f, err := os.Open(filepath.Join(dir, timelineFile))
	if errors.Is(err, fs.ErrNotExist) {
		return []Message{}, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	var ring []Message
	more := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	for sc.Scan() {
		var m Message
		if json.Unmarshal(sc.Bytes(), &m) != nil || (before > 0 && m.ID >= before) {
			continue
		}
		if ring = append(ring, m); len(ring) > limit {
			ring, more = ring[1:], true
		}
	}
	if ring == nil {
		ring = []Message{}
	}
	return ring, more, sc.Err()
}
