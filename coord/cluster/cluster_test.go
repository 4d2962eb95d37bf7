package cluster

import (
	"errors"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		check      func(Cluster) bool
		warn       string
	}{
		{"empty", "", func(c Cluster) bool {
			return c.ID == "unknown" && c.Name == "unknown" && c.Type == "dev" && c.DebugEnabled && c.AutoUpdate && c.CheckIntervalSec == 1800 && c.RetentionDays == 0
		}, ""},
		{"name defaults to id", "id: shop", func(c Cluster) bool { return c.ID == "shop" && c.Name == "shop" }, ""},
		{"legacy portal.port", "portal:\n  port: 5580", func(c Cluster) bool { return c.Port == 5580 }, ""},
		{"architect.port wins", "portal: {port: 5580}\narchitect: {port: 5581}", func(c Cluster) bool { return c.Port == 5581 }, ""},
		{"clamped high", "daemon: {auto_update_check_interval_sec: 100000}", func(c Cluster) bool { return c.CheckIntervalSec == 86400 }, "outside 60..86400"},
		{"not a number", "daemon: {auto_update_check_interval_sec: soon}", func(c Cluster) bool { return c.CheckIntervalSec == 1800 }, "must be an integer"},
		{"off switches", "debug: {enabled: false}\ndaemon: {auto_update: false}\nstorage: {retention_days: 30}",
			func(c Cluster) bool { return !c.DebugEnabled && !c.AutoUpdate && c.RetentionDays == 30 }, ""},
		{"modules", "modules: [api, {id: web, name: Web, path: apps/web}, {name: nameless}, api]",
			func(c Cluster) bool {
				return len(c.Modules) == 2 && c.Modules[0].Name == "api" && c.Modules[1].Path == "apps/web"
			}, "no id or a repeated one"},
		{"a section that is a string", "daemon: yes", func(c Cluster) bool { return c.AutoUpdate }, "daemon must be a mapping"},
		{"unknown nested key", "debug: {verbose: true}", func(c Cluster) bool { return c.DebugEnabled }, "unknown key debug.verbose"},
		{"id not a string", "id: [a]", func(c Cluster) bool { return c.ID == "unknown" }, "id must be a string"},
		{"env", "env: {STAGE: dev, PORT: 8080}", func(c Cluster) bool { return c.Env["STAGE"] == "dev" && c.Env["PORT"] == "8080" }, ""},
		{"env with a bad name", "env: {STAGE: dev, bad-name: x, LIST: [a]}", func(c Cluster) bool { return len(c.Env) == 1 }, "is not a variable name"},
		{"env not a mapping", "env: [A]", func(c Cluster) bool { return c.Env == nil }, "env must be a mapping"},
	} {
		c, warns, err := Parse([]byte(tc.yaml))
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if !tc.check(c) {
			t.Errorf("%s: %+v", tc.name, c)
		}
		joined := strings.Join(warns, "\n")
		if (tc.warn == "") != (len(warns) == 0) || !strings.Contains(joined, tc.warn) {
			t.Errorf("%s: warnings %q, want one with %q", tc.name, warns, tc.warn)
		}
	}
	for _, bad := range []string{"id: [", "- a\n- b", "just text"} {
		c, warns, err := Parse([]byte(bad))
		if !errors.Is(err, ErrSyntax) || c.ID != "unknown" || len(warns) != 1 {
			t.Errorf("%q: %v %+v %q", bad, err, c, warns)
		}
	}
}
