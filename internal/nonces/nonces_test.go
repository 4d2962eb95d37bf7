package nonces

import (
	"errors"
	"strconv"
	"testing"
	"time"
)

func TestClaim(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	m := New(time.Minute, 2)
	a, b := []byte("key a"), []byte("key b")
	steps := []struct {
		signer []byte
		nonce  string
		at     time.Duration
		want   error
	}{
		{a, "n1", 0, nil},
		{a, "n1", time.Second, ErrReused},
		{b, "n1", time.Second, nil}, // another signer's nonce is its own
		{a, "n2", 2 * time.Second, ErrFull},
		{a, "n1", 61 * time.Second, nil},        // a's first claim is forgotten, b's (1 s) is not
		{b, "n1", 61*time.Second + 1, nil},      // b's (at 1 s) is past the window
		{a, "n3", 62 * time.Second, ErrFull},    // both claims are recent
		{a, "n1", 62 * time.Second, ErrReused},  // reuse is told before fullness
		{a, "n3", 121*time.Second + 1, nil},     // a's n1 (61 s) forgotten
		{a, "n1", 121*time.Second + 1, ErrFull}, // b's n1 (61 s + 1 ns) is still within
		{a, "n1", 121*time.Second + 2, nil},
	}
	for i, s := range steps {
		if err := m.Claim(s.signer, s.nonce, t0.Add(s.at)); !errors.Is(err, s.want) {
			t.Fatalf("step %d (%s %s at %v): %v, want %v", i, s.signer, s.nonce, s.at, err, s.want)
		}
	}
	if m.Len() != 2 {
		t.Fatalf("Len %d, want 2", m.Len())
	}
}

// TestScopeShare: one scope (a client address) holds at most its share;
// another still claims, and the scope claims again once its own are
// forgotten.
func TestScopeShare(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	m := New(time.Minute, 10).LimitScope(2)
	key := []byte("key")
	for i, s := range []struct {
		scope, nonce string
		at           time.Duration
		want         error
	}{
		{"10.0.0.1", "n1", 0, nil},
		{"10.0.0.1", "n2", time.Second, nil},
		{"10.0.0.1", "n3", 2 * time.Second, ErrScopeFull},
		{"10.0.0.1", "n1", 2 * time.Second, ErrReused},
		{"10.0.0.2", "n3", 2 * time.Second, nil},
		{"10.0.0.1", "n4", 61 * time.Second, nil}, // its n1 is forgotten
		{"10.0.0.1", "n5", 61 * time.Second, ErrScopeFull},
	} {
		if err := m.ClaimIn(s.scope, key, s.nonce, t0.Add(s.at)); !errors.Is(err, s.want) {
			t.Fatalf("step %d (%s %s at %v): %v, want %v", i, s.scope, s.nonce, s.at, err, s.want)
		}
	}
}

// BenchmarkClaimFull: a claim into a full memory whose oldest nonce just
// expired costs the same whatever the memory holds.
func BenchmarkClaimFull(b *testing.B) {
	const held = 100_000
	m := New(time.Minute, held)
	t0 := time.Unix(1_800_000_000, 0)
	for i := range held {
		m.Claim([]byte("k"), strconv.Itoa(i), t0.Add(time.Duration(i)*time.Microsecond))
	}
	b.ResetTimer()
	for i := range b.N {
		at := t0.Add(time.Minute + time.Duration(i+1)*time.Microsecond + 1)
		if err := m.Claim([]byte("k"), "b"+strconv.Itoa(i), at); err != nil {
			b.Fatal(err)
		}
	}
}
