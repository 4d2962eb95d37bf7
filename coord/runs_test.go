package coord_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/mesh/internal/testkit"
)

type run struct {
	ID      string
	Conv    string
	AgentID string `json:"agent_id"`
	Tasks   []string
	Cursor  int
	Status  string
	Error   string
}

func (h *harness) createRun(body string) run {
	h.t.Helper()
	var r run
	if code := h.do("POST", "/runs", body, &r); code != http.StatusCreated {
		h.t.Fatalf("POST /runs %s: %d", body, code)
	}
	return r
}

func (h *harness) runs() []run {
	h.t.Helper()
	var l struct{ Runs []run }
	h.get("/runs", &l)
	return l.Runs
}

// untilRun waits for the run event typ of run id and returns it.
func (s *socket) untilRun(typ, id string) event {
	s.t.Helper()
	for {
		if ev := s.next(typ); ev["run_id"] == id {
			return ev
		}
	}
}

// TestStoryRun: a run sends its tasks one turn at a time to its
// conversation, advancing its cursor, and ends done; GET /runs lists it.
func TestStoryRun(t *testing.T) {
	t.Parallel()
	h := start(t, project(t), withAgent(nil))
	ws := h.socket()
	r := h.createRun(`{"conv":"story","agent_id":"dev-1","tasks":["#Auth/Login-Form","auth/session-store"]}`)
	if r.Status != "running" || r.Cursor != 0 || strings.Join(r.Tasks, ",") != "auth/login-form,auth/session-store" {
		t.Fatalf("created %+v", r)
	}
	if ev := ws.untilRun("run.progress", r.ID); ev["cursor"] != float64(1) || ev["task"] != "auth/session-store" {
		t.Fatalf("progress %v", ev)
	}
	ws.untilRun("run.done", r.ID)
	if l := h.runs(); len(l) != 1 || l[0].Status != "done" || l[0].Cursor != 2 || l[0].AgentID != "dev-1" {
		t.Fatalf("runs %+v", l)
	}
	ms := h.messages("story", "").Messages
	if len(ms) != 4 || ms[1].Text != "worked on auth/login-form\n" || ms[3].Text != "worked on auth/session-store\n" {
		t.Fatalf("timeline %+v", ms)
	}
	// An initiative alone runs its tasks that are not done.
	if r := h.createRun(`{"conv":"story2","initiative":"auth"}`); strings.Join(r.Tasks, ",") != "auth/session-store" {
		t.Fatalf("tasks %v", r.Tasks)
	}
}

// TestStoryRunFails: a task whose turn fails fails the run.
func TestStoryRunFails(t *testing.T) { // not parallel: it sets the environment
	t.Setenv("FAKE_AGENT_FAIL_TASK", "auth/session-store")
	h := start(t, project(t), withAgent(nil))
	ws := h.socket()
	r := h.createRun(`{"conv":"story","tasks":["auth/login-form","auth/session-store","search/index"]}`)
	ev := ws.untilRun("run.failed", r.ID)
	if ev["cursor"] != float64(1) || !strings.Contains(ev["error"].(string), "auth/session-store") {
		t.Fatalf("failed %v", ev)
	}
	if l := h.runs(); l[0].Status != "failed" || l[0].Cursor != 1 {
		t.Fatalf("runs %+v", l)
	}
	// The debug log has the run's lifecycle and its turns, by conversation.
	var tl tail
	h.get("/debug/tail?tags=runs,chat&min_level=warn", &tl)
	var got []string
	for _, ev := range tl.Events {
		got = append(got, ev.Tag+":"+ev.Msg+":"+ev.Conv)
	}
	if strings.Join(got, ",") != "chat:chat turn failed:story,runs:run.failed:story" {
		t.Fatalf("debug log %v", got)
	}
}

// TestStoryRunAcrossRestart: a run survives a restart: the daemon runs the
// interrupted task again and goes on. A cancelled run sends nothing more.
func TestStoryRunAcrossRestart(t *testing.T) { // not parallel: it sets the environment
	gate := filepath.Join(t.TempDir(), "gate")
	t.Setenv("FAKE_AGENT_GATE", gate)
	dir := project(t)
	h := start(t, dir, withAgent(nil))
	ws := h.socket()
	r := h.createRun(`{"conv":"story","tasks":["auth/login-form","auth/session-store"]}`)
	other := h.createRun(`{"conv":"other","tasks":["auth/login-form","search/index"]}`)
	testkit.Eventually(t, 10*time.Second, func() bool { return h.conv("story").Live && h.conv("other").Live }, "timed out waiting for both turns under way")
	if c := h.conv("story"); !c.Coordinating {
		t.Fatalf("snapshot %+v", c)
	}
	h.d.Close()

	h = start(t, dir, withAgent(nil))
	ws = h.socket()
	if l := h.runs(); len(l) != 2 || l[0].Status != "running" || l[1].Status != "running" {
		t.Fatalf("runs after restart %+v", l)
	}
	var c run
	if code := h.do("POST", "/runs/"+other.ID+"/cancel", "", &c); code != http.StatusOK || c.Status != "cancelled" {
		t.Fatalf("cancel %d %+v", code, c)
	}
	h.wantError("POST", "/runs/"+other.ID+"/cancel", "", http.StatusConflict, "run_ended")
	os.WriteFile(gate, nil, 0o644)
	ws.untilRun("run.done", r.ID)
	testkit.Eventually(t, 10*time.Second, func() bool { return !h.conv("other").Live }, "timed out waiting for the cancelled run's turn to end")
	if ms := h.messages("other", "").Messages; len(ms) != 4 || strings.Contains(ms[3].Text, "search/index") {
		t.Fatalf("the cancelled run went on: %+v", ms)
	}
	if ms := h.messages("story", "").Messages; len(ms) != 6 || ms[5].Text != "worked on auth/session-store\n" {
		t.Fatalf("timeline %+v", ms)
	}
	if c := h.conv("story"); c.Coordinating {
		t.Fatalf("snapshot %+v", c)
	}
}

// TestRunErrors: bad runs get clear errors.
func TestRunErrors(t *testing.T) {
	t.Parallel()
	h := start(t, project(t), withAgent(nil))
	for _, tc := range []struct {
		body   string
		status int
		code   string
	}{
		{`{"conv":"a b","tasks":["auth/login-form"]}`, http.StatusBadRequest, "invalid_conv"},
		{`{"conv":"s","tasks":["auth/nope"]}`, http.StatusNotFound, "task_not_found"},
		{`{"conv":"s","tasks":[]}`, http.StatusBadRequest, "invalid_request"},
		{`{"conv":"s","initiative":"billing"}`, http.StatusBadRequest, "invalid_request"},
		{`{"conv":"s","tasks":"auth/login-form"}`, http.StatusBadRequest, "invalid_json"},
	} {
		h.wantError("POST", "/runs", tc.body, tc.status, tc.code)
	}
	h.wantError("POST", "/runs/r9/cancel", "", http.StatusNotFound, "run_not_found")
}
