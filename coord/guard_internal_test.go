package coord

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

// TestOnceSetIsBounded: the memory of refusals already logged holds the
// last onceMax keys; the oldest are forgotten first.
func TestOnceSetIsBounded(t *testing.T) {
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
