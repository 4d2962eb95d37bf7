// Package cluster reads a project's cluster.yaml: identity, preferred port,
// modules, debug, update-check and storage settings, and the cron jobs. A
// value that is unknown or malformed never fails the load: it becomes a
// warning and the field keeps its safe default.
package cluster

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"sort"

	"go.yaml.in/yaml/v3"

	"github.com/agentmesh/mesh/coord/cron"
)

// FileName is the cluster file at the top of a project folder.
const FileName = "cluster.yaml"

// MaxFileSize bounds cluster.yaml: it is configuration, not data.
const MaxFileSize = 1 << 20

// Update-check interval bounds and default, in seconds.
const (
	DefaultCheckInterval = 1800
	MinCheckInterval     = 60
	MaxCheckInterval     = 86400
)

// Cluster is cluster.yaml with its defaults filled in.
type Cluster struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	Type string `json:"type"`
	// Port is architect.port (or the legacy portal.port); 0 when unset.
	Port         int      `json:"port,omitempty"`
	Modules      []Module `json:"modules"`
	DebugEnabled bool     `json:"debug_enabled"`
	AutoUpdate   bool     `json:"auto_update"`
	// CheckIntervalSec is daemon.auto_update_check_interval_sec.
	CheckIntervalSec int `json:"auto_update_check_interval_sec"`
	// RetentionDays is storage.retention_days; 0 keeps archives forever.
	RetentionDays int        `json:"retention_days"`
	CronsOwner    string     `json:"crons_owner"`
	Crons         []cron.Job `json:"crons"`
	// Env is env: the variables set for agent turns and crons (a cron's
	// own env on top). Its values are not served: they may be secrets.
	Env map[string]string `json:"-"`
}

// Module is one entry of modules: a string is its id; a mapping may also
// give a name, a path in the project and a description.
type Module struct {
	ID          string `json:"id" yaml:"id"`
	Name        string `json:"name" yaml:"name"`
	Path        string `json:"path,omitempty" yaml:"path"`
	Description string `json:"description,omitempty" yaml:"description"`
}

// Default is the cluster of an empty cluster.yaml.
func Default() Cluster {
	return Cluster{ID: "unknown", Name: "unknown", Type: "dev", Modules: []Module{}, DebugEnabled: true,
		AutoUpdate: true, CheckIntervalSec: DefaultCheckInterval, Crons: []cron.Job{}}
}

// Load reads the cluster file at path. The error is for a file that cannot
// be read, or ErrSyntax (with the defaults and a warning) for one that is
// not a YAML mapping.
func Load(path string) (Cluster, []string, error) {
	f, err := os.Open(path)
	if err != nil {
		return Default(), nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return Default(), nil, err
	}
	if st.Size() > MaxFileSize {
		return Default(), []string{fmt.Sprintf("%s: larger than %d bytes; using the defaults", FileName, MaxFileSize)}, nil
	}
	b := make([]byte, st.Size())
	if _, err := f.ReadAt(b, 0); err != nil && st.Size() > 0 {
		return Default(), nil, err
	}
	return Parse(b)
}

// ErrSyntax marks the warning of a cluster file that is not YAML at all,
// which a running daemon treats differently from a bad value (it keeps the
// configuration it has).
var ErrSyntax = errors.New("cluster.yaml is not valid YAML")

// Parse reads cluster.yaml's bytes. Each problem is a warning naming the
// key; a file that is not a YAML mapping at all is also ErrSyntax, and
// gives the defaults.
func Parse(b []byte) (Cluster, []string, error) {
	p := &parser{c: Default()}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		err = fmt.Errorf("%w: %v", ErrSyntax, err)
		p.warn("%v; using the defaults", err)
		return p.c, p.warns, err
	}
	if len(doc.Content) == 0 {
		return p.c, p.warns, nil // empty file
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		err := fmt.Errorf("%w: the top level must be a mapping of keys", ErrSyntax)
		p.warn("%v; using the defaults", err)
		return p.c, p.warns, err
	}
	p.top(root)
	return p.c, p.warns, nil
}

type parser struct {
	c     Cluster
	warns []string
}

func (p *parser) warn(format string, args ...any) {
	p.warns = append(p.warns, fmt.Sprintf(format, args...))
}

func (p *parser) top(root *yaml.Node) {
	var legacyPort, port *yaml.Node
	name := ""
	eachKey(root, func(key string, v *yaml.Node) {
		switch key {
		case "id":
			if s, ok := p.str(key, v); ok && s != "" {
				p.c.ID = s
			}
		case "name":
			name, _ = p.str(key, v)
		case "type":
			if s, ok := p.str(key, v); ok && s != "" {
				p.c.Type = s
			}
		case "architect":
			p.section(key, v, map[string]func(string, *yaml.Node){"port": func(_ string, n *yaml.Node) { port = n }})
		case "portal":
			p.section(key, v, map[string]func(string, *yaml.Node){"port": func(_ string, n *yaml.Node) { legacyPort = n }})
		case "modules":
			p.modules(v)
		case "debug":
			p.section(key, v, map[string]func(string, *yaml.Node){"enabled": func(k string, n *yaml.Node) { p.boolean(k, n, &p.c.DebugEnabled) }})
		case "daemon":
			p.section(key, v, map[string]func(string, *yaml.Node){
				"auto_update":                    func(k string, n *yaml.Node) { p.boolean(k, n, &p.c.AutoUpdate) },
				"auto_update_check_interval_sec": p.checkInterval,
			})
		case "storage":
			p.section(key, v, map[string]func(string, *yaml.Node){"retention_days": p.retention})
		case "crons_owner":
			p.c.CronsOwner, _ = p.str(key, v)
		case "crons":
			p.crons(v)
		case "env":
			p.env(v)
		default:
			p.warn("%s: unknown key %q ignored", FileName, key)
		}
	})
	if name != "" {
		p.c.Name = name
	} else {
		p.c.Name = p.c.ID
	}
	switch {
	case port != nil:
		p.port("architect.port", port)
	case legacyPort != nil:
		p.port("portal.port", legacyPort)
	}
	if len(p.c.Crons) > 0 && p.c.CronsOwner == "" {
		p.warn("%s: crons_owner is not set: no daemon fires the crons", FileName)
	}
}

// eachKey calls f for each key of a mapping node, in file order.
func eachKey(m *yaml.Node, f func(string, *yaml.Node)) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		f(m.Content[i].Value, m.Content[i+1])
	}
}

func (p *parser) section(name string, v *yaml.Node, keys map[string]func(string, *yaml.Node)) {
	if v.Kind != yaml.MappingNode {
		if !isNull(v) {
			p.warn("%s: %s must be a mapping (line %d); ignored", FileName, name, v.Line)
		}
		return
	}
	eachKey(v, func(k string, n *yaml.Node) {
		if f, ok := keys[k]; ok {
			f(name+"."+k, n)
			return
		}
		known := make([]string, 0, len(keys))
		for k := range keys {
			known = append(known, k)
		}
		sort.Strings(known)
		p.warn("%s: unknown key %s.%s ignored (known: %v)", FileName, name, k, known)
	})
}

func isNull(v *yaml.Node) bool { return v.Kind == yaml.ScalarNode && v.Tag == "!!null" }

func (p *parser) str(key string, v *yaml.Node) (string, bool) {
	if v.Kind != yaml.ScalarNode || v.Tag == "!!null" {
		if !isNull(v) {
			p.warn("%s: %s must be a string (line %d); ignored", FileName, key, v.Line)
		}
		return "", false
	}
	return v.Value, true
}

func (p *parser) integer(key string, v *yaml.Node) (int, bool) {
	var n int
	if v.Kind != yaml.ScalarNode || v.Decode(&n) != nil {
		p.warn("%s: %s must be an integer (line %d); ignored", FileName, key, v.Line)
		return 0, false
	}
	return n, true
}

func (p *parser) boolean(key string, v *yaml.Node, dst *bool) {
	var b bool
	if v.Kind != yaml.ScalarNode || v.Decode(&b) != nil {
		p.warn("%s: %s must be true or false (line %d); keeping %v", FileName, key, v.Line, *dst)
		return
	}
	*dst = b
}

func (p *parser) port(key string, v *yaml.Node) {
	n, ok := p.integer(key, v)
	if !ok {
		return
	}
	if n < 1 || n > 65535 {
		p.warn("%s: %s %d is not a TCP port; ignored", FileName, key, n)
		return
	}
	p.c.Port = n
}

func (p *parser) checkInterval(key string, v *yaml.Node) {
	n, ok := p.integer(key, v)
	if !ok {
		return
	}
	clamped := min(max(n, MinCheckInterval), MaxCheckInterval)
	if clamped != n {
		p.warn("%s: %s %d is outside %d..%d; using %d", FileName, key, n, MinCheckInterval, MaxCheckInterval, clamped)
	}
	p.c.CheckIntervalSec = clamped
}

func (p *parser) retention(key string, v *yaml.Node) {
	n, ok := p.integer(key, v)
	if !ok {
		return
	}
	if n < 0 {
		p.warn("%s: %s %d is negative; keeping archived history forever", FileName, key, n)
		return
	}
	p.c.RetentionDays = n
}

func (p *parser) modules(v *yaml.Node) {
	if v.Kind != yaml.SequenceNode {
		if !isNull(v) {
			p.warn("%s: modules must be a list (line %d); ignored", FileName, v.Line)
		}
		return
	}
	seen := map[string]bool{}
	for _, item := range v.Content {
		var m Module
		switch item.Kind {
		case yaml.ScalarNode:
			m.ID = item.Value
		case yaml.MappingNode:
			if err := item.Decode(&m); err != nil {
				p.warn("%s: module at line %d: %v; skipped", FileName, item.Line, err)
				continue
			}
		}
		if m.ID == "" || seen[m.ID] {
			p.warn("%s: module at line %d has no id or a repeated one; skipped", FileName, item.Line)
			continue
		}
		seen[m.ID] = true
		if m.Name == "" {
			m.Name = m.ID
		}
		p.c.Modules = append(p.c.Modules, m)
	}
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// env reads env: a mapping of variable names to string values.
func (p *parser) env(v *yaml.Node) {
	if v.Kind != yaml.MappingNode {
		if !isNull(v) {
			p.warn("%s: env must be a mapping of variable names to values (line %d); ignored", FileName, v.Line)
		}
		return
	}
	p.c.Env = map[string]string{}
	eachKey(v, func(k string, n *yaml.Node) {
		s, ok := p.str("env."+k, n)
		switch {
		case !envName.MatchString(k):
			p.warn("%s: env: %q is not a variable name; ignored", FileName, k)
		case ok:
			p.c.Env[k] = s
		}
	})
}

func (p *parser) crons(v *yaml.Node) {
	if v.Kind != yaml.SequenceNode {
		if !isNull(v) {
			p.warn("%s: crons must be a list (line %d); ignored", FileName, v.Line)
		}
		return
	}
	seen := map[string]bool{}
	for _, item := range v.Content {
		var s cron.Spec
		if item.Kind != yaml.MappingNode {
			p.warn("%s: cron at line %d is not a mapping; skipped", FileName, item.Line)
			continue
		}
		if err := item.Decode(&s); err != nil {
			p.warn("%s: cron at line %d: %v; skipped", FileName, item.Line, err)
			continue
		}
		j, warns, err := cron.NewJob(s)
		p.warns = append(p.warns, warns...)
		switch {
		case err != nil:
			p.warn("%s: cron at line %d: %v; skipped", FileName, item.Line, err)
		case seen[j.ID]:
			p.warn("%s: cron at line %d: id %q is used twice; skipped", FileName, item.Line, j.ID)
		default:
			seen[j.ID] = true
			p.c.Crons = append(p.c.Crons, j)
		}
	}
}
