package roadmap

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Status values.
const (
	Backlog = "backlog"
	Next    = "next"
	Active  = "active"
	Blocked = "blocked"
	Done    = "done"
)

// Limits on what is read: a roadmap is text written by people.
const (
	MaxFileSize = 1 << 20
	MaxFiles    = 10000
)

// Dir is the roadmap folder of a project, and its parts.
const (
	Dir            = "roadmap"
	ModulesDir     = "modules"
	InitiativesDir = "initiatives"
)

// NormalizeStatus maps a frontmatter status to one of the five values:
// in_progress and in-progress are active; unknown or missing is backlog.
func NormalizeStatus(s string) string {
	switch v := strings.ToLower(strings.TrimSpace(s)); v {
	case Backlog, Next, Active, Blocked, Done:
		return v
	case "in_progress", "in-progress":
		return Active
	}
	return Backlog
}

// Page is what modules, initiatives and tasks share: a markdown file.
type Page struct {
	ID     string `json:"id"`
	Title  string `json:"title"`
	Status string `json:"status"`
	// File is the path relative to the project folder, with slashes.
	File    string    `json:"file"`
	Updated time.Time `json:"updated"`
	// Error is set when the frontmatter is malformed: the page is shown
	// with default fields and is never rewritten.
	Error string `json:"error,omitempty"`
	path  string
	fm    Frontmatter
}

// Task is one task of an initiative.
type Task struct {
	Page
	CompletedAt string `json:"completed_at,omitempty"`
}

// Initiative is an initiative and its tasks.
type Initiative struct {
	Page
	Module      string `json:"module,omitempty"`
	Wall        string `json:"wall"`
	WallOrder   *int   `json:"wall_order,omitempty"`
	Archived    bool   `json:"archived"`
	Next        string `json:"next,omitempty"`
	CompletedAt string `json:"completed_at,omitempty"`
	CommitSHA   string `json:"commit_sha,omitempty"`
	Tasks       []Task `json:"tasks"`
}

// Roadmap is a project's roadmap as read from disk.
type Roadmap struct {
	Modules     []Page        `json:"modules"`
	Initiatives []*Initiative `json:"initiatives"`
	Warnings    []string      `json:"-"`
	root        string
}

// Load reads the roadmap under project. A missing roadmap folder is an
// empty roadmap; unreadable or malformed files become warnings.
func Load(project string) *Roadmap {
	r := &Roadmap{root: project, Modules: []Page{}, Initiatives: []*Initiative{}}
	base := filepath.Join(project, Dir)
	for _, p := range r.pages(filepath.Join(base, ModulesDir)) {
		p.Status = NormalizeStatus(p.fm.String("status"))
		r.Modules = append(r.Modules, p)
	}
	for _, p := range r.pages(filepath.Join(base, InitiativesDir)) {
		in := newInitiative(p)
		for _, tp := range r.pages(strings.TrimSuffix(p.path, ".md")) {
			t := Task{Page: tp, CompletedAt: tp.fm.String("completed_at")}
			t.Status = NormalizeStatus(tp.fm.String("status"))
			in.Tasks = append(in.Tasks, t)
		}
		r.Initiatives = append(r.Initiatives, in)
	}
	r.Initiatives = Order(r.Initiatives)
	return r
}

func newInitiative(p Page) *Initiative {
	in := &Initiative{Page: p, Module: p.fm.String("module"), Archived: p.fm.Bool("archived"),
		Next: strings.ToLower(strings.TrimSpace(p.fm.String("next"))), CompletedAt: p.fm.String("completed_at"),
		CommitSHA: p.fm.String("commit_sha"), Tasks: []Task{}}
	in.Status = NormalizeStatus(p.fm.String("status"))
	if n, ok := p.fm.Int("wall_order"); ok {
		in.WallOrder = &n
	}
	in.Wall = wallOf(in)
	return in
}

// pages reads the markdown files directly in dir, sorted by id.
func (r *Roadmap) pages(dir string) []Page {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			r.warn("%s: %v", r.rel(dir), err)
		}
		return nil
	}
	var out []Page
	seen := map[string]string{}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || strings.HasPrefix(name, ".") || !strings.HasSuffix(name, ".md") {
			continue
		}
		if r.files() >= MaxFiles {
			r.warn("%s: more than %d roadmap files; the rest are ignored", r.rel(dir), MaxFiles)
			break
		}
		id := strings.ToLower(strings.TrimSuffix(name, ".md"))
		if other, dup := seen[id]; dup {
			r.warn("%s: id %q is also %s; ignored", r.rel(filepath.Join(dir, name)), id, other)
			continue
		}
		seen[id] = name
		if p, ok := r.page(filepath.Join(dir, name), id); ok {
			out = append(out, p)
		}
	}
	return out
}

func (r *Roadmap) files() int {
	n := len(r.Modules)
	for _, in := range r.Initiatives {
		n += 1 + len(in.Tasks)
	}
	return n
}

func (r *Roadmap) page(path, id string) (Page, bool) {
	p := Page{ID: id, Title: id, File: r.rel(path), path: path}
	st, err := os.Stat(path)
	if err == nil && st.Size() > MaxFileSize {
		err = fmt.Errorf("larger than %d bytes", MaxFileSize)
	}
	var b []byte
	if err == nil {
		b, err = os.ReadFile(path)
	}
	if err != nil {
		r.warn("%s: %v; ignored", p.File, err)
		return p, false
	}
	p.Updated = st.ModTime().UTC()
	fm, err := ParseFrontmatter(b)
	if err != nil {
		p.Error = err.Error()
		r.warn("%s: %v; read with default fields and never rewritten", p.File, err)
		return p, true
	}
	p.fm = fm
	if t := fm.String("title"); t != "" {
		p.Title = t
	} else if h := Heading(fm.Body); h != "" {
		p.Title = h
	}
	return p, true
}

// Heading is the text of the first "# " line of a markdown body.
func Heading(body []byte) string {
	for _, l := range strings.SplitN(string(body[:min(len(body), 4096)]), "\n", 64) {
		if t, ok := strings.CutPrefix(strings.TrimSpace(l), "# "); ok {
			return strings.TrimSpace(t)
		}
	}
	return ""
}

func (r *Roadmap) rel(path string) string {
	if rel, err := filepath.Rel(r.root, path); err == nil {
		return filepath.ToSlash(rel)
	}
	return path
}

func (r *Roadmap) warn(format string, args ...any) {
	r.Warnings = append(r.Warnings, fmt.Sprintf(format, args...))
}

// Find returns the initiative id, or nil.
func (r *Roadmap) Find(id string) *Initiative {
	for _, in := range r.Initiatives {
		if in.ID == id {
			return in
		}
	}
	return nil
}

// Fingerprint summarises the files under the given paths of project
// (names, sizes, modification times), so that a poll can tell whether
// anything changed without reading them.
func Fingerprint(project string, paths ...string) string {
	h := fnv.New128a()
	n := 0
	for _, p := range paths {
		filepath.WalkDir(filepath.Join(project, p), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			if n++; n > 4*MaxFiles {
				return filepath.SkipAll
			}
			if info, err := d.Info(); err == nil {
				fmt.Fprintf(h, "%s\x00%d\x00%d\n", path, info.Size(), info.ModTime().UnixNano())
			}
			return nil
		})
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

// sortByWallOrder orders ins by wall_order, those without one last by id.
func sortByWallOrder(ins []*Initiative) {
	sort.SliceStable(ins, func(i, j int) bool { return beforeOnWall(ins[i], ins[j]) })
}

// beforeOnWall orders by wall_order, those without one last, then by id.
func beforeOnWall(x, y *Initiative) bool {
	a, b := x.WallOrder, y.WallOrder
	switch {
	case a != nil && b != nil && *a != *b:
		return *a < *b
	case (a == nil) != (b == nil):
		return a != nil
	}
	return x.ID < y.ID
}
