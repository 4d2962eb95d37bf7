package wall

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// realTimeCalls are the functions of package time that read the real
// clock or wait on it.
var realTimeCalls = []string{"Now", "Since", "Until", "After", "AfterFunc", "NewTimer", "NewTicker", "Tick", "Sleep"}

// realTimeExceptions reads the functions that may read the real clock
// from doc.go ("One clock"): lines "- file.go (fn, fn), file.go (fn): why".
func realTimeExceptions(t *testing.T, doc string) map[string]bool {
	t.Helper()
	allowed := map[string]bool{}
	entry := regexp.MustCompile(`(\w+\.go) \(([\w, ]+)\)`)
	for _, line := range strings.Split(doc, "\n") {
		line = strings.TrimSpace(strings.TrimPrefix(line, "//"))
		if !strings.HasPrefix(line, "- ") {
			continue
		}
		head, _, _ := strings.Cut(line, ":")
		for _, m := range entry.FindAllStringSubmatch(head, -1) {
			for _, fn := range strings.Split(m[2], ",") {
				allowed[m[1]+" "+strings.TrimSpace(fn)] = true
			}
		}
	}
	if len(allowed) == 0 {
		t.Fatal("doc.go lists no exceptions to the one clock")
	}
	return allowed
}

// realTimeUses returns, for each function of the package's source in dir
// ("file.go fn"), the calls of realTimeCalls it holds ("time.Now").
func realTimeUses(t *testing.T, dir string) map[string][]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	uses := map[string][]string{}
	fset := token.NewFileSet()
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		name := timeImport(f)
		if name == "" {
			continue
		}
		for _, d := range f.Decls {
			fn := "(package level)"
			if fd, ok := d.(*ast.FuncDecl); ok {
				fn = fd.Name.Name
			}
			ast.Inspect(d, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if id, isID := sel.X.(*ast.Ident); isID && id.Name == name && slices.Contains(realTimeCalls, sel.Sel.Name) {
					k := filepath.Base(path) + " " + fn
					uses[k] = append(uses[k], "time."+sel.Sel.Name)
				}
				return true
			})
		}
	}
	return uses
}

// timeImport is the name under which f imports package time ("" if not).
func timeImport(f *ast.File) string {
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == "time" {
			if imp.Name != nil {
				return imp.Name.Name
			}
			return "time"
		}
	}
	return ""
}

// TestOneClock: the wall reads the real clock only where doc.go says it
// does, and everywhere doc.go says so.
func TestOneClock(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	allowed := realTimeExceptions(t, string(doc))
	uses := realTimeUses(t, ".")
	for fn, calls := range uses {
		if !allowed[fn] {
			t.Errorf("%s calls %s: read Config.Clock, or list it in doc.go (One clock) with the reason", fn, strings.Join(calls, ", "))
		}
	}
	for fn := range allowed {
		if uses[fn] == nil {
			t.Errorf("doc.go lists %s as reading the real clock, which it does not", fn)
		}
	}
}
