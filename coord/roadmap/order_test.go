package roadmap

import (
	"strings"
	"testing"
	"time"
)

func mk(spec string) []*Initiative {
	// spec: "id:status:next:tasks:updated-minutes:wall_order(-1 none)" items separated by spaces
	var out []*Initiative
	for _, item := range strings.Fields(spec) {
		f := strings.Split(item, ":")
		in := &Initiative{Page: Page{ID: f[0], Status: f[1]}, Next: f[2]}
		for range atoi(f[3]) {
			in.Tasks = append(in.Tasks, Task{})
		}
		in.Updated = time.Unix(int64(atoi(f[4]))*60, 0)
		if f[5] != "" {
			n := atoi(f[5])
			in.WallOrder = &n
		}
		in.Wall = wallOf(in)
		out = append(out, in)
	}
	return out
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return n
}

func order(ins []*Initiative) string {
	var ids []string
	for _, in := range Order(ins) {
		ids = append(ids, in.ID)
	}
	return strings.Join(ids, " ")
}

func TestOrder(t *testing.T) {
	for _, tc := range []struct{ name, spec, want string }{
		{"chains follow next", "c:active::1:0: a:active:b:1:0: b:active:c:1:0:", "a b c"},
		{"no tasks never leads", "a:active::0:0:0 b:active::2:0:5", "b a"},
		{"done last", "a:done::1:0: b:backlog::1:0: c:next::1:0:", "b c a"},
		{"heads by wall_order then id", "x:active::1:0:2 y:active::1:0:1 z:active::1:0:", "y x z"},
		{"a broken pointer ends its chain; unreached, it is an orphan, last by updated",
			"a:active:b:1:0: b:active:gone:1:0: o2:active:gone:1:9: o1:active:gone:1:3: c:active::1:0:", "a b c o1 o2"},
		{"two pointing at one: the second is broken", "a:active:t:1:0: b:active:t:1:5: t:active::1:0:", "a t b"},
		{"a pointer into the done group is broken", "a:active:d:1:0: d:done::1:0:", "a d"},
		{"a loop no chain enters goes last by updated", "p:active:q:1:2: q:active:p:1:1: s:active::1:0:", "s q p"},
		{"a pointer to itself", "a:active:a:1:0: b:active::1:0:", "b a"},
		{"a chain starts at its first initiative with tasks", "b:active:c:0:0: c:active:d:2:0: d:active::1:0:", "c d b"},
		{"the runs without tasks come after the chains", "e:active:f:0:0:0 f:active::0:0:1 g:active::1:0:9", "g e f"},
		{"an orphan with tasks before an initiative without", "o:active:gone:1:3: n:active::0:0:", "o n"},
		{"orphans without tasks last", "t:active:gone:0:1: u:active:gone:1:5: a:active::0:0:", "u a t"},
	} {
		if got := order(mk(tc.spec)); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestWalls(t *testing.T) {
	ins := mk("a:active::1:0:1 b:blocked::1:0:0 c:next::1:0: d:done::1:0: e:backlog::0:0:")
	ins = append(ins, &Initiative{Page: Page{ID: "f", Status: Backlog}, Archived: true})
	ins[len(ins)-1].Wall = wallOf(ins[len(ins)-1])
	w := Walls(ins)
	got := map[string]string{}
	for name, list := range w {
		var ids []string
		for _, in := range list {
			ids = append(ids, in.ID)
		}
		got[name] = strings.Join(ids, " ")
	}
	if got[WallActive] != "b a" || got[WallNext] != "c" || got[WallBacklog] != "e" || got[WallArchived] != "d f" {
		t.Fatalf("walls %v", got)
	}
}
