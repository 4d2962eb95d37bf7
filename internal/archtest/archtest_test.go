package archtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// rule is a row of the import rules table: the packages it covers
// (patterns, less the excepted ones) must not import the forbidden ones.
type rule struct {
	packages, except, forbidden []string
}

// pkg is what go list says of a package.
type pkg struct {
	ImportPath, Name, Doc string
	Imports, Deps         []string
}

// readRules parses the table under "### Import rules" in the markdown.
func readRules(md string) ([]rule, error) {
	_, rest, ok := strings.Cut(md, "\n### Import rules\n")
	if !ok {
		return nil, errors.New(`no "### Import rules" section`)
	}
	code := regexp.MustCompile("`([^`]+)`")
	var rules []rule
	inTable := false
	for _, line := range strings.Split(rest, "\n") {
		cells := strings.Split(strings.Trim(line, "| "), "|")
		switch {
		case !strings.HasPrefix(line, "|"):
			if inTable {
				return rules, nil
			}
			continue
		case len(cells) != 2:
			return nil, fmt.Errorf("row %q: want two cells", line)
		case strings.HasPrefix(strings.TrimSpace(cells[0]), "packages") || strings.HasPrefix(strings.TrimSpace(cells[0]), "---"):
			inTable = true
			continue
		}
		left, except, _ := strings.Cut(cells[0], " except ")
		r := rule{}
		for _, m := range code.FindAllStringSubmatch(left, -1) {
			r.packages = append(r.packages, m[1])
		}
		for _, m := range code.FindAllStringSubmatch(except, -1) {
			r.except = append(r.except, m[1])
		}
		for _, m := range code.FindAllStringSubmatch(cells[1], -1) {
			r.forbidden = append(r.forbidden, m[1])
		}
		if len(r.packages) == 0 || len(r.forbidden) == 0 {
			return nil, fmt.Errorf("row %q: a package and a forbidden import at least", line)
		}
		rules = append(rules, r)
	}
	return rules, nil
}

// goList lists the packages of the module in dir.
func goList(dir string) (module string, pkgs []pkg, err error) {
	cmd := exec.Command("go", "list", "-json=ImportPath,Name,Doc,Imports,Deps", "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err := cmd.Output()
	if err != nil {
		return "", nil, fmt.Errorf("go list in %s: %w", dir, err)
	}
	mod, err := exec.Command("go", "list", "-C", dir, "-m").Output()
	if err != nil {
		return "", nil, err
	}
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			return strings.TrimSpace(string(mod)), pkgs, nil
		} else if err != nil {
			return "", nil, err
		}
		pkgs = append(pkgs, p)
	}
}

// matches reports whether import path p matches pattern pat: "./x" is
// package x of module, "./x/..." x and below, "./..." every package of
// module; any other pattern names a package (or, with "/...", a tree)
// outside it.
func matches(module, pat, p string) bool {
	if rel, ok := strings.CutPrefix(pat, "./"); ok {
		pat = module + "/" + rel
	}
	if tree, ok := strings.CutSuffix(pat, "/..."); ok {
		return p == tree || strings.HasPrefix(p, tree+"/")
	}
	return p == pat
}

func matchesAny(module string, pats []string, p string) bool {
	return slices.ContainsFunc(pats, func(pat string) bool { return matches(module, pat, p) })
}

// violations lists what the packages break: a forbidden import (of this
// module through any import, of anything else directly), or no doc
// comment.
func violations(module string, pkgs []pkg, rules []rule) []string {
	var out []string
	for _, p := range pkgs {
		if p.Doc == "" {
			out = append(out, p.ImportPath+": no doc comment")
		}
		for _, r := range rules {
			if !matchesAny(module, r.packages, p.ImportPath) || matchesAny(module, r.except, p.ImportPath) {
				continue
			}
			for _, f := range r.forbidden {
				imports := p.Imports
				if strings.HasPrefix(f, "./") {
					imports = p.Deps
				}
				for _, imp := range imports {
					if matches(module, f, imp) {
						out = append(out, fmt.Sprintf("%s imports %s (forbidden: %s)", p.ImportPath, imp, f))
					}
				}
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func rulesOfTheArchitecture(t *testing.T) []rule {
	t.Helper()
	md, err := os.ReadFile("../../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	rules, err := readRules(string(md))
	if err != nil {
		t.Fatalf("docs/architecture.md: %v", err)
	}
	return rules
}

// TestArchitecture: the module keeps the import rules of
// docs/architecture.md, and every package has a doc comment.
func TestArchitecture(t *testing.T) {
	rules := rulesOfTheArchitecture(t)
	module, pkgs, err := goList("../..")
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) < 30 || len(rules) < 10 {
		t.Fatalf("read %d packages and %d rules: the listing or the table is not what it was", len(pkgs), len(rules))
	}
	for _, v := range violations(module, pkgs, rules) {
		t.Error(v)
	}
}

// TestArchitectureFixture: the same check finds each rule the module in
// testdata/broken breaks on purpose, and nothing else.
func TestArchitectureFixture(t *testing.T) {
	module, pkgs, err := goList("testdata/broken")
	if err != nil {
		t.Fatal(err)
	}
	got := violations(module, pkgs, rulesOfTheArchitecture(t))
	want := []string{
		"example.com/broken/store imports net/http (forbidden: net/http)",
		"example.com/broken/store: no doc comment",
		"example.com/broken/wall imports example.com/broken/registryapi (forbidden: ./registryapi)",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("violations of the fixture:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestReadRules(t *testing.T) {
	rules, err := readRules("x\n### Import rules\n\ntext\n\n| packages | must not import |\n|---|---|\n" +
		"| `./a`, `./b/...` | `./c`, `net/http` |\n| `./...` except `./cmd/x` | `./d/...` |\n\nafter\n| `./e` | `./f` |\n")
	want := []rule{{packages: []string{"./a", "./b/..."}, forbidden: []string{"./c", "net/http"}},
		{packages: []string{"./..."}, except: []string{"./cmd/x"}, forbidden: []string{"./d/..."}}}
	if err != nil || fmt.Sprint(rules) != fmt.Sprint(want) {
		t.Fatalf("readRules = %v, %v; want %v", rules, err, want)
	}
	for _, bad := range []string{"no section", "\n### Import rules\n| packages | must not import |\n|---|---|\n| `./a` |\n", "\n### Import rules\n|---|---|\n| `./a` | none |\n"} {
		if _, err := readRules(bad); err == nil {
			t.Errorf("readRules(%q) took it", bad)
		}
	}
}
