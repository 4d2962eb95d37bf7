package coord_test

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/mesh/coord"
)

// withAgent configures the fake coding agent of testdata, which reads
// FAKE_AGENT_* variables of the environment.
func withAgent(edit func(*coord.Config)) func(*coord.Config) {
	return func(c *coord.Config) {
		path, _ := filepath.Abs(filepath.Join("testdata", "fake-agent.sh"))
		c.Chat.AgentCmd = "bash " + path
		c.Chat.TurnTimeout = time.Minute
		c.AgentEnv = []string{"default", "FAKE_AGENT_*"}
		if edit != nil {
			edit(c)
		}
	}
}

type dispatched struct {
	Started   bool
	Conv      string
	ItemID    string `json:"item_id"`
	StreamID  string `json:"stream_id"`
	Position  int
	ResumesAt *time.Time                      `json:"resumes_at"`
	Skipped   []struct{ Name, Reason string } `json:"skipped_uploads"`
}

// send dispatches text to conv and checks the status.
func (h *harness) send(conv, text string, want int) dispatched {
	h.t.Helper()
	var d dispatched
	body := fmt.Sprintf(`{"conv":%q,"text":%q}`, conv, text)
	if code := h.do("POST", "/chat/dispatch", body, &d); code != want {
		h.t.Fatalf("dispatch %q: %d, want %d", text, code, want)
	}
	return d
}

type message struct {
	ID       int64
	Role     string
	Text     string
	StreamID string `json:"stream_id"`
	Error    string
}

type page struct {
	Messages   []message
	HasMore    bool  `json:"has_more"`
	NextBefore int64 `json:"next_before"`
}

func (h *harness) messages(conv, query string) page {
	h.t.Helper()
	var p page
	h.get("/chat/conv/"+conv+"/messages"+query, &p)
	return p
}

type convView struct {
	ID                string
	Live, Waiting     bool
	Coordinating      bool
	LastFinalStreamID string `json:"last_final_stream_id"`
	Anchor            *struct{ Initiative, Task string }
	Queued            int
}

func (h *harness) conv(id string) convView {
	h.t.Helper()
	var s struct{ Conversations []convView }
	h.get("/chat/snapshot", &s)
	for _, c := range s.Conversations {
		if c.ID == id {
			return c
		}
	}
	h.t.Fatalf("conversation %s is not in the snapshot", id)
	return convView{}
}

// roles is the timeline as "role:text|..." with texts trimmed.
func roles(ms []message) string {
	var s []string
	for _, m := range ms {
		s = append(s, m.Role+":"+strings.TrimSpace(m.Text))
	}
	return strings.Join(s, "|")
}

// TestChatTurn: a message starts a turn at once (200); the agent's lines
// stream as deltas, the live flag goes up and down, and the answer is in
// the timeline and the snapshot.
func TestChatTurn(t *testing.T) {
	t.Parallel()
	h := start(t, project(t), withAgent(nil))
	ws := h.socket()
	d := h.send("c1", "lines 3", http.StatusOK)
	if !d.Started || d.StreamID == "" {
		t.Fatalf("dispatch %+v", d)
	}
	evs := ws.until("conv.stream.final", nil)
	var deltas []string
	for _, ev := range evs {
		if ev["type"] == "conv.stream.delta" && ev["stream_id"] == d.StreamID {
			deltas = append(deltas, ev["text"].(string))
		}
	}
	if evs[0]["type"] != "conv.activity" || evs[0]["live"] != true || strings.Join(deltas, "") != "line 1\nline 2\nline 3\n" {
		t.Fatalf("events %v", evs)
	}
	if ev := ws.next("conv.activity"); ev["live"] != false || ev["conv"] != "c1" {
		t.Fatalf("activity %v", ev)
	}
	if got := roles(h.messages("c1", "").Messages); got != "operator:lines 3|agent:line 1\nline 2\nline 3" {
		t.Fatalf("timeline %q", got)
	}
	if c := h.conv("c1"); c.Live || c.Waiting || c.LastFinalStreamID != d.StreamID {
		t.Fatalf("snapshot %+v", c)
	}
	var hl struct{ Features map[string]bool }
	h.get("/health", &hl)
	if !hl.Features["chat"] {
		t.Fatal("health says chat is off")
	}
}

// TestChatQueueAcrossRestart: a message sent during a live turn is queued
// (202) and starts when the turn ends (queue.item.sent). A daemon stopped
// during a turn runs that turn again when it starts, then the queue; the
// history of before the restart stays.
func TestChatQueueAcrossRestart(t *testing.T) {
	t.Parallel()
	dir := project(t)
	gate := filepath.Join(t.TempDir(), "gate")
	h := start(t, dir, withAgent(nil))
	ws := h.socket()
	first := h.send("c1", "gate "+gate, http.StatusOK)
	ws.next("conv.stream.delta")
	if d := h.send("c1", "echo second", http.StatusAccepted); d.Started || d.Position != 1 {
		t.Fatalf("queued %+v", d)
	}
	var q struct {
		Live  struct{ ID, Text string }
		Queue []struct{ ID, Text string }
	}
	h.get("/chat/conv/c1/queue", &q)
	if q.Live.ID != first.ItemID || len(q.Queue) != 1 || q.Queue[0].Text != "echo second" {
		t.Fatalf("queue %+v", q)
	}
	if c := h.conv("c1"); !c.Live || !c.Waiting || c.Queued != 1 {
		t.Fatalf("snapshot %+v", c)
	}
	h.d.Close()

	h = start(t, dir, withAgent(nil))
	ws = h.socket()
	os.WriteFile(gate, nil, 0o644)
	ev := ws.next("queue.item.sent")
	if ev["conv"] != "c1" || ev["item_id"] == first.ItemID {
		t.Fatalf("sent %v", ev)
	}
	ws.next("conv.stream.final")
	if ev := ws.next("conv.activity"); ev["live"] != false {
		t.Fatalf("activity %v", ev)
	}
	want := "operator:gate " + gate + "|system:the daemon stopped during this turn; it runs again|operator:gate " + gate +
		"|agent:waiting\nreleased|operator:echo second|agent:second"
	if got := roles(h.messages("c1", "").Messages); got != want {
		t.Fatalf("timeline\n%q\nwant\n%q", got, want)
	}
}

// TestChatRetries: transient upstream errors, as the coding agents report
// them, are retried for the same turn after min(2^n, 8) s of the clock, at
// most twice, and never stored as the answer; other errors end the turn at
// once, and a local failure whose output merely holds numbers and words of
// upstream errors (a traceback's "line 503", "429 bytes", "overloaded.md")
// runs the agent once and is shown as agent_failed with its exit status.
func TestChatRetries(t *testing.T) {
	t.Parallel()
	// Three rate limits in a row would pause the agent (TestPausedAgentTypes).
	h := start(t, project(t), withAgent(func(c *coord.Config) { c.Chat.PauseAfter = 4 }))
	ws := h.socket()
	for _, tc := range []struct {
		kind      string
		fails     int
		retries   int
		wantError string
	}{
		{"thinking", 2, 2, ""},
		{"rate", 1, 1, ""},
		{"server", 2, 2, ""},
		{"overloaded", 2, 2, ""},
		{"gateway", 2, 2, ""},
		{"rate", 3, 2, "rate_limited"},
		{"prompt", 1, 0, "prompt_too_long"},
		{"request", 1, 0, "request_error"},
		{"crash", 1, 0, "agent_failed"},
		{"traceback", 3, 0, "agent_failed"},
	} {
		conv := fmt.Sprintf("%s-%d", tc.kind, tc.fails)
		t.Run(conv, func(t *testing.T) {
			h.send(conv, fmt.Sprintf("flaky %s %d", tc.kind, tc.fails), http.StatusOK)
			for n := 1; n <= tc.retries; n++ {
				ev := ws.next("conv.stream.retry")
				if ev["conv"] != conv || ev["attempt"] != float64(n) || ev["retry_in_secs"] != float64(min(1<<n, 8)) {
					t.Fatalf("retry %v", ev)
				}
				h.clk.Advance(time.Duration(1<<n) * time.Second)
			}
			evs := ws.until("conv.stream.final", nil)
			for _, ev := range evs {
				if ev["type"] == "conv.stream.retry" {
					t.Fatalf("a retry more: %v", ev)
				}
			}
			if ev := evs[len(evs)-1]; ev["conv"] != conv || ev["error"] != tc.wantError {
				t.Fatalf("final %v", ev)
			}
			ms := h.messages(conv, "").Messages
			if len(ms) != 2 || strings.Contains(ms[1].Text, "partial") || ms[1].Error != tc.wantError {
				t.Fatalf("timeline %+v", ms)
			}
			if tc.wantError == "" && ms[1].Text != fmt.Sprintf("answer of attempt %d\n", tc.fails) {
				t.Fatalf("answer %q", ms[1].Text)
			}
			if tc.kind == "traceback" && !strings.HasPrefix(ms[1].Text, "the agent failed: agent_failed (exit status 1)\nTraceback") {
				t.Fatalf("failure %q", ms[1].Text)
			}
		})
	}
}

// TestChatHangingAgent: an agent that does not end is killed at the turn
// timeout of the clock; the turn fails with timeout and is not retried.
func TestChatHangingAgent(t *testing.T) {
	t.Parallel()
	h := start(t, project(t), withAgent(nil))
	ws := h.socket()
	h.send("c1", "hang", http.StatusOK)
	ws.next("conv.stream.delta")
	h.clk.Advance(time.Minute)
	if ev := ws.next("conv.stream.final"); ev["error"] != "timeout" {
		t.Fatalf("final %v", ev)
	}
	if ms := h.messages("c1", "").Messages; len(ms) != 2 || ms[1].Role != "system" || ms[1].Error != "timeout" {
		t.Fatalf("timeline %+v", ms)
	}
}

// TestChatAnchors: anchor lines bind the conversation to an initiative or
// a task of the roadmap and are not shown; unknown ones are rejected.
func TestChatAnchors(t *testing.T) {
	t.Parallel()
	h := start(t, project(t), withAgent(nil))
	ws := h.socket()
	for _, tc := range []struct{ target, event, initiative, task string }{
		{" #Auth ", "conv.anchor_bound", "auth", ""},
		{"auth/Login-Form", "conv.anchor_bound", "auth", "login-form"},
		{"nope", "conv.anchor_rejected", "auth", "login-form"},
		{"auth/nope", "conv.anchor_rejected", "auth", "login-form"},
		{"none", "conv.anchor_cleared", "", ""},
	} {
		h.send("c1", "anchor "+tc.target, http.StatusOK)
		seen := false
		for _, ev := range ws.until("conv.stream.final", nil) {
			if ev["type"] == "conv.stream.delta" && strings.Contains(ev["text"].(string), "anchor") {
				t.Fatalf("anchor line streamed: %v", ev)
			}
			seen = seen || ev["type"] == tc.event && ev["conv"] == "c1"
		}
		c := h.conv("c1")
		if !seen || tc.initiative == "" && c.Anchor != nil || tc.initiative != "" && (c.Anchor == nil || c.Anchor.Initiative != tc.initiative || c.Anchor.Task != tc.task) {
			t.Fatalf("%s: event %s seen %v, anchor %+v", tc.target, tc.event, seen, c.Anchor)
		}
		ws.next("conv.activity")
	}
	if ms := h.messages("c1", "").Messages; ms[1].Text != "on it\ndone\n" {
		t.Fatalf("answer %q", ms[1].Text)
	}
}

// TestChatUploads: usable attachments reach the agent; the others come
// back in skipped_uploads with why.
func TestChatUploads(t *testing.T) {
	t.Parallel()
	h := start(t, project(t), withAgent(func(c *coord.Config) { c.Chat.AttachmentMax = 16 }))
	ws := h.socket()
	b64 := base64.StdEncoding.EncodeToString
	body := fmt.Sprintf(`{"conv":"c1","text":"attach","attachments":[{"name":"../notes.txt","data":%q},{"name":"bad","data":"***"},{"name":"none","data":""},{"name":"big","data":%q}]}`,
		b64([]byte("hello")), b64([]byte(strings.Repeat("x", 17))))
	var d dispatched
	if code := h.do("POST", "/chat/dispatch", body, &d); code != http.StatusOK {
		t.Fatalf("dispatch %d", code)
	}
	if got := fmt.Sprint(d.Skipped); got != "[{bad decode_failed} {none empty} {big too_large}]" {
		t.Fatalf("skipped %s", got)
	}
	ws.next("conv.stream.final")
	if ms := h.messages("c1", "").Messages; ms[1].Text != "q1-0-notes.txt: hello\n" {
		t.Fatalf("answer %q", ms[1].Text)
	}
}

// TestChatErrors: bad requests get clear errors.
func TestChatErrors(t *testing.T) {
	t.Parallel()
	off := start(t, project(t), nil)
	off.wantError("POST", "/chat/dispatch", `{"conv":"c1","text":"hi"}`, http.StatusServiceUnavailable, "chat_disabled")
	gate := filepath.Join(t.TempDir(), "gate")
	h := start(t, project(t), withAgent(func(c *coord.Config) { c.Chat.QueueMax = 1 }))
	t.Cleanup(func() { os.WriteFile(gate, nil, 0o644) })
	for _, tc := range []struct {
		body   string
		status int
		code   string
	}{
		{`{"conv":"../x","text":"hi"}`, http.StatusBadRequest, "invalid_conv"},
		{`{"conv":"c1","text":"  "}`, http.StatusBadRequest, "invalid_request"},
		{`{"conv":"c1","text":3}`, http.StatusBadRequest, "invalid_json"},
		{`[]`, http.StatusBadRequest, "invalid_json"},
	} {
		h.wantError("POST", "/chat/dispatch", tc.body, tc.status, tc.code)
	}
	h.send("c1", "gate "+gate, http.StatusOK)
	h.send("c1", "echo 2", http.StatusAccepted)
	h.wantError("POST", "/chat/dispatch", `{"conv":"c1","text":"echo 3"}`, http.StatusTooManyRequests, "queue_full")
	h.wantError("GET", "/chat/conv/nope/messages", "", http.StatusNotFound, "conv_not_found")
	h.wantError("GET", "/chat/conv/nope/queue", "", http.StatusNotFound, "conv_not_found")
	h.wantError("GET", "/chat/conv/c1/messages?limit=0", "", http.StatusBadRequest, "invalid_request")
	h.wantError("GET", "/chat/conv/c1/messages?before=x", "", http.StatusBadRequest, "invalid_request")
}

// TestChatPages: the history comes in pages, newest first, each oldest
// first.
func TestChatPages(t *testing.T) {
	t.Parallel()
	h := start(t, project(t), withAgent(nil))
	ws := h.socket()
	for i := range 3 {
		h.send("c1", fmt.Sprint("echo ", i), http.StatusOK)
		ws.next("conv.stream.final")
		ws.next("conv.activity")
	}
	p := h.messages("c1", "?limit=4")
	if !p.HasMore || len(p.Messages) != 4 || p.Messages[0].ID != 3 || p.NextBefore != 3 {
		t.Fatalf("page 1 %+v", p)
	}
	p = h.messages("c1", fmt.Sprint("?limit=4&before=", p.NextBefore))
	if p.HasMore || roles(p.Messages) != "operator:echo 0|agent:0" {
		t.Fatalf("page 2 %+v", p)
	}
}

// TestChatOnlyRefusedAttachments: a message without text whose attachments
// were all refused is answered no_content, with why each was refused; the
// agent does not run and no conversation is made.
func TestChatOnlyRefusedAttachments(t *testing.T) {
	t.Parallel()
	h := start(t, project(t), withAgent(func(c *coord.Config) { c.Chat.AttachmentMax = 16 }))
	ws := h.socket()
	body := fmt.Sprintf(`{"conv":"c1","text":" ","attachments":[{"name":"bad","data":"***"},{"name":"none","data":""},{"name":"big","data":%q}]}`,
		base64.StdEncoding.EncodeToString([]byte(strings.Repeat("x", 17))))
	var e struct {
		Code, Detail string
		Skipped      []struct{ Name, Reason string } `json:"skipped_uploads"`
	}
	if code := h.do("POST", "/chat/dispatch", body, &e); code != http.StatusBadRequest || e.Code != "no_content" || e.Detail == "" {
		t.Fatalf("dispatch: %d %+v", code, e)
	}
	if got := fmt.Sprint(e.Skipped); got != "[{bad decode_failed} {none empty} {big too_large}]" {
		t.Fatalf("skipped %s", got)
	}
	var s struct{ Conversations []convView }
	h.get("/chat/snapshot", &s)
	if len(s.Conversations) != 0 {
		t.Fatalf("conversations %+v", s.Conversations)
	}
	h.wantError("GET", "/chat/conv/c1/messages", "", http.StatusNotFound, "conv_not_found")
	// The next message of the socket is this one's: nothing ran before.
	h.send("c2", "echo hi", http.StatusOK)
	if ev := ws.next("conv.activity"); ev["conv"] != "c2" {
		t.Fatalf("activity %v", ev)
	}
}

// TestPausedAgentTypes: an agent type whose attempts are rate-limited
// three times in a row is paused for 5 minutes of the clock: /health
// names it and says when it resumes, its new messages wait (202, with
// resumes_at) without running the agent, other types go on, and at the end
// of the pause its waiting messages run.
func TestPausedAgentTypes(t *testing.T) {
	t.Parallel()
	h := start(t, project(t), withAgent(nil))
	ws := h.socket()
	dispatch := func(conv, agent, text string, want int) dispatched {
		t.Helper()
		var d dispatched
		if code := h.do("POST", "/chat/dispatch", fmt.Sprintf(`{"conv":%q,"agent_id":%q,"text":%q}`, conv, agent, text), &d); code != want {
			t.Fatalf("dispatch %s: %d, want %d", text, code, want)
		}
		return d
	}
	type health struct {
		Paused []string             `json:"paused_agent_types"`
		Until  map[string]time.Time `json:"paused_until"`
	}
	dispatch("c1", "claude-1", "flaky rate 9", http.StatusOK)
	for n := 1; n <= 2; n++ {
		ws.next("conv.stream.retry")
		h.clk.Advance(time.Duration(1<<n) * time.Second)
	}
	ev := ws.next("agent_type.paused")
	resumes := t0.Add(6*time.Second + 5*time.Minute)
	if ev["agent_type"] != "claude" || ev["resumes_at"] != resumes.Format(time.RFC3339) {
		t.Fatalf("paused %v", ev)
	}
	if ev := ws.next("conv.stream.final"); ev["conv"] != "c1" || ev["error"] != "rate_limited" {
		t.Fatalf("final %v", ev)
	}
	var hl health
	h.get("/health", &hl)
	if fmt.Sprint(hl.Paused) != "[claude]" || !hl.Until["claude"].Equal(resumes) {
		t.Fatalf("health %+v", hl)
	}

	// Another instance of the type waits; another type runs.
	d := dispatch("c2", "Claude-2", "echo waited", http.StatusAccepted)
	if d.Started || d.Position != 1 || d.ResumesAt == nil || !d.ResumesAt.Equal(resumes) {
		t.Fatalf("dispatch while paused %+v", d)
	}
	dispatch("c3", "codex-1", "echo other", http.StatusOK)
	if ev := ws.next("conv.stream.final"); ev["conv"] != "c3" {
		t.Fatalf("final %v", ev)
	}
	if c := h.conv("c2"); c.Live || !c.Waiting || len(h.messages("c2", "").Messages) != 0 {
		t.Fatalf("c2 while paused %+v", c)
	}

	h.clk.Advance(5 * time.Minute)
	if ev := ws.next("agent_type.resumed"); ev["agent_type"] != "claude" {
		t.Fatalf("resumed %v", ev)
	}
	if ev := ws.next("conv.stream.final"); ev["conv"] != "c2" || ev["error"] != "" {
		t.Fatalf("final %v", ev)
	}
	if got := roles(h.messages("c2", "").Messages); got != "operator:echo waited|agent:waited" {
		t.Fatalf("c2 %s", got)
	}
	hl = health{}
	h.get("/health", &hl)
	if len(hl.Paused) != 0 || len(hl.Until) != 0 {
		t.Fatalf("health after the pause %+v", hl)
	}
}
