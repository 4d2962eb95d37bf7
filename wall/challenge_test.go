package wall

import (
	"errors"
	"testing"
	"time"
)

// TestChallenges: a challenge is good only at the node that issued it, for
// the cluster it names, for challengeLife.
func TestChallenges(t *testing.T) {
	t.Parallel()
	b, c := newChallenger(), newChallenger()
	now := time.Unix(1_800_000_000, 0)
	ch := b.issue("c_a", now)
	cases := []struct {
		name string
		node challenger
		ch   string
		cl   string
		at   time.Time
		ok   bool
	}{
		{"at its node, at once", b, ch, "c_a", now, true},
		{"at its node, at the end of its life", b, ch, "c_a", now.Add(challengeLife), true},
		{"past its life", b, ch, "c_a", now.Add(challengeLife + time.Second), false},
		{"from the future", b, ch, "c_a", now.Add(-2 * time.Second), false},
		{"at another node", c, ch, "c_a", now, false},
		{"for another cluster", b, ch, "c_b", now, false},
		{"garbage", b, "not-a-challenge", "c_a", now, false},
		{"truncated", b, ch[:len(ch)-2], "c_a", now, false},
	}
	for _, tc := range cases {
		err := tc.node.check(tc.cl, tc.ch, tc.at)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrBadChallenge)) {
			t.Errorf("%s: %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}
