package quorum

import (
	"context"
	"io"
	"log"
	"log/slog"

	"github.com/hashicorp/go-hclog"
)

// slogger hands Raft's logs to the node's slog.Logger, so that an
// embedding program keeps its logs its own. Raft's info lines (elections,
// snapshots) stay info; its trace lines are debug.
type slogger struct {
	l       *slog.Logger
	name    string
	implied []any
}

var _ hclog.Logger = slogger{}

func newSlogger(l *slog.Logger) hclog.Logger { return slogger{l: l} }

func level(l hclog.Level) slog.Level {
	switch l {
	case hclog.Trace:
		return slog.LevelDebug - 4
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	}
	return slog.LevelInfo
}

func (s slogger) Log(lv hclog.Level, msg string, args ...any) {
	ctx := context.Background()
	if !s.l.Enabled(ctx, level(lv)) {
		return
	}
	if s.name != "" {
		msg = s.name + ": " + msg
	}
	s.l.Log(ctx, level(lv), msg, append(append([]any(nil), s.implied...), args...)...)
}

func (s slogger) Trace(msg string, args ...any) { s.Log(hclog.Trace, msg, args...) }
func (s slogger) Debug(msg string, args ...any) { s.Log(hclog.Debug, msg, args...) }
func (s slogger) Info(msg string, args ...any)  { s.Log(hclog.Info, msg, args...) }
func (s slogger) Warn(msg string, args ...any)  { s.Log(hclog.Warn, msg, args...) }
func (s slogger) Error(msg string, args ...any) { s.Log(hclog.Error, msg, args...) }

func (s slogger) enabled(lv hclog.Level) bool { return s.l.Enabled(context.Background(), level(lv)) }
func (s slogger) IsTrace() bool               { return s.enabled(hclog.Trace) }
func (s slogger) IsDebug() bool               { return s.enabled(hclog.Debug) }
func (s slogger) IsInfo() bool                { return s.enabled(hclog.Info) }
func (s slogger) IsWarn() bool                { return s.enabled(hclog.Warn) }
func (s slogger) IsError() bool               { return s.enabled(hclog.Error) }
func (s slogger) ImpliedArgs() []any          { return s.implied }
func (s slogger) Name() string                { return s.name }
func (s slogger) SetLevel(hclog.Level)        {}
func (s slogger) GetLevel() hclog.Level       { return hclog.Info }

func (s slogger) With(args ...any) hclog.Logger {
	s.implied = append(append([]any(nil), s.implied...), args...)
	return s
}

func (s slogger) Named(name string) hclog.Logger {
	if s.name != "" {
		name = s.name + "." + name
	}
	s.name = name
	return s
}

func (s slogger) ResetNamed(name string) hclog.Logger {
	s.name = name
	return s
}

func (s slogger) StandardLogger(*hclog.StandardLoggerOptions) *log.Logger {
	return slog.NewLogLogger(s.l.Handler(), slog.LevelInfo)
}

func (s slogger) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return s.StandardLogger(nil).Writer()
}
