package chat

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/agentmesh/mesh/coord/agentenv"
	"github.com/agentmesh/mesh/coord/debuglog"
	"github.com/agentmesh/mesh/internal/atomicfile"
	"github.com/agentmesh/mesh/internal/clock"
)

// Config configures an Engine. Zero limits take their defaults.
type Config struct {
	// Dir keeps the conversations, one folder each.
	Dir string
	// ArchiveDir keeps the gzipped timelines of idle conversations.
	ArchiveDir string
	// Project is the folder the agent runs in.
	Project string
	// AgentCmd is the coding agent, run by /bin/sh -c; empty turns chat
	// off (dispatch answers chat_disabled).
	AgentCmd string
	// TurnTimeout bounds one attempt of a turn; the agent is killed past
	// it (30 min).
	TurnTimeout time.Duration
	// MaxRetries bounds the retries of a turn after transient errors (2).
	MaxRetries int
	// PauseAfter rate-limited attempts in a row of an agent type pause
	// the type (3) for PauseFor (5 min): its turns wait.
	PauseAfter int
	PauseFor   time.Duration
	// QueueMax bounds the messages waiting in one conversation (32).
	QueueMax int
	// MaxConvs bounds the conversations (1,000).
	MaxConvs int
	// MaxText bounds an operator message (64 KiB).
	MaxText int
	// MaxOutput bounds the text kept of one answer (1 MiB).
	MaxOutput int
	// MaxTimeline bounds a timeline file: past it, the timeline is
	// archived and starts anew (64 MiB).
	MaxTimeline int64
	// AttachmentMax bounds one decoded attachment (5 MiB); MaxAttachments
	// the attachments of one message (8).
	AttachmentMax  int
	MaxAttachments int
	// Files confines every write of the engine (default: the folder that
	// holds Dir).
	Files  atomicfile.Root
	Clock  clock.Clock
	Logger *slog.Logger
	// Emit publishes an event to the daemon's socket.
	Emit func(typ string, fields map[string]any)
	// CheckAnchor says whether an anchor names an initiative (and task)
	// of the roadmap; nil accepts every anchor.
	CheckAnchor func(Anchor) error
	// TurnEnded is told when a turn ends for good, outside the engine's
	// lock (a story run then sends its next task), with how it failed
	// (empty class: it succeeded).
	TurnEnded func(conv string, it Item, end TurnEnd)
	// Env is the environment of the agent, before the MESH_COORD_*
	// variables of the turn (default: agentenv's default allow list over
	// the daemon's environment).
	Env func() []string
	// Coordinating says whether a conversation drives a story run.
	Coordinating func(conv string) bool
	// Redact blanks the secrets out of the end of a failed agent's
	// output before the timeline (served over HTTP) shows it (default:
	// the debug log's rules without known values).
	Redact func(string) string
}

// TurnEnd is how a turn ended: Class is empty when it succeeded; Detail is
// the end of the agent's stderr (or its report on stdout) when it failed.
type TurnEnd struct {
	Class, Detail string
}

// DefaultConfig holds the default limits.
func DefaultConfig() Config {
	return Config{TurnTimeout: 30 * time.Minute, MaxRetries: 2, PauseAfter: 3, PauseFor: 5 * time.Minute, QueueMax: 32, MaxConvs: 1000, MaxText: 64 << 10,
		MaxOutput: 1 << 20, MaxTimeline: 64 << 20, AttachmentMax: 5 << 20, MaxAttachments: 8}
}

// ErrConfig is an unusable configuration.
var ErrConfig = errors.New("chat: invalid configuration")

// Validate fills what is left at zero and checks the limits.
func (c *Config) Validate() error {
	d := DefaultConfig()
	for _, f := range []struct{ v, def *int }{{&c.MaxRetries, &d.MaxRetries}, {&c.PauseAfter, &d.PauseAfter}, {&c.QueueMax, &d.QueueMax},
		{&c.MaxConvs, &d.MaxConvs}, {&c.MaxText, &d.MaxText}, {&c.MaxOutput, &d.MaxOutput},
		{&c.AttachmentMax, &d.AttachmentMax}, {&c.MaxAttachments, &d.MaxAttachments}} {
		if *f.v == 0 {
			*f.v = *f.def
		}
		if *f.v < 0 {
			return fmt.Errorf("%w: limits must be positive", ErrConfig)
		}
	}
	if c.MaxTimeline == 0 {
		c.MaxTimeline = d.MaxTimeline
	}
	if c.TurnTimeout == 0 {
		c.TurnTimeout = d.TurnTimeout
	}
	if c.PauseFor == 0 {
		c.PauseFor = d.PauseFor
	}
	if c.TurnTimeout < 0 || c.MaxTimeline < 0 || c.PauseFor < 0 {
		return fmt.Errorf("%w: the turn timeout, the pause and the timeline size must be positive", ErrConfig)
	}
	if c.Files.Dir() == "" {
		c.Files = atomicfile.NewRoot(filepath.Dir(c.Dir), nil)
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Emit == nil {
		c.Emit = func(string, map[string]any) {}
	}
	if c.Env == nil {
		c.Env = agentenv.DefaultEnviron
	}
	if c.Redact == nil {
		c.Redact = func(s string) string { return debuglog.RedactText(s, nil) }
	}
	return nil
}

// BodyMax is how large a dispatch body may be: the text and every
// attachment at its limit, base64-encoded, with room for the JSON.
func (c *Config) BodyMax() int64 {
	return int64(c.MaxText)*2 + int64(c.MaxAttachments)*(int64(c.AttachmentMax)*4/3+4096) + 64<<10
}
