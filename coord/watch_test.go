package coord_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentmesh/mesh/coord"
	"github.com/agentmesh/mesh/coord/update"
	"github.com/agentmesh/mesh/internal/testkit"
)

// site stands in for the published standard and releases.
type site struct {
	mu                         sync.Mutex
	version, preamble, release string
	versionHits, heads, bodies int
	// now, if set, is the daemon's clock: bodyAt is when each download
	// was asked, by it.
	now    func() time.Time
	bodyAt []time.Time
}

func newSite(t *testing.T) (*site, string) {
	s := &site{version: "19", preamble: "Follow the standard.\n"}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		switch r.URL.Path {
		case "/standard/version":
			s.versionHits++
			fmt.Fprintln(w, s.version)
		case "/standard/agent-instructions.md":
			fmt.Fprint(w, s.preamble)
		case "/" + update.Artifact():
			if r.Header.Get("Range") != "" {
				s.heads++
			} else {
				s.bodies++
				if s.now != nil {
					s.bodyAt = append(s.bodyAt, s.now())
				}
			}
			fmt.Fprint(w, s.release)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return s, srv.URL
}

// publish makes body the release of version; a wrong checksum is
// announced when corrupt.
func (s *site) publish(version, body string, corrupt bool) {
	sum := sha256.Sum256([]byte(body))
	if corrupt {
		sum[0] ^= 1
	}
	s.mu.Lock()
	s.release = fmt.Sprintf("mesh-release %s %s\n%s", version, hex.EncodeToString(sum[:]), body)
	s.mu.Unlock()
}

func (s *site) count(n *int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return *n
}

func (s *site) set(f func()) {
	s.mu.Lock()
	f()
	s.mu.Unlock()
}

// withSite points the daemon at the site and at a stand-in executable.
func withSite(url, exe string) func(*coord.Config) {
	return withAgent(func(c *coord.Config) {
		c.SiteURL, c.InsecureSite, c.Executable, c.Heartbeat = url, true, exe, time.Hour
	})
}

// TestSelfUpdateFailureNamesNoSite: a site that cannot be reached fails
// a self-update with a fixed detail: the cause, which names the site's
// address and path, goes to the log only.
func TestSelfUpdateFailureNamesNoSite(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	addr := srv.Listener.Addr().String()
	srv.Close() // refuses connections from now on
	h := start(t, project(t), withSite("http://"+addr+"/private-mirror", filepath.Join(t.TempDir(), "mesh")))
	var e errBody
	if code := h.do("POST", "/self-update", "", &e); code != http.StatusBadGateway || e.Code != "update_failed" {
		t.Fatalf("self-update from an unreachable site: %d %+v", code, e)
	}
	if strings.Contains(e.Detail, addr) || strings.Contains(e.Detail, "private-mirror") {
		t.Fatalf("the answer names the site: %q", e.Detail)
	}
}

// setInterval makes the site checked every 60 s.
func setInterval(t *testing.T, dir string, autoUpdate bool) {
	h := &harness{t: t, dir: dir}
	c := strings.Replace(h.read("cluster.yaml"), "auto_update_check_interval_sec: 3600", "auto_update_check_interval_sec: 60", 1)
	h.write("cluster.yaml", strings.Replace(c, "auto_update: true", fmt.Sprint("auto_update: ", autoUpdate), 1))
}

// untilCount moves the clock 10 s at a time until *n reaches want.
func (h *harness) untilCount(s *site, n *int, want int) {
	h.t.Helper()
	testkit.Advance(h.t, 10*time.Second, h.clk, 10*time.Second, func() bool { return s.count(n) >= want },
		"timed out waiting for %d requests to the site", want)
}

// TestInstructionFiles: the per-tool files are rendered from the source,
// the gated two only from standard 19; an edit of the source is rendered
// within 3 s of the clock; the published preamble is refreshed into them,
// and drift is announced once when the pinned standard falls behind.
func TestInstructionFiles(t *testing.T) {
	t.Parallel()
	dir := project(t)
	setInterval(t, dir, false)
	fs := &harness{t: t, dir: dir}
	fs.write("agent-instructions.md", "Run the tests.\n")
	fs.write(".standard-version", "18\n")
	s, url := newSite(t)
	h := start(t, dir, withSite(url, filepath.Join(t.TempDir(), "mesh")))
	ws := h.socket()
	if got := h.read("CLAUDE.md"); !strings.HasSuffix(got, "\n\nRun the tests.\n") || strings.Contains(got, "preamble") {
		t.Fatalf("CLAUDE.md %q", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "GEMINI.md")); err == nil {
		t.Fatal("GEMINI.md written below standard 19")
	}
	h.write("agent-instructions.md", "Run the tests twice.\n")
	h.write(".standard-version", "19\n")
	h.clk.Advance(3 * time.Second)
	if ev := ws.next("agent_instructions.rendered"); fmt.Sprint(ev["files"]) != "[AGENTS.md CLAUDE.md .github/copilot-instructions.md GEMINI.md .cursor/rules/agent-instructions.mdc]" {
		t.Fatalf("rendered %v", ev)
	}
	if got := h.read(".cursor/rules/agent-instructions.mdc"); !strings.HasPrefix(got, "---\n") || !strings.HasSuffix(got, "Run the tests twice.\n") {
		t.Fatalf("mdc %q", got)
	}
	h.write("CLAUDE.md", "edited by hand\n")
	h.clk.Advance(3 * time.Second)
	if ev := ws.next("agent_instructions.rendered"); fmt.Sprint(ev["files"]) != "[CLAUDE.md]" || !strings.HasSuffix(h.read("CLAUDE.md"), "Run the tests twice.\n") {
		t.Fatalf("hand edit: %v", ev)
	}

	s.set(func() { s.version, s.preamble = "20", "Be kind.\n" })
	evs := ws.until("agent_instructions.rendered", func() { h.clk.Advance(10 * time.Second) })
	if !hasEvent(evs, "standard.drift", "local", 19.0) || !hasEvent(evs, "agent_instructions.preamble_refreshed", "", nil) {
		t.Fatalf("events %v", evs)
	}
	if got := h.read("AGENTS.md"); !strings.Contains(got, "<!-- standard-preamble:begin -->\nBe kind.\n<!-- standard-preamble:end -->") {
		t.Fatalf("AGENTS.md %q", got)
	}
	var hl struct {
		Standard struct {
			Version, Latest int
			Drift           bool
		}
		Features map[string]bool
	}
	h.get("/health", &hl)
	if hl.Standard.Version != 19 || hl.Standard.Latest != 20 || !hl.Standard.Drift || !hl.Features["instruction_render"] {
		t.Fatalf("health %+v", hl)
	}
	// Still behind at the next check: no second drift event; caught up,
	// then behind again: one more.
	h.untilCount(s, &s.versionHits, s.count(&s.versionHits)+1)
	h.write(".standard-version", "20\n")
	// Caught up once /health says so: a check reads the pinned version
	// after the site answered it, so the site's count alone is too early.
	testkit.Advance(t, 10*time.Second, h.clk, 10*time.Second, func() bool {
		h.get("/health", &hl)
		return !hl.Standard.Drift
	}, "timed out waiting for the project to catch up")
	h.write(".standard-version", "18\n")
	if ev := ws.until("standard.drift", func() { h.clk.Advance(10 * time.Second) }); ev[len(ev)-1]["local"] != 18.0 {
		t.Fatalf("drift %v", ev[len(ev)-1])
	}
}

func hasEvent(evs []event, typ, key string, val any) bool {
	for _, ev := range evs {
		if ev["type"] == typ && (key == "" || ev[key] == val) {
			return true
		}
	}
	return false
}

// TestSelfUpdate: POST /self-update installs a newer release over the
// executable and asks for a restart; while a chat is active it is
// deferred; a failed download leaves the executable alone.
func TestSelfUpdate(t *testing.T) {
	t.Parallel()
	s, url := newSite(t)
	exe := filepath.Join(t.TempDir(), "mesh")
	os.WriteFile(exe, []byte("old binary"), 0o755)
	h := start(t, project(t), withSite(url, exe))
	ws := h.socket()
	var res struct {
		Updated        bool
		Reason, Latest string
		Version        string
	}
	s.publish(coord.Version, "same binary", false)
	if code := h.do("POST", "/self-update", "", &res); code != http.StatusOK || res.Updated || res.Reason != "up_to_date" {
		t.Fatalf("up to date: %d %+v", code, res)
	}
	s.publish("go-99.0.0", "new binary", true)
	h.wantError("POST", "/self-update", "", http.StatusBadGateway, "update_failed")
	if b, _ := os.ReadFile(exe); string(b) != "old binary" {
		t.Fatalf("executable after a failed download: %q", b)
	}
	s.publish("go-99.0.0", "new binary", false)
	gate := filepath.Join(t.TempDir(), "gate")
	h.send("c1", "gate "+gate, http.StatusOK)
	if code := h.do("POST", "/self-update", "", &res); code != http.StatusAccepted || res.Reason != "deferred" {
		t.Fatalf("deferred: %d %+v", code, res)
	}
	if ev := ws.next("daemon.upgrade.deferred"); ev["latest"] != "go-99.0.0" {
		t.Fatalf("deferred %v", ev)
	}
	os.WriteFile(gate, nil, 0o644)
	testkit.Eventually(t, 10*time.Second, func() bool { return !h.conv("c1").Live }, "timed out waiting for the chat to end")
	select {
	case <-h.d.Restart():
		t.Fatal("restart asked before an update")
	default:
	}
	if code := h.do("POST", "/self-update", "", &res); code != http.StatusOK || !res.Updated || res.Latest != "go-99.0.0" {
		t.Fatalf("update: %d %+v", code, res)
	}
	info, err := os.Stat(exe)
	if b, _ := os.ReadFile(exe); err != nil || string(b) != "new binary" || info.Mode().Perm() != 0o755 {
		t.Fatalf("executable %q %v", b, info.Mode())
	}
	<-h.d.Restart()
}

// TestUpdateWatcher: the watcher checks every interval and tries a newer
// release at most once per 5-minute cooldown; auto_update: false stops it.
func TestUpdateWatcher(t *testing.T) {
	t.Parallel()
	for _, auto := range []bool{true, false} {
		t.Run(fmt.Sprint("auto_update=", auto), func(t *testing.T) {
			dir := project(t)
			setInterval(t, dir, auto)
			s, url := newSite(t)
			s.publish("go-99.0.0", "new binary", true)
			exe := filepath.Join(t.TempDir(), "mesh")
			os.WriteFile(exe, []byte("old binary"), 0o755)
			h := start(t, dir, withSite(url, exe))
			s.set(func() { s.now = h.clk.Now })
			h.untilCount(s, &s.versionHits, 2)
			if !auto {
				if s.count(&s.heads) != 0 {
					t.Fatal("auto_update: false, yet the release was read")
				}
				return
			}
			if s.count(&s.bodies) != 1 {
				t.Fatalf("%d downloads in the first two checks", s.count(&s.bodies))
			}
			h.untilCount(s, &s.bodies, 2)
			s.mu.Lock()
			since := s.bodyAt[1].Sub(s.bodyAt[0])
			s.mu.Unlock()
			if since < 4*time.Minute { // the cooldown is 5, from just before the first asks
				t.Fatalf("second attempt %s after the first", since)
			}
			if b, _ := os.ReadFile(exe); string(b) != "old binary" {
				t.Fatalf("executable %q", b)
			}
		})
	}
}

// TestUpdatedDaemonKeepsItsPort: the daemon that closes after installing
// a release hands its port to the one started next on the same project.
func TestUpdatedDaemonKeepsItsPort(t *testing.T) { // not parallel: its ports were free a moment ago
	s, url := newSite(t)
	s.publish("go-99.0.0", "new binary", false)
	dir, reg, base := clusterProject(t, "upd", 0), filepath.Join(t.TempDir(), "ports.json"), freeRange(t, 4)
	exe := filepath.Join(t.TempDir(), "mesh")
	edit := withSite(url, exe)
	onPorts := func(c *coord.Config) {
		edit(c)
		c.Listener, c.Registry, c.PortMin, c.PortMax = nil, reg, base, base+3
	}
	h := start(t, dir, onPorts)
	if code := h.do("POST", "/self-update", "", nil); code != http.StatusOK {
		t.Fatalf("update: %d", code)
	}
	<-h.d.Restart()
	h.d.Close()
	if again := start(t, dir, onPorts); again.url != h.url {
		t.Fatalf("restarted on %s, was %s", again.url, h.url)
	}
}
