package coord_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/mesh/coord"
	"github.com/agentmesh/mesh/internal/atomicfile"
	"github.com/agentmesh/mesh/internal/testkit"
)

// symlink links rel, in the project, to target.
func (h *harness) symlink(target, rel string) {
	h.t.Helper()
	path := filepath.Join(h.dir, rel)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		h.t.Fatal(err)
	}
	if err := os.Symlink(target, path); err != nil {
		h.t.Fatal(err)
	}
}

// untouched fails the test when dir holds anything.
func untouched(t *testing.T, dirs ...string) {
	t.Helper()
	for _, dir := range dirs {
		var found []string
		filepath.WalkDir(dir, func(path string, e os.DirEntry, err error) error {
			if err == nil && path != dir {
				found = append(found, path)
			}
			return nil
		})
		if len(found) > 0 {
			t.Fatalf("written outside the project: %v", found)
		}
	}
}

// refused are /state's warnings that name a refused path.
func (h *harness) refused() []string {
	var out []string
	for _, w := range h.state().Warnings {
		if strings.HasPrefix(w, "refused to ") {
			out = append(out, w)
		}
	}
	slices.Sort(out)
	return out
}

// TestInstructionFilesStayInTheProject: instruction files whose folder is
// a link out of the project (.github), whose folder's folder is
// (.cursor/rules), or which are themselves a link out (GEMINI.md) are not
// written; each refusal is a warning of /state and of the debug log, the
// other files are rendered, and a refusal clears once the link is gone.
func TestInstructionFilesStayInTheProject(t *testing.T) {
	t.Parallel()
	dir := project(t)
	out := t.TempDir()
	pre := &harness{t: t, dir: dir}
	pre.write("agent-instructions.md", "Be careful.\n")
	pre.write(coord.StandardVersionFile, "19\n")
	pre.symlink(filepath.Join(out, "github"), ".github")
	os.Mkdir(filepath.Join(out, "github"), 0o755)
	pre.symlink(filepath.Join(out, "rules"), ".cursor/rules") // dangling
	pre.symlink(filepath.Join(out, "gemini.md"), "GEMINI.md") // the file itself
	h := start(t, dir, nil)

	untouched(t, filepath.Join(out, "github"))
	if _, err := os.Lstat(filepath.Join(out, "rules")); err == nil {
		t.Fatal("rules made outside the project")
	}
	if _, err := os.Lstat(filepath.Join(out, "gemini.md")); err == nil {
		t.Fatal("gemini.md written outside the project")
	}
	for _, f := range []string{"AGENTS.md", "CLAUDE.md"} {
		if !strings.Contains(h.read(f), "Be careful.") {
			t.Fatalf("%s not rendered", f)
		}
	}
	const why = ": the path leads outside the project folder (through a symbolic link out of it, or an absolute one)"
	want := []string{
		"refused to read or write .cursor/rules/agent-instructions.mdc" + why,
		"refused to read or write .github/copilot-instructions.md" + why,
		"refused to read or write GEMINI.md" + why,
	}
	if got := h.refused(); !slices.Equal(got, want) {
		t.Fatalf("warnings\n%q\nwant\n%q", got, want)
	}
	var tl tail
	h.get("/debug/tail?tags=files&min_level=warn", &tl)
	if len(tl.Events) != 3 {
		t.Fatalf("debug events %+v", tl.Events)
	}

	// The link gone, the file is written at the next sync, and its warning
	// goes.
	ws := h.socket()
	os.Remove(filepath.Join(dir, ".github"))
	h.clk.Advance(3 * time.Second)
	if ev := ws.next("agent_instructions.rendered"); fmt.Sprint(ev["files"]) != "[.github/copilot-instructions.md]" {
		t.Fatalf("rendered %v", ev)
	}
	if got := h.refused(); len(got) != 2 {
		t.Fatalf("warnings after the fix %q", got)
	}
}

// TestDaemonWritesStayInTheProject: the roadmap, chat uploads and archives,
// cron run records and a cron's cwd that lead outside the project are
// refused, each with a warning, and nothing is written or run outside.
func TestDaemonWritesStayInTheProject(t *testing.T) {
	t.Parallel()
	dir := project(t)
	out := t.TempDir()
	ext, uploads, records, archives, elsewhere := filepath.Join(out, "ext"), filepath.Join(out, "uploads"), filepath.Join(out, "records"), filepath.Join(out, "archives"), filepath.Join(out, "elsewhere")
	for _, d := range []string{ext, uploads, records, archives, elsewhere} {
		os.Mkdir(d, 0o755)
	}
	os.WriteFile(filepath.Join(ext, "ext.md"), []byte("---\nstatus: next\n---\n# External\n"), 0o644)
	pre := &harness{t: t, dir: dir}
	pre.symlink(filepath.Join(ext, "ext.md"), "roadmap/initiatives/ext.md") // the file itself
	pre.write(".coord/chat/c1/.keep", "")
	pre.symlink(uploads, ".coord/chat/c1/uploads")                  // a folder deeper down
	pre.symlink(records, ".coord/cron/here")                        // the records of a job
	pre.symlink(archives, ".coord/chat-archive")                    // the archives
	pre.symlink("../../"+filepath.Base(out)+"/elsewhere", "linked") // a cwd, relative
	pre.write("cluster.yaml", `id: confined
crons_owner: test-box
crons:
  - {id: here, schedule: "* * * * *", cmd: "echo ran > ran.txt"}
  - {id: up, schedule: "* * * * *", cmd: "echo ran > ran.txt", cwd: "../"}
  - {id: linked, schedule: "* * * * *", cmd: "echo ran > ran.txt", cwd: linked}
`)
	h := start(t, dir, withAgent(func(c *coord.Config) { c.ArchiveAfter = time.Hour }))
	ws := h.socket()

	h.wantError("POST", "/initiative/reorder", `{"id":"ext","wall":"active","order":0}`, http.StatusConflict, "path_outside_project")
	body := fmt.Sprintf(`{"conv":"c1","text":"attach","attachments":[{"name":"a.txt","data":%q}]}`, base64.StdEncoding.EncodeToString([]byte("hi")))
	h.wantError("POST", "/chat/dispatch", body, http.StatusConflict, "path_outside_project")

	h.send("c2", "echo hi", http.StatusOK)
	ws.next("conv.stream.final")
	var r struct {
		Runs []struct{ Status, Error string }
	}
	h.advanceUntil("the crons to run", func() bool {
		h.get("/crons/up/runs", &r)
		return len(r.Runs) == 1 && r.Runs[0].Status == "failed" && len(h.refused()) >= 5
	})
	if r.Runs[0].Error != `unusable cron cwd "../": it resolves outside the project folder; not run` {
		t.Fatalf("up %+v", r.Runs)
	}
	// Fired at the same tick, its run may still be ending.
	testkit.Eventually(t, 10*time.Second, func() bool {
		r.Runs = nil
		h.get("/crons/linked/runs", &r)
		return len(r.Runs) == 1 && r.Runs[0].Status == "failed"
	}, "timed out waiting for the linked job's run to fail")
	testkit.Eventually(t, 10*time.Second, func() bool {
		b, _ := os.ReadFile(filepath.Join(dir, "ran.txt"))
		return string(b) == "ran\n"
	}, "timed out waiting for the job inside to run")
	// An hour on, c2 is archived: not into a folder outside.
	h.clk.Advance(2 * time.Hour)
	// (Each run of "here" is a refusal of its own: count none.)
	testkit.Eventually(t, 10*time.Second, func() bool {
		return strings.Contains(strings.Join(h.refused(), "\n"), "refused to read or write .coord/chat-archive/c2.")
	}, "timed out waiting for the archive to be refused")
	untouched(t, uploads, records, archives, elsewhere)
	if _, err := os.Stat(filepath.Join(out, "ran.txt")); err == nil {
		t.Fatal("a job ran outside the project")
	}
	if b, _ := os.ReadFile(filepath.Join(ext, "ext.md")); string(b) != "---\nstatus: next\n---\n# External\n" {
		t.Fatalf("ext.md changed: %q", b)
	}
	got := strings.Join(h.refused(), "\n")
	for _, want := range []string{"refused to read or write roadmap/initiatives/ext.md", "refused to read or write .coord/chat/c1/uploads/q1-0-a.txt",
		"refused to read or write .coord/cron/here/", "refused to run a command in ..:", "refused to run a command in linked:",
		"refused to read or write .coord/chat-archive/c2."} {
		if !strings.Contains(got, want) {
			t.Errorf("no warning %q in\n%s", want, got)
		}
	}
}

// TestStateFolderLinkedOutside: a .coord that is a link out of the
// project stops the daemon at start, before it writes anything there.
func TestStateFolderLinkedOutside(t *testing.T) {
	t.Parallel()
	dir, out := project(t), t.TempDir()
	if err := os.Symlink(out, filepath.Join(dir, ".coord")); err != nil {
		t.Fatal(err)
	}
	cfg := coord.DefaultConfig()
	cfg.Dir, cfg.Registry = dir, filepath.Join(t.TempDir(), "ports.json")
	d, err := coord.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Start(context.Background()); !errors.Is(err, atomicfile.ErrOutside) || !strings.Contains(err.Error(), ".coord/daemon.lock") {
		t.Fatalf("start: %v", err)
	}
	untouched(t, out)
}

// TestDebugLogLinkedOutside: a debug log that is a link out of the project
// is not written (nor read); the daemon runs on and says so in /state.
func TestDebugLogLinkedOutside(t *testing.T) {
	t.Parallel()
	dir, out := project(t), t.TempDir()
	os.WriteFile(filepath.Join(out, "log"), []byte("theirs\n"), 0o600)
	(&harness{t: t, dir: dir}).symlink(filepath.Join(out, "log"), ".coord/debug.jsonl")
	h := start(t, dir, nil)
	h.wantError("POST", "/debug/log", `{"msg":"x"}`, http.StatusConflict, "path_outside_project")
	if got := h.refused(); len(got) != 1 || !strings.Contains(got[0], ".coord/debug.jsonl") {
		t.Fatalf("warnings %q", got)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "log")); string(b) != "theirs\n" {
		t.Fatalf("the file outside changed: %q", b)
	}
}

// TestTokenLinkedOutside: a token file that is a link out of the project
// (say, to a file whose content someone else knows) is not taken: the
// daemon does not start.
func TestTokenLinkedOutside(t *testing.T) {
	t.Parallel()
	dir, out := project(t), t.TempDir()
	os.WriteFile(filepath.Join(out, "known"), []byte("known-to-someone-else-0123456789\n"), 0o644)
	(&harness{t: t, dir: dir}).symlink(filepath.Join(out, "known"), ".coord/token")
	d, err := coord.New(coord.Config{Dir: dir, Listener: mustListen(t), Registry: filepath.Join(t.TempDir(), "p.json")})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Start(context.Background()); !errors.Is(err, atomicfile.ErrOutside) || !strings.Contains(err.Error(), "token") {
		t.Fatalf("start: %v", err)
	}
}
