package chat

import "testing"

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		stderr    string
		class     string
		transient bool
	}{
		{`API Error: 400 {"message":"messages.1.content.0: expected thinking block"}`, ClassThinking, true},
		{`API Error: 429 {"type":"rate_limit_error"}`, ClassRateLimited, true},
		{"HTTP 502 Bad Gateway", ClassServer, true},
		{`529 {"type":"overloaded_error"}`, ClassOverloaded, true},
		{"504", ClassGatewayTimeout, true},
		{"Gateway Timeout", ClassGatewayTimeout, true},
		{"API Error: 400 prompt is too long: 210000 tokens", ClassPromptTooLong, false},
		{"status 413 prompt_too_long", ClassPromptTooLong, false},
		{"API Error: 400 invalid_request_error", ClassRequest, false},
		{"401 unauthorized", ClassRequest, false},
		{"segmentation fault", ClassAgent, false},
		{"wrote 5000 lines", ClassAgent, false},
	} {
		if c, tr := Classify(tc.stderr); c != tc.class || tr != tc.transient {
			t.Errorf("%q: %s %v, want %s %v", tc.stderr, c, tr, tc.class, tc.transient)
		}
	}
}

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
