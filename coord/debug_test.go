package coord_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/mesh/coord"
)

type tail struct {
	Events []struct {
		TS      time.Time
		Src     string
		Lvl     string
		Tag     string
		Msg     string
		Conv    string
		AgentID string `json:"agent_id"`
		Data    map[string]any
	}
	Retained float64 `json:"retained_secs"`
}

// TestDebugLogRedactsNestedSecrets: secret-like keys at any depth, in any
// spelling, are replaced before the event is stored, in memory and on
// disk; other values are kept.
func TestDebugLogRedactsNestedSecrets(t *testing.T) {
	t.Parallel()
	h := start(t, project(t), nil)
	body := `{"src":"dashboard","lvl":"warn","tag":"chat","msg":"turn failed","conv":"c1","agent_id":"a1",
		"data":{"Authorization":"Bearer abc","request":{"headers":[{"X-Api-Key":"k1"},{"accept":"json"}],
		"user":{"password":"hunter2","name":"ann"},"session_token":"t","apikey":"k2","client secret":"s","bearer":"b"}}}`
	var ok struct{ Stored bool }
	if code := h.do("POST", "/debug/log", body, &ok); code != 202 || !ok.Stored {
		t.Fatalf("POST /debug/log: %d %+v", code, ok)
	}
	var tl tail
	h.get("/debug/tail?tags=chat", &tl)
	if len(tl.Events) != 1 {
		t.Fatalf("events %+v", tl.Events)
	}
	ev := tl.Events[0]
	got := fmt.Sprint(ev.Data)
	want := "map[Authorization:[REDACTED] request:map[apikey:[REDACTED] bearer:[REDACTED] client secret:[REDACTED] " +
		"headers:[map[X-Api-Key:[REDACTED]] map[accept:json]] session_token:[REDACTED] user:map[name:ann password:[REDACTED]]]]"
	if got != want || ev.Src != "dashboard" || ev.Lvl != "warn" || ev.Conv != "c1" || ev.AgentID != "a1" || !ev.TS.Equal(t0) {
		t.Fatalf("event %+v\ndata %s\nwant %s", ev, got, want)
	}
	disk, err := os.ReadFile(filepath.Join(h.dir, ".coord", "debug.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"abc", "k1", "k2", "hunter2", `"t"`, `"s"`, `"b"`} {
		if strings.Contains(string(disk), secret) {
			t.Fatalf("the secret %s reached the disk: %s", secret, disk)
		}
	}
	h.wantError("POST", "/debug/log", `{"lvl":"loud","msg":"x"}`, 400, "invalid_level")
	h.wantError("POST", "/debug/log", `{"ts":"yesterday","msg":"x"}`, 400, "invalid_request")
	h.wantError("GET", "/debug/tail?min_level=chatty", "", 400, "invalid_level")
	h.wantError("GET", "/debug/tail?last_secs=-1", "", 400, "invalid_request")
}

// TestDebugTailAndRetention: tail filters by age, tag and level; events
// past the age limit are trimmed every 50 appends and at boot; a disabled
// debug log stores nothing.
func TestDebugTailAndRetention(t *testing.T) {
	t.Parallel()
	dir := project(t)
	h := start(t, dir, nil)
	post := func(lvl, tag, msg string) {
		t.Helper()
		if code := h.do("POST", "/debug/log", fmt.Sprintf(`{"lvl":%q,"tag":%q,"msg":%q}`, lvl, tag, msg), nil); code != 202 {
			t.Fatalf("POST: %d", code)
		}
	}
	post("debug", "ui", "old")
	h.clk.Advance(10 * time.Minute)
	post("info", "ui", "a")
	post("error", "cron", "b")
	post("warn", "ui", "c")
	count := func(q string) int {
		var tl tail
		h.get("/debug/tail"+q, &tl)
		return len(tl.Events)
	}
	for q, want := range map[string]int{"": 3, "?last_secs=3600": 5, "?tags=ui": 2, "?tags=ui,cron&min_level=warn": 2,
		"?min_level=error&last_secs=3600": 1} {
		if got := count(q); got != want {
			t.Errorf("tail%s: %d events, want %d", q, got, want)
		}
	}
	var tl tail
	h.get("/debug/tail", &tl)
	if tl.Retained != 600 {
		t.Fatalf("retained %v s, want 600", tl.Retained)
	}

	// 25 minutes on, the first event is past 30 minutes: the 50th append
	// trims it.
	h.clk.Advance(25 * time.Minute)
	for i := 0; count("?last_secs=100000") > 0 && i < 50; i++ {
		post("debug", "fill", "x")
		if count("?tags=ui&last_secs=100000&min_level=debug") == 2 {
			break
		}
	}
	if n := count("?tags=ui&last_secs=100000"); n != 2 {
		t.Fatalf("%d ui events after the trim, want 2 (the old one gone)", n)
	}
	h.d.Close()

	// At boot, with debug now off: 20 minutes on, a, b, c are past 30.
	h.write("cluster.yaml", strings.Replace(h.read("cluster.yaml"), "enabled: true", "enabled: false", 1))
	h2 := start(t, dir, func(c *coord.Config) { c.Clock = h.clk })
	h.clk.Advance(20 * time.Minute)
	h2.d.Close()
	h3 := start(t, dir, func(c *coord.Config) { c.Clock = h.clk })
	var ok struct {
		Stored bool
		Reason string
	}
	if code := h3.do("POST", "/debug/log", `{"msg":"dropped","data":{"token":"x"}}`, &ok); code != 202 || ok.Stored || ok.Reason == "" {
		t.Fatalf("POST with debug off: %d %+v", code, ok)
	}
	h3.get("/debug/tail?last_secs=100000", &tl)
	for _, ev := range tl.Events {
		if ev.Tag == "ui" || ev.Tag == "cron" || ev.Msg == "dropped" {
			t.Fatalf("kept %+v", ev)
		}
	}
}

// TestDebugTrimByAgeWhateverTheClientDate: a client's event dated before
// the window does not survive the trim behind younger events, and one
// dated in the future is kept as of its arrival, so it ages out too.
func TestDebugTrimByAgeWhateverTheClientDate(t *testing.T) {
	t.Parallel()
	dir := project(t)
	h := start(t, dir, nil)
	post := func(body string) {
		t.Helper()
		if code := h.do("POST", "/debug/log", body, nil); code != 202 {
			t.Fatalf("POST %s: %d", body, code)
		}
	}
	post(`{"tag":"recent","msg":"a"}`)
	post(fmt.Sprintf(`{"tag":"old","msg":"from a client clock","ts":%q}`, t0.Add(-31*time.Minute).Format(time.RFC3339)))
	post(fmt.Sprintf(`{"tag":"future","msg":"ahead","ts":%q}`, t0.Add(24*time.Hour).Format(time.RFC3339)))
	var tl tail
	h.get("/debug/tail?tags=future&last_secs=100000", &tl)
	if len(tl.Events) != 1 || !tl.Events[0].TS.Equal(t0) {
		t.Fatalf("future event %+v", tl.Events)
	}
	h.get("/debug/tail?last_secs=100000", &tl)
	if tl.Retained != 31*60 {
		t.Fatalf("retained %v s, want the oldest event's age", tl.Retained)
	}
	for range 50 {
		post(`{"tag":"fill","msg":"x"}`)
	}
	tags := func() map[string]int {
		var tl tail
		h.get("/debug/tail?last_secs=100000", &tl)
		n := map[string]int{}
		for _, ev := range tl.Events {
			n[ev.Tag]++
		}
		return n
	}
	if n := tags(); n["old"] != 0 || n["recent"] != 1 || n["future"] != 1 {
		t.Fatalf("after the trim of the 50th append: %v", n)
	}
	disk, _ := os.ReadFile(filepath.Join(dir, ".coord", "debug.jsonl"))
	if strings.Contains(string(disk), "from a client clock") {
		t.Fatal("the old event is still on disk")
	}
	// 31 minutes on, at the next start, the one dated ahead is gone too.
	h.d.Close()
	h.clk.Advance(31 * time.Minute)
	h2 := start(t, dir, func(c *coord.Config) { c.Clock = h.clk })
	h = h2
	if n := tags(); n["future"] != 0 || n["recent"] != 0 {
		t.Fatalf("after the trim at start: %v", n)
	}
}
