package store

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// formatted records that it was formatted.
type formatted struct{ n *int }

func (f formatted) String() string { *f.n++; return "value" }

// TestBadgerDebugLinesFormattedOnlyWhenRead: Badger's debug lines (four a
// write batch) are not formatted for a logger that drops them, and are
// for one that keeps them.
func TestBadgerDebugLinesFormattedOnlyWhenRead(t *testing.T) {
	var out bytes.Buffer
	var n int
	info := badgerLogger{slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	info.Debugf("writing %v", formatted{&n})
	if n != 0 || out.Len() != 0 {
		t.Errorf("a debug line at info: formatted %d times, logged %q", n, out.String())
	}
	all := badgerLogger{slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug - 4}))}
	all.Debugf("writing %v", formatted{&n})
	if n != 1 || !strings.Contains(out.String(), "badger: writing value") {
		t.Errorf("a debug line at debug-4: formatted %d times, logged %q", n, out.String())
	}
}
