package testkit

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// vectorLine is a line of a test vector block: four spaces, a name (words
// one space apart), two spaces or more, the value.
var vectorLine = regexp.MustCompile(`(?m)^    (\S+(?: \S+)*)  +(\S.*)$`)

// WireVectors reads the test vectors of the section heading (a "### "
// heading) of the document at path (docs/wire.md, 12. Test vectors): the
// indented lines "name  value" of its blocks, with \n in a value standing
// for a line feed. Tests check the code against the document itself, so
// that a peer written from the document agrees with the nodes.
func WireVectors(t testing.TB, path, heading string) map[string]string {
	t.Helper()
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n### "+heading+"\n")
	if !ok {
		t.Fatalf("%s has no section %q", path, heading)
	}
	section, _, _ = strings.Cut(section, "\n#")
	v := map[string]string{}
	for _, m := range vectorLine.FindAllStringSubmatch(section, -1) {
		v[m[1]] = strings.ReplaceAll(m[2], `\n`, "\n")
	}
	return v
}

// Vector is the value of name in vectors, which must be there.
func Vector(t testing.TB, vectors map[string]string, name string) string {
	t.Helper()
	s, ok := vectors[name]
	if !ok {
		t.Fatalf("no vector %q in %v", name, vectors)
	}
	return s
}
