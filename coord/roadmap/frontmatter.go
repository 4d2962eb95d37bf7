package roadmap

import (
	"bytes"
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// A file's frontmatter is a YAML mapping between a first line "---" and the
// next line "---" (or "..."). The file may start with a UTF-8 byte order
// mark; lines may end in LF or CRLF.

var bom = []byte("\xef\xbb\xbf")

// block locates the frontmatter of b: the YAML between the delimiters is
// b[start:end], and the body starts at b[body:]. ok is false for a file
// without frontmatter (then the body starts after the byte order mark).
type block struct {
	start, end, body int
	ok               bool
	eol              string
}

// split finds the frontmatter block of b. A file that opens a block and
// never closes it is ErrFrontmatter.
func split(b []byte) (block, error) {
	off := 0
	if bytes.HasPrefix(b, bom) {
		off = len(bom)
	}
	first, next, eol := line(b, off)
	if strings.TrimRight(first, " \t") != "---" || next < 0 {
		return block{body: off, eol: eolOf(b)}, nil
	}
	for pos := next; pos < len(b); {
		l, after, _ := line(b, pos)
		if t := strings.TrimRight(l, " \t"); t == "---" || t == "..." {
			if after < 0 {
				after = len(b)
			}
			return block{start: next, end: pos, body: after, ok: true, eol: eol}, nil
		}
		if after < 0 {
			break
		}
		pos = after
	}
	return block{}, fmt.Errorf("%w: the opening --- has no closing ---", ErrFrontmatter)
}

// line returns the line of b starting at off without its ending, the offset
// of the next line (-1 at the end of b) and the ending ("\n" or "\r\n").
func line(b []byte, off int) (string, int, string) {
	i := bytes.IndexByte(b[off:], '\n')
	if i < 0 {
		return string(b[off:]), -1, "\n"
	}
	l := b[off : off+i]
	if bytes.HasSuffix(l, []byte("\r")) {
		return string(l[:len(l)-1]), off + i + 1, "\r\n"
	}
	return string(l), off + i + 1, "\n"
}

func eolOf(b []byte) string {
	if i := bytes.IndexByte(b, '\n'); i > 0 && b[i-1] == '\r' {
		return "\r\n"
	}
	return "\n"
}

// Frontmatter is the mapping at the top of a file, key by key as YAML
// nodes, and the body after it.
type Frontmatter struct {
	fields map[string]*yaml.Node
	Body   []byte
}

// ParseFrontmatter reads b's frontmatter. A file without one has no
// fields; one whose block is not a YAML mapping is ErrFrontmatter.
func ParseFrontmatter(b []byte) (Frontmatter, error) {
	blk, err := split(b)
	if err != nil {
		return Frontmatter{}, err
	}
	fm := Frontmatter{fields: map[string]*yaml.Node{}, Body: b[blk.body:]}
	if !blk.ok {
		return fm, nil
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b[blk.start:blk.end], &doc); err != nil {
		return Frontmatter{}, fmt.Errorf("%w: %v", ErrFrontmatter, err)
	}
	if len(doc.Content) == 0 {
		return fm, nil
	}
	m := doc.Content[0]
	if m.Kind != yaml.MappingNode {
		return Frontmatter{}, fmt.Errorf("%w: not a mapping of keys", ErrFrontmatter)
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k := m.Content[i]
		if k.Kind != yaml.ScalarNode {
			return Frontmatter{}, fmt.Errorf("%w: a key at line %d is not a plain name", ErrFrontmatter, k.Line)
		}
		if fm.fields[k.Value] != nil {
			return Frontmatter{}, fmt.Errorf("%w: key %q appears twice", ErrFrontmatter, k.Value)
		}
		fm.fields[k.Value] = m.Content[i+1]
	}
	return fm, nil
}

// Has reports whether key is present.
func (f Frontmatter) Has(key string) bool { return f.fields[key] != nil }

// String is key's value as text; "" when absent, null or not a scalar.
func (f Frontmatter) String(key string) string {
	n := f.fields[key]
	if n == nil || n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		return ""
	}
	return n.Value
}

// Int is key's integer value; ok is false when absent or not an integer.
func (f Frontmatter) Int(key string) (int, bool) {
	n := f.fields[key]
	var v int
	if n == nil || n.Kind != yaml.ScalarNode || n.Decode(&v) != nil {
		return 0, false
	}
	return v, true
}

// Bool is key's boolean value; false when absent or not a boolean.
func (f Frontmatter) Bool(key string) bool {
	n := f.fields[key]
	var v bool
	if n == nil || n.Kind != yaml.ScalarNode || n.Decode(&v) != nil {
		return false
	}
	return v
}

// Edit sets (or, with Delete, removes) one top-level key.
type Edit struct {
	Key    string
	Value  any // a string, int or bool
	Delete bool
}

// Set returns b with edits applied to its frontmatter. Every byte outside
// the lines of the keys edited is kept: other keys, comments, order, line
// endings and the body. A missing key is appended at the end of the block;
// a file without frontmatter gets one. The result is parsed again, and an
// edit that would not read back as written is ErrFrontmatter.
func Set(b []byte, edits ...Edit) ([]byte, error) {
	if _, err := ParseFrontmatter(b); err != nil {
		return nil, err
	}
	blk, _ := split(b)
	var head, fm, tail []byte
	if blk.ok {
		head, fm, tail = b[:blk.start], b[blk.start:blk.end], b[blk.end:]
	} else {
		head = append(append([]byte{}, b[:blk.body]...), "---"+blk.eol...)
		tail = append([]byte("---"+blk.eol), b[blk.body:]...)
	}
	lines := splitLines(fm)
	for _, e := range edits {
		var err error
		if lines, err = apply(lines, e, blk.eol); err != nil {
			return nil, err
		}
	}
	out := make([]byte, 0, len(b)+64)
	out = append(out, head...)
	for _, l := range lines {
		out = append(out, l...)
	}
	out = append(out, tail...)
	if err := check(out, edits); err != nil {
		return nil, err
	}
	return out, nil
}

// splitLines cuts b into lines that keep their endings.
func splitLines(b []byte) []string {
	var ls []string
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			ls = append(ls, string(b))
			break
		}
		ls = append(ls, string(b[:i+1]))
		b = b[i+1:]
	}
	return ls
}

// apply edits lines: a key's extent is its line and the indented (or list)
// lines that continue its value.
func apply(lines []string, e Edit, eol string) ([]string, error) {
	from, to := -1, -1
	for i, l := range lines {
		if keyOf(l) == e.Key {
			from, to = i, i+1
			for to < len(lines) && continues(lines[to]) {
				to++
			}
			break
		}
	}
	if e.Delete {
		if from < 0 {
			return lines, nil
		}
		return append(lines[:from:from], lines[to:]...), nil
	}
	v, err := scalar(e.Value)
	if err != nil {
		return nil, err
	}
	if from < 0 {
		if n := len(lines); n > 0 && !strings.HasSuffix(lines[n-1], "\n") {
			lines[n-1] += eol
		}
		return append(lines, e.Key+": "+v+eol), nil
	}
	end := eol
	if last := lines[to-1]; strings.HasSuffix(last, "\r\n") {
		end = "\r\n"
	} else if strings.HasSuffix(last, "\n") {
		end = "\n"
	}
	out := append(lines[:from:from], e.Key+": "+v+end)
	return append(out, lines[to:]...), nil
}

// keyOf is the plain top-level key a line starts, or "".
func keyOf(l string) string {
	if l == "" || l[0] == ' ' || l[0] == '\t' || l[0] == '#' || l[0] == '-' {
		return ""
	}
	k, _, ok := strings.Cut(l, ":")
	if !ok || strings.ContainsAny(k, " \t\"'{}[],&*!|>%@`") {
		return ""
	}
	return k
}

func continues(l string) bool {
	return l != "" && (l[0] == ' ' || l[0] == '\t' || strings.HasPrefix(l, "- ") || strings.TrimRight(l, "\r\n") == "-")
}

// scalar writes v as a one-line YAML scalar.
func scalar(v any) (string, error) {
	switch v := v.(type) {
	case int, bool:
		return fmt.Sprint(v), nil
	case string:
		b, err := yaml.Marshal(v)
		if err != nil {
			return "", err
		}
		s := strings.TrimSuffix(string(b), "\n")
		if strings.Contains(s, "\n") {
			return "", fmt.Errorf("%w: a value must fit on one line", ErrFrontmatter)
		}
		return s, nil
	}
	return "", fmt.Errorf("roadmap: cannot write a %T", v)
}

// check parses out again and confirms each edit reads back.
func check(out []byte, edits []Edit) error {
	fm, err := ParseFrontmatter(out)
	if err != nil {
		return err
	}
	for _, e := range edits {
		n := fm.fields[e.Key]
		if e.Delete != (n == nil) {
			return fmt.Errorf("%w: key %q did not take its new value", ErrFrontmatter, e.Key)
		}
		if e.Delete {
			continue
		}
		var ok bool
		switch v := e.Value.(type) {
		case string:
			ok = fm.String(e.Key) == v
		case int:
			got, isInt := fm.Int(e.Key)
			ok = isInt && got == v
		case bool:
			ok = n.Kind == yaml.ScalarNode && fm.Bool(e.Key) == v
		}
		if !ok {
			return fmt.Errorf("%w: key %q did not take its new value", ErrFrontmatter, e.Key)
		}
	}
	return nil
}
