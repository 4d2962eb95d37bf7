package coord_test

import (
	"compress/gzip"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/mesh/coord"
	"github.com/agentmesh/mesh/internal/testkit"
)

type storage struct {
	Conversations int
	TimelineBytes int64 `json:"timeline_bytes"`
	Archives      int
	RetentionDays int `json:"retention_days"`
}

func (h *harness) storage() storage {
	h.t.Helper()
	var s storage
	h.get("/storage", &s)
	return s
}

// TestArchives: the timeline of a conversation idle for the archive age
// is gzipped and the conversation leaves the snapshot; archives go after
// storage.retention_days; the storage report is measured at most every
// 30 s of the clock.
func TestArchives(t *testing.T) {
	t.Parallel()
	dir := project(t)
	cluster := (&harness{t: t, dir: dir}).read("cluster.yaml")
	(&harness{t: t, dir: dir}).write("cluster.yaml", strings.Replace(cluster, "retention_days: 0", "retention_days: 1", 1))
	h := start(t, dir, withAgent(func(c *coord.Config) {
		c.ArchiveAfter, c.Heartbeat = 2*time.Hour, 24*time.Hour
	}))
	ws := h.socket()
	h.send("c1", "echo archived words", http.StatusOK)
	ws.next("conv.activity")
	ws.next("conv.activity")
	if s := h.storage(); s.Conversations != 1 || s.TimelineBytes == 0 || s.Archives != 0 || s.RetentionDays != 1 {
		t.Fatalf("storage %+v", s)
	}
	h.send("c2", "echo later", http.StatusOK)
	ws.next("conv.stream.final")
	if s := h.storage(); s.Conversations != 1 {
		t.Fatalf("storage not cached: %+v", s)
	}
	h.clk.Advance(30 * time.Second)
	if s := h.storage(); s.Conversations != 2 {
		t.Fatalf("storage not measured again: %+v", s)
	}
	// c2 becomes idle an hour after c1.
	h.clk.Advance(time.Hour)
	h.send("c2", "echo later", http.StatusOK)
	ws.next("conv.stream.final")
	// Two hours on, c1 has been idle for longer than the archive age,
	// c2 for exactly that: c1 is archived, c2 is not.
	h.clk.Advance(2 * time.Hour)
	if ev := ws.next("conv.archived"); ev["conv"] != "c1" || h.conv("c2").ID != "c2" {
		t.Fatalf("archived %v", ev)
	}
	h.wantError("GET", "/chat/conv/c1/messages", "", http.StatusNotFound, "conv_not_found")
	archives, _ := filepath.Glob(filepath.Join(dir, ".coord", "chat-archive", "c1.*.jsonl.gz"))
	if len(archives) != 1 || !strings.Contains(gunzip(t, archives[0]), "archived words") {
		t.Fatalf("archives %v", archives)
	}
	if s := h.storage(); s.Archives == 0 {
		t.Fatalf("storage %+v", s)
	}
	testkit.Advance(t, 10*time.Second, h.clk, time.Hour, func() bool {
		_, err := os.Stat(archives[0])
		return os.IsNotExist(err)
	}, "timed out waiting for the archive to be deleted after a day")
	if h.clk.Now().Sub(t0) < 25*time.Hour {
		t.Fatalf("archive deleted at %s", h.clk.Now())
	}
}

func gunzip(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestTimelineRollsOver: a timeline past its size limit is archived whole
// and starts anew; message ids go on.
func TestTimelineRollsOver(t *testing.T) {
	t.Parallel()
	dir := project(t)
	h := start(t, dir, withAgent(func(c *coord.Config) { c.Chat.MaxTimeline = 400 }))
	ws := h.socket()
	h.send("c1", "echo "+strings.Repeat("a", 300), http.StatusOK)
	if ev := ws.next("conv.archived"); ev["conv"] != "c1" || ev["rolled"] != true {
		t.Fatalf("archived %v", ev)
	}
	ws.next("conv.activity")
	h.send("c1", "echo b", http.StatusOK)
	ws.next("conv.stream.final")
	if ms := h.messages("c1", "").Messages; len(ms) != 2 || ms[0].ID != 3 || roles(ms) != "operator:echo b|agent:b" {
		t.Fatalf("timeline %+v", ms)
	}
	archives, _ := filepath.Glob(filepath.Join(dir, ".coord", "chat-archive", "c1.*.jsonl.gz"))
	if len(archives) != 1 || strings.Count(gunzip(t, archives[0]), "\n") != 2 {
		t.Fatalf("archives %v", archives)
	}

	// A second roll-over within the same second (the clock stands still)
	// makes a second archive beside the first, not over it.
	h.send("c1", "echo "+strings.Repeat("c", 300), http.StatusOK)
	if ev := ws.next("conv.archived"); ev["archive"] != strings.TrimSuffix(filepath.Base(archives[0]), ".jsonl.gz")+"-2.jsonl.gz" {
		t.Fatalf("second archive %v beside %s", ev, archives[0])
	}
	if first := gunzip(t, archives[0]); !strings.Contains(first, strings.Repeat("a", 300)) || strings.Contains(first, "ccc") {
		t.Fatalf("the first archive changed: %q", first)
	}
	if again, _ := filepath.Glob(filepath.Join(dir, ".coord", "chat-archive", "c1.*.jsonl.gz")); len(again) != 2 {
		t.Fatalf("archives %v", again)
	}
}
