package chat

import "testing"

func TestBackoff(t *testing.T) {
	for n, want := range map[int]int{1: 2, 2: 4, 3: 8, 4: 8, 10: 8} {
		if got := Backoff(n); got != want {
			t.Errorf("Backoff(%d) = %d, want %d", n, got, want)
		}
	}
}

func FuzzAnchorLine(f *testing.F) {
	for _, s := range []string{"[anchor: auth]", " [ Anchor : #Auth/Login ] ", "[anchor: none]", "[anchor:]", "text"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		a, clear, ok := anchorLine(line)
		if !ok && (clear || a != Anchor{}) {
			t.Fatalf("%q: not an anchor line but %+v %v", line, a, clear)
		}
		if a.Initiative != Slug(a.Initiative) || a.Task != Slug(a.Task) {
			t.Fatalf("%q: slugs not normalised: %+v", line, a)
		}
	})
}
