package atomicfile

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// TestRootStaysInside: a Root writes inside its folder, through links that
// stay inside, and refuses every path that leads out, whether the link is
// the file, its folder or a folder further up, dangling or not; nothing
// is written outside, and each refusal and success is reported.
func TestRootStaysInside(t *testing.T) {
	proj, outside := t.TempDir(), t.TempDir()
	mk := func(rel string) {
		if err := os.MkdirAll(filepath.Join(proj, rel), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link := func(target, rel string) {
		if err := os.Symlink(target, filepath.Join(proj, rel)); err != nil {
			t.Fatal(err)
		}
	}
	mk("docs/deep")
	mk("real")
	link(outside, ".github")                             // a folder leading out
	link(filepath.Join(outside, "gone"), ".cursor")      // a dangling one
	link("../../..", "docs/deep/up")                     // relative, deeper down
	link(filepath.Join(outside, "notes.md"), "notes.md") // the file itself
	link("real", "alias")                                // a link that stays inside
	link(filepath.Join(proj, "real"), "abs-alias")       // absolute, inside
	os.WriteFile(filepath.Join(outside, "notes.md"), []byte("mine"), 0o600)
	reports := map[string]error{}
	r := NewRoot(proj, func(rel string, err error) { reports[rel] = err })
	for _, path := range []string{
		".github/copilot-instructions.md",
		".cursor/rules/agent-instructions.mdc",
		"docs/deep/up/x/file.md",
		"notes.md",
		"../escape.md",
		filepath.Join(outside, "abs.md"),
		"abs-alias/b.md", // os.Root follows relative links only
	} {
		err := r.Write(path, []byte("x"), 0o644)
		var oe *OutsideError
		if !errors.Is(err, ErrOutside) || !errors.As(err, &oe) || oe.Op != "write" {
			t.Errorf("%s: %v, want a refusal", path, err)
		}
	}
	if err := r.Append("notes.md", []byte("more"), 0o644); !errors.Is(err, ErrOutside) {
		t.Errorf("append through a link out: %v", err)
	}
	if _, err := r.ReadFile("notes.md"); !errors.Is(err, ErrOutside) {
		t.Errorf("read through a link out: %v", err)
	}
	if _, err := r.Resolve("docs/deep/up"); !errors.Is(err, ErrOutside) {
		t.Errorf("resolve a link out: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "notes.md")); string(b) != "mine" {
		t.Fatalf("outside file changed: %q", b)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 1 {
		t.Fatalf("outside holds %v", entries)
	}
	if !errors.Is(reports[".github/copilot-instructions.md"], ErrOutside) || !errors.Is(reports["notes.md"], ErrOutside) {
		t.Fatalf("reports %v", reports)
	}

	// Inside, links included, all works.
	for _, path := range []string{"alias/a.md", "alias/b.md", filepath.Join(proj, "docs/c.md"), "new/folder/d.md"} {
		if err := r.Write(path, []byte("ok"), 0o640); err != nil {
			t.Errorf("%s: %v", path, err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(proj, "real", "b.md")); string(b) != "ok" {
		t.Fatalf("b.md %q", b)
	}
	if err, ok := reports["alias/a.md"]; !ok || err != nil {
		t.Fatalf("success not reported: %v %v", err, ok)
	}
	if err := r.Append("new/log.jsonl", []byte("1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := r.Create("new/log.jsonl", 0o644, func(w io.Writer) error { return nil }); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("create over a file: %v", err)
	}
	if got, err := r.Resolve("alias"); err != nil || got != filepath.Join(mustReal(t, proj), "real") {
		t.Fatalf("resolve alias: %s %v", got, err)
	}
	if err := r.RemoveAll("new"); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(filepath.Join(proj, "real")); len(entries) != 2 {
		t.Fatalf("real holds %v (a temporary file left?)", entries)
	}
}

func mustReal(t *testing.T, p string) string {
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		t.Fatal(err)
	}
	return real
}
