// Package debuglog is the daemon's debug log: events from the daemon and
// from the dashboard ({ts, src, lvl, tag, msg, conv?, agent_id?, data}),
// redacted before anything is stored (the values of secret-like keys, and
// in every text the known secret values and token-shaped strings), kept
// in memory and in a JSON-lines file, and trimmed to a size and an age.
package debuglog

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentmesh/mesh/internal/atomicfile"
	"github.com/agentmesh/mesh/internal/clock"
)

// Levels, least severe first.
var levels = map[string]int{"debug": 0, "info": 1, "warn": 2, "error": 3}

// ValidLevel reports whether lvl is debug, info, warn or error.
func ValidLevel(lvl string) bool { _, ok := levels[lvl]; return ok }

// Redacted replaces the value of every secret-like key.
const Redacted = "[REDACTED]"

// secretish are the key fragments that make a key secret-like, compared in
// lower case with - and spaces read as _ (X-Api-Key, "Client Secret").
var secretish = []string{"token", "authorization", "bearer", "api_key", "apikey", "secret", "password"}

// Event is one debug record.
type Event struct {
	TS      time.Time `json:"ts"`
	Src     string    `json:"src"`
	Lvl     string    `json:"lvl"`
	Tag     string    `json:"tag"`
	Msg     string    `json:"msg"`
	Conv    string    `json:"conv,omitempty"`
	AgentID string    `json:"agent_id,omitempty"`
	Data    any       `json:"data,omitempty"`
}

// Config sets the retention.
type Config struct {
	// Path is the JSON-lines file; empty keeps the log in memory only.
	Path string
	// MaxBytes and MaxAge bound what is kept (about: trims run every
	// TrimEvery appends and at Open).
	MaxBytes  int
	MaxAge    time.Duration
	TrimEvery int
	Clock     clock.Clock
	// Files confines the log's writes (default: the file's folder).
	Files atomicfile.Root
}

// Log is the debug log. It is safe for concurrent use.
type Log struct {
	cfg     Config
	secrets atomic.Pointer[[]string]
	mu      sync.Mutex
	events  []stored
	bytes   int
	appends int
	file    *os.File
}

type stored struct {
	ev   Event
	line []byte
}

// Open loads the file at cfg.Path (lines that do not parse are dropped),
// trims it and keeps it open for appends.
func Open(cfg Config) (*Log, error) {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.TrimEvery <= 0 {
		cfg.TrimEvery = 50
	}
	l := &Log{cfg: cfg}
	if cfg.Path == "" {
		return l, nil
	}
	if cfg.Files.Dir() == "" {
		l.cfg.Files = atomicfile.NewRoot(filepath.Dir(cfg.Path), nil)
	}
	if err := l.cfg.Files.MkdirAll(filepath.Dir(cfg.Path), 0o755); err != nil {
		return nil, err
	}
	if f, err := l.cfg.Files.OpenFile("read", cfg.Path, os.O_RDONLY, 0); err == nil {
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			var ev Event
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				l.push(ev, append([]byte(nil), sc.Bytes()...))
			}
		}
		f.Close()
	}
	l.trim(true)
	return l, nil
}

// Close closes the file.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.file == nil {
		return nil
	}
	err := l.file.Close()
	l.file = nil
	return err
}

// SetSecrets sets the values blanked out of every text appended from now
// on (the secrets of the environments the daemon knows).
func (l *Log) SetSecrets(values []string) {
	v := slices.Clone(values)
	l.secrets.Store(&v)
}

func (l *Log) secretValues() []string {
	if p := l.secrets.Load(); p != nil {
		return *p
	}
	return nil
}

// RedactText redacts s as Append redacts an event's text, with the
// secrets set last.
func (l *Log) RedactText(s string) string { return RedactText(s, l.secretValues()) }

// Append redacts ev's message and data, stamps it when it has no time (or
// a time to come: an event is never younger than its arrival), and
// stores it.
func (l *Log) Append(ev Event) error {
	if now := l.cfg.Clock.Now(); ev.TS.IsZero() || ev.TS.After(now) {
		ev.TS = now
	}
	ev.TS = ev.TS.UTC()
	secrets := l.secretValues()
	ev.Msg = RedactText(ev.Msg, secrets)
	ev.Data = Redact(ev.Data, secrets)
	line, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("debuglog: %w", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.push(ev, line)
	var werr error
	if l.cfg.Path != "" {
		werr = l.write(line)
	}
	if l.appends++; l.appends%l.cfg.TrimEvery == 0 {
		l.trim(false)
	}
	return werr
}

func (l *Log) push(ev Event, line []byte) {
	l.events = append(l.events, stored{ev, line})
	l.bytes += len(line) + 1
}

func (l *Log) write(line []byte) error {
	if l.file == nil {
		f, err := l.cfg.Files.OpenAppend(l.cfg.Path, 0o600)
		if err != nil {
			return err
		}
		l.file = f
	}
	_, err := l.file.Write(append(line, '\n'))
	return err
}

// trim drops the events past MaxAge, wherever they are (a client's event
// may be dated before those appended earlier), then the oldest past
// MaxBytes, and rewrites the file when it dropped any (or always, at open).
func (l *Log) trim(rewrite bool) {
	cut := l.cfg.Clock.Now().Add(-l.cfg.MaxAge)
	kept := make([]stored, 0, len(l.events))
	for _, s := range l.events {
		if l.cfg.MaxAge > 0 && s.ev.TS.Before(cut) {
			l.bytes -= len(s.line) + 1
			continue
		}
		kept = append(kept, s)
	}
	n := 0
	for n < len(kept) && l.cfg.MaxBytes > 0 && l.bytes > l.cfg.MaxBytes {
		l.bytes -= len(kept[n].line) + 1
		n++
	}
	if len(kept) == len(l.events) && n == 0 && !rewrite {
		return
	}
	l.events = append([]stored(nil), kept[n:]...)
	if l.cfg.Path != "" {
		l.rewrite()
	}
}

// rewrite replaces the file with what is kept, atomically.
func (l *Log) rewrite() {
	var buf bytes.Buffer
	for _, s := range l.events {
		buf.Write(s.line)
		buf.WriteByte('\n')
	}
	if l.file != nil {
		l.file.Close()
		l.file = nil
	}
	l.cfg.Files.Write(l.cfg.Path, buf.Bytes(), 0o600) // a failure keeps the old file, trimmed next time
}

// Query selects events for Tail.
type Query struct {
	Since    time.Time
	Tags     []string // any of them; none is all
	MinLevel string
}

// Tail returns the events matching q, oldest first, and how many seconds
// of history the log holds.
func (l *Log) Tail(q Query) ([]Event, float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	min := levels[q.MinLevel]
	out := []Event{}
	for _, s := range l.events {
		if s.ev.TS.Before(q.Since) || levels[s.ev.Lvl] < min || (len(q.Tags) > 0 && !contains(q.Tags, s.ev.Tag)) {
			continue
		}
		out = append(out, s.ev)
	}
	retained := 0.0
	for _, s := range l.events {
		retained = max(retained, l.cfg.Clock.Now().Sub(s.ev.TS).Seconds())
	}
	return out, retained
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Redact returns v with the value of every secret-like key, at any depth
// of maps and lists, replaced by Redacted, and every string redacted as
// RedactText does. v is decoded JSON (maps of string to any, lists of
// any, scalars), or the daemon's maps of string to any; it is copied,
// never changed.
func Redact(v any, secrets []string) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			if Secretish(k) {
				out[k] = Redacted
			} else {
				out[k] = Redact(x, secrets)
			}
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = Redact(x, secrets)
		}
		return out
	case []string:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = RedactText(x, secrets)
		}
		return out
	case string:
		return RedactText(v, secrets)
	}
	return v
}

// Secretish reports whether a key names a secret.
func Secretish(key string) bool {
	k := strings.NewReplacer("-", "_", " ", "_").Replace(strings.ToLower(key))
	for _, s := range secretish {
		if strings.Contains(k, s) {
			return true
		}
	}
	return false
}
