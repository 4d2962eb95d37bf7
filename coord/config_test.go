package coord_test

import (
	"slices"
	"strings"
	"testing"
)

// TestBadClusterYAMLAndFrontmatter: unknown and malformed values of
// cluster.yaml become warnings in /state with safe defaults; a file that is
// not YAML at all gives the defaults at boot, and while running keeps the
// configuration read before; a roadmap file with malformed frontmatter is
// listed with its error and default fields, and the daemon keeps serving.
func TestBadClusterYAMLAndFrontmatter(t *testing.T) {
	t.Parallel()
	dir := project(t)
	h := &harness{t: t, dir: dir}
	h.write("cluster.yaml", `
id: shop
colour: blue
portal:
  port: 99999
debug:
  enabled: maybe
daemon:
  auto_update_check_interval_sec: 5
storage:
  retention_days: -3
modules: oops
crons:
  - id: Bad_ID
    schedule: "* * * * *"
    cmd: "true"
  - id: hourly
    schedule: "@hourly"
    cmd: "true"
  - id: seconds
    schedule: "0 * * * * *"
    cmd: "true"
  - id: good
    schedule: "*/5 * * * *"
    cmd: "true"
    restart_policy: sometimes
  - id: good
    schedule: "* * * * *"
    cmd: "true"
  - just a string
`)
	h.write("roadmap/initiatives/broken.md", "---\nstatus: active\nwall_order: [\n---\n# Broken\n")
	h.write("roadmap/initiatives/twice.md", "---\nstatus: active\nstatus: done\n---\n")
	h = start(t, dir, nil)
	s := h.state()
	if s.Cluster.ID != "shop" || s.Cluster.Name != "shop" || s.Cluster.Type != "dev" || !s.Cluster.DebugEnabled || s.Cluster.CheckInterval != 60 {
		t.Fatalf("cluster %+v", s.Cluster)
	}
	if len(s.Cluster.Crons) != 1 || s.Cluster.Crons[0].ID != "good" {
		t.Fatalf("crons %+v", s.Cluster.Crons)
	}
	for _, want := range []string{`unknown key "colour"`, "portal.port 99999", "debug.enabled", "outside 60..86400",
		"retention_days -3", "modules must be a list", `"Bad_ID" is not kebab-case`, "character '@'", "6 fields",
		`restart_policy "sometimes"`, `id "good" is used twice`, "not a mapping", "crons_owner is not set",
		"roadmap/initiatives/broken.md: malformed frontmatter", "roadmap/initiatives/twice.md: malformed frontmatter: key \"status\" appears twice"} {
		if !slices.ContainsFunc(s.Warnings, func(w string) bool { return strings.Contains(w, want) }) {
			t.Errorf("no warning with %q in\n%s", want, strings.Join(s.Warnings, "\n"))
		}
	}
	if b := s.initiative("broken"); b.Status != "backlog" || b.Error == "" || b.Title != "broken" {
		t.Fatalf("broken %+v", b)
	}

	// Not YAML while running: the cluster stays as it was.
	ws := h.socket()
	h.write("cluster.yaml", "id: [unclosed\n")
	h.poll()
	ws.next("state.rebuilt")
	h.write("roadmap/initiatives/billing.md", "---\nstatus: next\n---\n")
	h.poll()
	ws.next("state.rebuilt")
	s = h.state()
	if s.Cluster.ID != "shop" || s.initiative("billing").Status != "next" ||
		!slices.ContainsFunc(s.Warnings, func(w string) bool { return strings.Contains(w, "keeping the configuration read before") }) {
		t.Fatalf("after a broken cluster.yaml: %+v %q", s.Cluster, s.Warnings)
	}
}

// TestClusterYAMLNotYAMLAtBoot: the daemon starts on the defaults.
func TestClusterYAMLNotYAMLAtBoot(t *testing.T) {
	t.Parallel()
	dir := project(t)
	(&harness{t: t, dir: dir}).write("cluster.yaml", ":\n\t- not yaml: [")
	h := start(t, dir, nil)
	if s := h.state(); s.Cluster.ID != "unknown" || s.Cluster.Name != "unknown" || len(s.Warnings) == 0 {
		t.Fatalf("state %+v", s)
	}
}
