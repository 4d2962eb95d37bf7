package coord_test

import (
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/mesh/coord"
	"github.com/agentmesh/mesh/internal/clock"
	"github.com/agentmesh/mesh/internal/testkit"
)

// TestTheExampleProject: the example project serves what its files say:
// statuses normalised, walls by wall_order, the roadmap in chain order,
// modules joined with their pages, docs with titles.
func TestTheExampleProject(t *testing.T) {
	t.Parallel()
	h := start(t, project(t), nil)
	s := h.state()
	if s.Cluster.ID != "acme-shop" || s.Cluster.Name != "Acme Shop" || s.Cluster.Type != "dev" || !s.Cluster.DebugEnabled ||
		s.Cluster.CheckInterval != 3600 || len(s.Cluster.Crons) != 1 {
		t.Fatalf("cluster %+v", s.Cluster)
	}
	if len(s.Warnings) != 0 {
		t.Fatalf("warnings %q", s.Warnings)
	}
	if got := ids(s.Roadmap.Initiatives); got != "auth,search,billing,onboarding" {
		t.Fatalf("roadmap order %s", got)
	}
	if in := s.initiative("auth"); in.Status != "active" || in.Title != "Sign-in and sessions" || len(in.Tasks) != 2 {
		t.Fatalf("auth %+v", in)
	}
	w := h.walls()
	if ids(w["active"]) != "auth" || ids(w["next"]) != "search" || ids(w["backlog"]) != "billing" || ids(w["archived"]) != "onboarding" {
		t.Fatalf("walls %v", w)
	}
	if len(s.Modules) != 2 || s.Modules[0].Name != "Shop API" || s.Modules[1].Name != "Dashboard" || s.Modules[1].Status != "next" {
		t.Fatalf("modules %+v", s.Modules)
	}
	if len(s.Docs) != 1 || s.Docs[0].Path != "docs/overview.md" || s.Docs[0].Title != "Architecture overview" {
		t.Fatalf("docs %+v", s.Docs)
	}
	var health struct {
		OK        bool   `json:"ok"`
		ClusterID string `json:"cluster_id"`
		Endpoint  string
		Standard  struct {
			Version any
			Latest  any
			Drift   bool
		}
		Paused   []string        `json:"paused_agent_types"`
		Features map[string]bool `json:"features"`
	}
	h.get("/health", &health)
	if !health.OK || health.ClusterID != "acme-shop" || health.Endpoint != h.url || health.Paused == nil || !health.Features["walls"] {
		t.Fatalf("health %+v", health)
	}
}

// TestEditingATaskRebuildsAndReconciles: a task file edited on disk is
// seen at the next poll (state.rebuilt on the socket, the new state on
// GET); when it was the initiative's last open task the initiative becomes
// done with completed_at, and reopening the task brings it back to active
// without completed_at. The initiative's file keeps every other byte.
func TestEditingATaskRebuildsAndReconciles(t *testing.T) {
	t.Parallel()
	h := start(t, project(t), nil)
	ws := h.socket()
	before := h.read("roadmap/initiatives/auth.md")

	h.write("roadmap/initiatives/auth/session-store.md", "---\nstatus: done\n---\n# Session store\n")
	h.poll()
	ev := ws.next("initiative.reconciled")
	if ev["id"] != "auth" || ev["status"] != "done" {
		t.Fatalf("reconciled %v", ev)
	}
	ws.next("state.rebuilt")
	auth := h.state().initiative("auth")
	if auth.Status != "done" || auth.Wall != "archived" || auth.CompletedAt != "2026-03-02T09:00:01Z" || auth.CommitSHA != "" {
		t.Fatalf("auth after its last task is done: %+v", auth)
	}
	want := strings.Replace(before, "status: in_progress\n", "status: done\n", 1)
	want = strings.Replace(want, "next: search\n", "next: search\ncompleted_at: \"2026-03-02T09:00:01Z\"\n", 1)
	if got := h.read("roadmap/initiatives/auth.md"); got != want {
		t.Fatalf("auth.md\n%s\nwant\n%s", got, want)
	}
	if ids(h.walls()["active"]) != "" {
		t.Fatal("a done initiative stayed on the active wall")
	}

	h.write("roadmap/initiatives/auth/login-form.md", "---\nstatus: in-progress\n---\n# Login form\n")
	h.poll()
	ws.next("state.rebuilt")
	auth = h.state().initiative("auth")
	if auth.Status != "active" || auth.CompletedAt != "" || auth.Wall != "active" {
		t.Fatalf("auth after a task reopened: %+v", auth)
	}
	if got, want := h.read("roadmap/initiatives/auth.md"), strings.Replace(before, "status: in_progress", "status: active", 1); got != want {
		t.Fatalf("auth.md\n%s\nwant\n%s", got, want)
	}
}

// TestReconcileRenumbersTheWallLeft: an initiative reconcile marks done
// leaves its wall, which is renumbered 0, 1, 2... without it; one it
// reopens leaves the archived wall, renumbered likewise. Files keep every
// other byte.
func TestReconcileRenumbersTheWallLeft(t *testing.T) {
	t.Parallel()
	dir := project(t)
	pre := &harness{t: t, dir: dir}
	pre.write("roadmap/initiatives/payments.md", "---\nstatus: active\nwall_order: 1\n---\n# Payments\n")
	pre.write("roadmap/initiatives/audit.md", "---\nstatus: blocked\nwall_order: 2\n---\n# Audit\n")
	pre.write("roadmap/initiatives/legacy.md", "---\nstatus: done\nwall_order: 3\n---\n# Legacy\n")
	pre.write("roadmap/initiatives/legacy/port.md", "---\nstatus: done\n---\n")
	h := start(t, dir, nil)
	if w := h.walls(); ids(w["active"]) != "auth,payments,audit" || ids(w["archived"]) != "onboarding,legacy" {
		t.Fatalf("walls before %v", w)
	}
	ws := h.socket()

	h.write("roadmap/initiatives/auth/session-store.md", "---\nstatus: done\n---\n# Session store\n")
	h.poll()
	ws.next("state.rebuilt")
	w := h.walls()
	if ids(w["active"]) != "payments,audit" || *w["active"][0].WallOrder != 0 || *w["active"][1].WallOrder != 1 {
		t.Fatalf("the active wall after auth was done: %+v", w["active"])
	}
	if got := h.read("roadmap/initiatives/audit.md"); got != "---\nstatus: blocked\nwall_order: 1\n---\n# Audit\n" {
		t.Fatalf("audit.md %q", got)
	}

	// Reopened, auth leaves the archived wall: onboarding 0, legacy 1.
	h.write("roadmap/initiatives/auth/session-store.md", "---\nstatus: active\n---\n# Session store\n")
	h.poll()
	ws.next("state.rebuilt")
	w = h.walls()
	if ids(w["archived"]) != "onboarding,legacy" || *w["archived"][1].WallOrder != 1 || ids(w["active"]) != "auth,payments,audit" {
		t.Fatalf("the walls after auth was reopened: %v", w)
	}
	if got := h.read("roadmap/initiatives/legacy.md"); got != "---\nstatus: done\nwall_order: 1\n---\n# Legacy\n" {
		t.Fatalf("legacy.md %q", got)
	}
}

// TestReconcileRecordsTheGitHead: in a git repository, an initiative that
// completes records the commit HEAD names.
func TestReconcileRecordsTheGitHead(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		if os.Getenv("MESH_REQUIRE_TOOLS") == "1" {
			t.Fatal("git is not installed, and MESH_REQUIRE_TOOLS=1")
		}
		t.Skip("git is not installed")
	}
	dir := project(t)
	git := func(args ...string) string {
		cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@example.com"}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_SYSTEM=/dev/null")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("init", "-q")
	git("add", ".")
	git("commit", "-qm", "start")
	head := git("rev-parse", "HEAD")
	h := start(t, dir, nil)
	h.write("roadmap/initiatives/search/index.md", "---\nstatus: done\n---\n")
	h.poll()
	testkit.Eventually(t, 10*time.Second, func() bool { return h.state().initiative("search").Status == "done" }, "timed out waiting for search done")
	if got := h.state().initiative("search"); got.CommitSHA != head || len(head) != 40 {
		t.Fatalf("search %+v, HEAD %s", got, head)
	}
}

// TestReorderAndArchive: a move renumbers the wall 0, 1, 2... and is
// announced on the socket; archiving sets done and archived; the files
// keep every byte outside the keys moved; bad requests are refused with
// their codes.
func TestReorderAndArchive(t *testing.T) {
	t.Parallel()
	h := start(t, project(t), nil)
	ws := h.socket()
	searchBefore := h.read("roadmap/initiatives/search.md")

	if code := h.do("POST", "/initiative/reorder", `{"id":"search","wall":"active","order":0}`, nil); code != http.StatusOK {
		t.Fatalf("reorder: %d", code)
	}
	ev := ws.next("initiative.reordered")
	if ev["id"] != "search" || ev["wall"] != "active" || ev["order"] != 0.0 {
		t.Fatalf("event %v", ev)
	}
	w := h.walls()
	if ids(w["active"]) != "search,auth" || *w["active"][0].WallOrder != 0 || *w["active"][1].WallOrder != 1 || ids(w["next"]) != "" {
		t.Fatalf("walls after the move: %+v", w)
	}
	if got := h.read("roadmap/initiatives/search.md"); got != strings.Replace(searchBefore, "status: next", "status: active", 1) {
		t.Fatalf("search.md:\n%s", got)
	}
	if got := h.read("roadmap/initiatives/auth.md"); !strings.Contains(got, "status: in_progress\nmodule: api\nwall_order: 1\nnext: search\n---\nCustomers") {
		t.Fatalf("auth.md:\n%s", got)
	}

	// Past the end is the end; archiving.
	h.do("POST", "/initiative/reorder", `{"id":"#Billing ","wall":"archived","order":99}`, nil)
	if ev := ws.next("initiative.reordered"); ev["id"] != "billing" || ev["order"] != 1.0 {
		t.Fatalf("event %v", ev)
	}
	w = h.walls()
	if ids(w["archived"]) != "onboarding,billing" || w["archived"][1].Status != "done" || !w["archived"][1].Archived || ids(w["backlog"]) != "" {
		t.Fatalf("walls after archiving: %+v", w)
	}
	if got := h.read("roadmap/initiatives/billing.md"); got != "---\nstatus: done\nmodule: api\nwall_order: 1\narchived: true\n---\n# Invoices and billing\n\nNo tasks yet.\n" {
		t.Fatalf("billing.md:\n%s", got)
	}

	// Back out of the archive: not archived, not done.
	h.do("POST", "/initiative/reorder", `{"id":"billing","wall":"backlog","order":0}`, nil)
	if got := h.read("roadmap/initiatives/billing.md"); got != "---\nstatus: backlog\nmodule: api\nwall_order: 0\n---\n# Invoices and billing\n\nNo tasks yet.\n" {
		t.Fatalf("billing.md:\n%s", got)
	}

	// The daemon's own writes are not announced again as a rebuild.
	h.poll()
	h.clk.Advance(20 * time.Second)
	for _, ev := range ws.until("heartbeat", nil) {
		if ev["type"] == "state.rebuilt" {
			t.Fatal("the daemon's own reorder was announced as a rebuild")
		}
	}

	h.wantError("POST", "/initiative/reorder", `{"id":"search","wall":"later","order":0}`, 400, "invalid_wall")
	h.wantError("POST", "/initiative/reorder", `{"id":"nope","wall":"active","order":0}`, 404, "initiative_not_found")
	h.wantError("POST", "/initiative/reorder", `{"id":"search","wall":"active","order":-1}`, 400, "invalid_request")
	h.wantError("POST", "/initiative/reorder", `{"id":"search","wall":"active"}`, 400, "invalid_request")
	h.wantError("POST", "/initiative/reorder", `{"id":"search","wall":"active","order":"first"}`, 400, "invalid_json")
	h.wantError("POST", "/initiative/reorder", `[]`, 400, "invalid_json")
	h.wantError("GET", "/initiative/reorder", ``, 405, "method_not_allowed")
	h.write("roadmap/initiatives/broken.md", "---\nstatus: [active\n---\n")
	h.wantError("POST", "/initiative/reorder", `{"id":"broken","wall":"active","order":0}`, 409, "frontmatter_malformed")
	if got := h.read("roadmap/initiatives/broken.md"); got != "---\nstatus: [active\n---\n" {
		t.Fatalf("a malformed file was rewritten: %q", got)
	}
}

// TestArchivingLeavesNoTasklessLeaderAndRenumbers: when the initiative
// that pointed to one without tasks is archived, the one without tasks
// does not lead the roadmap (the chain starts at the next one with tasks),
// and the wall the archived initiative left is renumbered 0, 1, 2...
func TestArchivingLeavesNoTasklessLeaderAndRenumbers(t *testing.T) {
	t.Parallel()
	h := start(t, project(t), nil)
	h.write("roadmap/initiatives/auth.md", strings.Replace(h.read("roadmap/initiatives/auth.md"), "next: search", "next: billing", 1))
	h.write("roadmap/initiatives/billing.md", "---\nstatus: backlog\nnext: search\n---\n# Invoices\n")
	h.write("roadmap/initiatives/payments.md", "---\nstatus: active\nwall_order: 1\n---\n# Payments\n")
	h.write("roadmap/initiatives/audit.md", "---\nstatus: active\nwall_order: 2\n---\n# Audit\n")
	h.poll()
	testkit.Eventually(t, 10*time.Second, func() bool { return h.state().initiative("payments").ID != "" }, "timed out waiting for the new roadmap")
	if got := ids(h.state().Roadmap.Initiatives); got != "auth,billing,search,payments,audit,onboarding" {
		t.Fatalf("roadmap before %s", got)
	}
	if code := h.do("POST", "/initiative/reorder", `{"id":"auth","wall":"archived","order":0}`, nil); code != http.StatusOK {
		t.Fatalf("archive: %d", code)
	}
	// Only search has tasks among those not done: it leads, and those
	// without tasks follow by wall_order.
	if got := ids(h.state().Roadmap.Initiatives); got != "search,payments,audit,billing,onboarding,auth" {
		t.Fatalf("roadmap after the archive %s", got)
	}
	w := h.walls()
	if ids(w["active"]) != "payments,audit" || *w["active"][0].WallOrder != 0 || *w["active"][1].WallOrder != 1 {
		t.Fatalf("the active wall after auth left it: %+v", w["active"])
	}
	if got := h.read("roadmap/initiatives/audit.md"); got != "---\nstatus: active\nwall_order: 1\n---\n# Audit\n" {
		t.Fatalf("audit.md %q", got)
	}
}

// TestTheRealClockPolls: with the system clock (a short poll), an edit is
// picked up without anyone moving time.
func TestTheRealClockPolls(t *testing.T) {
	t.Parallel()
	h := start(t, project(t), func(c *coord.Config) { c.Clock, c.Poll = clock.Real{}, 20*time.Millisecond })
	ws := h.socket()
	h.write("roadmap/initiatives/billing.md", "---\nstatus: next\n---\n")
	ws.next("state.rebuilt")
	if got := h.state().initiative("billing"); got.Status != "next" {
		t.Fatalf("billing %+v", got)
	}
}
