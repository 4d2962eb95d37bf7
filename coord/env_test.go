package coord_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/mesh/coord"
	"github.com/agentmesh/mesh/internal/testkit"
)

// fakeKey stands for a coding agent's credential in the daemon's
// environment.
const fakeKey = "sk-ant-api03-0123456789abcdefghijklmnopqrstuvwxyz"

// withEnv sets the daemon's environment for an environment test: a
// credential an agent needs, the daemon's own MESH_* variables, a variable
// nobody allowed and one --agent-env allows.
func withEnv(t *testing.T) {
	t.Setenv("ANTHROPIC_API_KEY", fakeKey)
	t.Setenv("MESH_COORD_SITE_URL", "https://site.example")
	t.Setenv("MESH_DEVICE_ID", "daemon-box")
	t.Setenv("CLOUD_DEPLOY_SECRET", "do-not-pass-this-on")
	t.Setenv("EXTRA_TOOL_HOME", "/opt/tool")
}

// vars reads "NAME=value" lines into a map.
func vars(text string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			out[k] = v
		}
	}
	return out
}

// checkEnv checks what an agent or a job saw.
func checkEnv(t *testing.T, who string, env map[string]string, extra map[string]string) {
	t.Helper()
	for k, v := range map[string]string{"ANTHROPIC_API_KEY": fakeKey, "EXTRA_TOOL_HOME": "/opt/tool", "PROJECT_STAGE": "dev", "HOME": os.Getenv("HOME")} {
		if env[k] != v {
			t.Errorf("%s: %s=%q, want %q", who, k, env[k], v)
		}
	}
	for k, v := range extra {
		if env[k] != v {
			t.Errorf("%s: %s=%q, want %q", who, k, env[k], v)
		}
	}
	if env["PATH"] == "" {
		t.Errorf("%s: no PATH", who)
	}
	for _, k := range []string{"MESH_COORD_SITE_URL", "MESH_DEVICE_ID", "CLOUD_DEPLOY_SECRET", "FAKE_AGENT_GATE"} {
		if _, ok := env[k]; ok {
			t.Errorf("%s: %s was passed on", who, k)
		}
	}
}

// TestAgentAndCronEnvironment: agent turns and crons get the variables
// --agent-env allows (the default list and more), cluster.yaml's env and
// (turns) their MESH_COORD_* variables; not the daemon's own MESH_*
// variables, nor any other.
func TestAgentAndCronEnvironment(t *testing.T) { // not parallel: it sets the environment
	withEnv(t)
	dir := project(t)
	(&harness{t: t, dir: dir}).write("cluster.yaml", `id: env
crons_owner: test-box
env: {PROJECT_STAGE: dev}
crons:
  - {id: env, schedule: "* * * * *", cmd: "env | sort", env: {JOB_ONLY: "yes"}}
`)
	h := start(t, dir, withAgent(func(c *coord.Config) { c.AgentEnv = []string{"default", "EXTRA_*"} }))
	ws := h.socket()
	h.send("c1", "env", http.StatusOK)
	ws.next("conv.stream.final")
	checkEnv(t, "the agent", vars(h.messages("c1", "").Messages[1].Text), map[string]string{"MESH_COORD_CONV": "c1", "MESH_COORD_ATTEMPT": "0"})

	var r struct {
		Runs []struct{ Status, Output string }
	}
	h.advanceUntil("a run of env", func() bool {
		h.get("/crons/env/runs", &r)
		return len(r.Runs) == 1 && r.Runs[0].Status == "succeeded"
	})
	checkEnv(t, "the cron", vars(r.Runs[0].Output), map[string]string{"JOB_ONLY": "yes"})
	if strings.Contains(r.Runs[0].Output, "MESH_") {
		t.Errorf("the cron saw MESH_ variables:\n%s", r.Runs[0].Output)
	}

	// Without EXTRA_*, the default list alone: no EXTRA_TOOL_HOME.
	h.d.Close()
	h = start(t, dir, withAgent(nil))
	ws = h.socket()
	h.send("c2", "env", http.StatusOK)
	ws.next("conv.stream.final")
	if env := vars(h.messages("c2", "").Messages[1].Text); env["EXTRA_TOOL_HOME"] != "" || env["ANTHROPIC_API_KEY"] != fakeKey {
		t.Fatalf("default list: %v", env)
	}
}

// TestDebugLogRedactsOutput: what the agent printed, as its failure's end
// in the debug log and in the timeline's system message, and what a client
// posts, are stored without the secrets of the environment, token-shaped
// strings or bearer tokens; the log file on disk never holds them.
func TestDebugLogRedactsOutput(t *testing.T) { // not parallel: it sets the environment
	withEnv(t)
	dir := project(t)
	h := start(t, dir, withAgent(nil))
	ws := h.socket()
	h.send("c1", "leak", http.StatusOK)
	if ev := ws.next("conv.stream.final"); ev["error"] != "agent_failed" {
		t.Fatalf("final %v", ev)
	}
	sys := h.messages("c1", "").Messages[1]
	if sys.Role != "system" || sys.Error != "agent_failed" || !strings.HasPrefix(sys.Text, "the agent failed: agent_failed (exit status 3)\n") ||
		!strings.Contains(sys.Text, "ANTHROPIC_API_KEY is [REDACTED]") || !strings.Contains(sys.Text, "Bearer [REDACTED]") ||
		strings.Contains(sys.Text, fakeKey) || strings.Contains(sys.Text, "abcdefghijklmnopqrstuvwxyz") {
		t.Fatalf("the failure in the timeline: %+v", sys)
	}
	body := `{"tag":"ui","msg":"the agent said ` + fakeKey + `","data":{"output":"export CLOUD_DEPLOY_SECRET=do-not-pass-this-on; gh auth ghp_abcdefghijklmnopqrstuvwxyz0123456789"}}`
	if code := h.do("POST", "/debug/log", body, nil); code != http.StatusAccepted {
		t.Fatalf("POST /debug/log: %d", code)
	}
	var tl tail
	testkit.Eventually(t, 10*time.Second, func() bool {
		h.get("/debug/tail?tags=chat,ui", &tl)
		return len(tl.Events) == 2
	}, "timed out waiting for the turn's end in the debug log")
	failed, ui := tl.Events[0], tl.Events[1]
	if failed.Tag != "chat" {
		failed, ui = ui, failed
	}
	if failed.Data["error"] != "agent_failed" || !strings.Contains(failed.Data["detail"].(string), "ANTHROPIC_API_KEY is [REDACTED]") ||
		!strings.Contains(failed.Data["detail"].(string), "Bearer [REDACTED]") {
		t.Fatalf("the failure in the debug log: %+v", failed)
	}
	if ui.Msg != "the agent said [REDACTED]" ||
		ui.Data["output"] != "export CLOUD_DEPLOY_SECRET=[REDACTED]; gh auth [REDACTED]" {
		t.Fatalf("the client's event: %+v", ui)
	}
	disk, _ := os.ReadFile(filepath.Join(dir, ".coord", "debug.jsonl"))
	for _, secret := range []string{fakeKey, "do-not-pass-this-on", "abcdefghijklmnopqrstuvwxyz", "ghp_"} {
		if strings.Contains(string(disk), secret) {
			t.Fatalf("%s reached the debug log on disk", secret)
		}
	}

}
