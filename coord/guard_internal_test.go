package coord

import (
	"fmt"
	"io/fs"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestOnceSetIsBounded: the memory of refusals already logged holds the
// last onceMax keys; the oldest are forgotten first.
func TestOnceSetIsBounded(t *testing.T) {
	t.Parallel()
	var s onceSet
	for i := range onceMax + 10 {
		if !s.first(fmt.Sprint(i)) {
			t.Fatalf("key %d seen before", i)
		}
	}
	if len(s.keys) != onceMax || len(s.order) != onceMax {
		t.Fatalf("%d keys, %d in order, want %d", len(s.keys), len(s.order), onceMax)
	}
	if s.first("10") || s.first(fmt.Sprint(onceMax+9)) {
		t.Fatal("a remembered key counted as new")
	}
	if !s.first("0") {
		t.Fatal("the oldest key was not forgotten")
	}
}

// FuzzHostAllowed: whatever a client puts in Host, the check does not
// panic, and what it lets in names the daemon: never a name with "evil"
// in it.
func FuzzHostAllowed(f *testing.F) {
	g := &guard{hosts: []string{"localhost", "coord.test"}, listen: netip.MustParseAddr("127.0.0.1")}
	for _, s := range []string{"localhost:5570", "127.0.0.1", "[::1]:80", "[::1%evil]:1", "evil.localhost", "localhost.evil",
		"coord.test.", "evil.coord.test", "localhost:evil", "localhost:", "[", "]", ":", "[]:1", "0x7f.1", "127.1", "::ffff:127.0.0.1", "EVIL.example:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, host string) {
		if g.hostAllowed(host) && strings.Contains(strings.ToLower(host), "evil") {
			t.Fatalf("Host %q let in", host)
		}
	})
}

// fileInfo is a file's metadata as the token check reads it.
type fileInfo struct {
	mode fs.FileMode
	uid  uint32
}

func (f fileInfo) Name() string       { return "token" }
func (f fileInfo) Size() int64        { return 44 }
func (f fileInfo) Mode() fs.FileMode  { return f.mode }
func (f fileInfo) ModTime() time.Time { return time.Time{} }
func (f fileInfo) IsDir() bool        { return f.mode.IsDir() }
func (f fileInfo) Sys() any           { return &syscall.Stat_t{Uid: f.uid} }

// TestNotPrivate: a token file is the daemon user's own only when it is a
// regular file of that user that neither the group nor others may read
// or write.
func TestNotPrivate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		info fileInfo
		why  string
	}{
		{fileInfo{0o600, 1000}, ""},
		{fileInfo{0o400, 1000}, ""},
		{fileInfo{0o644, 1000}, "mode 0644"},
		{fileInfo{0o640, 1000}, "mode 0640"},
		{fileInfo{0o602, 1000}, "mode 0602"},
		{fileInfo{0o600, 1001}, "owned by user 1001"},
		{fileInfo{fs.ModeNamedPipe | 0o600, 1000}, "not a regular file"},
	} {
		got := notPrivate(tc.info, 1000)
		if (tc.why == "") != (got == "") || !strings.Contains(got, tc.why) {
			t.Errorf("%v uid %d: %q, want %q", tc.info.mode, tc.info.uid, got, tc.why)
		}
	}
}
