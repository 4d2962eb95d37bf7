package roadmap

import (
	"bytes"
	"errors"
	"testing"
)

func TestSetKeepsTheRestByteForByte(t *testing.T) {
	for _, tc := range []struct {
		name  string
		in    string
		edits []Edit
		want  string
	}{
		{
			name:  "replace one key, keep comments, order and body",
			in:    "---\n# owner: ops\ntitle: Ship it   \nstatus: active # moving\nwall_order: 3\n---\n# Ship it\n\nbody  \n",
			edits: []Edit{{Key: "status", Value: "done"}},
			want:  "---\n# owner: ops\ntitle: Ship it   \nstatus: done\nwall_order: 3\n---\n# Ship it\n\nbody  \n",
		},
		{
			name:  "append a missing key, CRLF kept",
			in:    "---\r\ntitle: A\r\n---\r\nbody\r\n",
			edits: []Edit{{Key: "wall_order", Value: 2}},
			want:  "---\r\ntitle: A\r\nwall_order: 2\r\n---\r\nbody\r\n",
		},
		{
			name:  "delete keys, including a multi-line value",
			in:    "---\nstatus: done\ncompleted_at: 2026-01-02T03:04:05Z\ntags:\n  - a\n  - b\ncommit_sha: abc\n---\nx",
			edits: []Edit{{Key: "completed_at", Delete: true}, {Key: "tags", Delete: true}, {Key: "status", Value: "active"}},
			want:  "---\nstatus: active\ncommit_sha: abc\n---\nx",
		},
		{
			name:  "no frontmatter: one is added above the untouched body",
			in:    "# Title\n\ntext",
			edits: []Edit{{Key: "status", Value: "next"}},
			want:  "---\nstatus: next\n---\n# Title\n\ntext",
		},
		{
			name:  "a byte order mark stays first",
			in:    "\xef\xbb\xbf# T\n",
			edits: []Edit{{Key: "archived", Value: true}},
			want:  "\xef\xbb\xbf---\narchived: true\n---\n# T\n",
		},
		{
			name:  "a string that looks like another type is quoted",
			in:    "---\n---\n",
			edits: []Edit{{Key: "commit_sha", Value: "123456"}, {Key: "next", Value: "yes"}},
			want:  "---\ncommit_sha: \"123456\"\nnext: \"yes\"\n---\n",
		},
		{
			name:  "a list value at column 0 is part of its key",
			in:    "---\nnext: a\nlabels:\n- x\n- y\nstatus: backlog\n---\n",
			edits: []Edit{{Key: "labels", Value: "x"}},
			want:  "---\nnext: a\nlabels: x\nstatus: backlog\n---\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Set([]byte(tc.in), tc.edits...)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Fatalf("got\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}

func TestMalformedFrontmatterIsRefused(t *testing.T) {
	for _, in := range []string{
		"---\nstatus: active\nno end",
		"---\nstatus: [active\n---\n",
		"---\n- a list\n---\n",
		"---\nstatus: a\nstatus: b\n---\n",
		"---\n? [a, b]\n: c\n---\n",
	} {
		if _, err := ParseFrontmatter([]byte(in)); !errors.Is(err, ErrFrontmatter) {
			t.Errorf("ParseFrontmatter(%q) = %v, want ErrFrontmatter", in, err)
		}
		if _, err := Set([]byte(in), Edit{Key: "status", Value: "done"}); !errors.Is(err, ErrFrontmatter) {
			t.Errorf("Set(%q) = %v, want ErrFrontmatter", in, err)
		}
	}
}

func TestNormalizeStatus(t *testing.T) {
	for in, want := range map[string]string{"in_progress": Active, "In-Progress": Active, " done ": Done,
		"blocked": Blocked, "next": Next, "": Backlog, "wip": Backlog, "active": Active} {
		if got := NormalizeStatus(in); got != want {
			t.Errorf("NormalizeStatus(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzFrontmatter: parsing never panics; an edit that succeeds reads back
// as written and keeps the body byte for byte.
func FuzzFrontmatter(f *testing.F) {
	for _, s := range []string{
		"---\nstatus: active\n---\nbody", "---\r\ntitle: x\r\n---\r\n", "no frontmatter", "",
		"---\n---\n", "---\nstatus: [\n---\n", "\xef\xbb\xbf---\na: 1\n...\nrest", "---\nk:\n  - 1\n---\n",
		"---\n&a x: *a\n---\n", "---\nstatus: |\n  a\n  b\n---\n",
	} {
		f.Add([]byte(s), "status", "done")
	}
	f.Fuzz(func(t *testing.T, b []byte, key, value string) {
		fm, err := ParseFrontmatter(b)
		if err != nil {
			return
		}
		if keyOf(key+":") != key || key == "" {
			return
		}
		out, err := Set(b, Edit{Key: key, Value: value})
		if err != nil {
			return
		}
		back, err := ParseFrontmatter(out)
		if err != nil {
			t.Fatalf("Set wrote unreadable frontmatter: %v\n%q", err, out)
		}
		if back.String(key) != value {
			t.Fatalf("%s reads back %q, want %q", key, back.String(key), value)
		}
		if !bytes.Equal(back.Body, fm.Body) {
			t.Fatalf("body changed:\n%q\n%q", fm.Body, back.Body)
		}
	})
}
