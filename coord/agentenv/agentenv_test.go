package agentenv

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestPolicy(t *testing.T) {
	base := []string{"PATH=/bin", "HOME=/home/ann", "LC_ALL=C", "ANTHROPIC_API_KEY=sk-ant-1234567890", "MESH_COORD_AGENT_CMD=claude",
		"MESH_DEVICE_ID=box", "AWS_SECRET_ACCESS_KEY=abcdefghij", "DATABASE_URL=postgres://x", "EXTRA_ONE=1", "WEIRD"}
	p, err := New([]string{"default", "EXTRA_*", " ", "MESH_DEVICE_ID"})
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(p.Environ(base, map[string]string{"PROJECT": "p", "PATH": "/project/bin"}, map[string]string{"PROJECT": "job"}), " ")
	want := "ANTHROPIC_API_KEY=sk-ant-1234567890 EXTRA_ONE=1 HOME=/home/ann LC_ALL=C PATH=/project/bin PROJECT=job"
	if got != want {
		t.Fatalf("environ\n%s\nwant\n%s", got, want)
	}
	only, _ := New([]string{"PATH"})
	if got := strings.Join(only.Environ(base), " "); got != "PATH=/bin" {
		t.Fatalf("PATH only: %s", got)
	}
	for _, bad := range []string{"*", "A-B", "1X", "PATH*X", "$HOME"} {
		if _, err := New([]string{bad}); !errors.Is(err, ErrPattern) {
			t.Errorf("%q: %v", bad, err)
		}
	}
	secrets := Secrets(base, map[string]string{"DB_PASSWORD": "hunter2hunter2", "NAME": "not a secret at all", "SHORT_TOKEN": "abc"})
	if !slices.Equal(secrets, []string{"sk-ant-1234567890", "hunter2hunter2", "abcdefghij"}) {
		t.Fatalf("secrets %q", secrets)
	}
}
