package update

import "testing"

func TestNewer(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"go-0.2.0", "go-0.1.0", true},
		{"go-0.10.0", "go-0.9.9", true},
		{"go-1.0.0", "go-0.99.99", true},
		{"go-0.1.0", "go-0.1.0", false},
		{"go-0.1.0", "go-0.1.1", false},
		{"py-9.0.0", "go-0.1.0", false},
		{"go-1.0", "go-0.1.0", false},
		{"go-0.2.0", "dev", false},
	} {
		if got := Newer(tc.a, tc.b); got != tc.want {
			t.Errorf("Newer(%q, %q) = %v", tc.a, tc.b, got)
		}
	}
}
