package roadmap

import (
	"sort"
)

// Walls, the columns of the dashboard.
const (
	WallActive   = "active"
	WallNext     = "next"
	WallBacklog  = "backlog"
	WallArchived = "archived"
)

// WallNames lists the walls in the dashboard's order.
var WallNames = []string{WallActive, WallNext, WallBacklog, WallArchived}

// wallOf places an initiative: archived and done ones on the archived wall
// (a finished initiative leaves the active wall), blocked ones with the
// active.
func wallOf(in *Initiative) string {
	switch {
	case in.Archived || in.Status == Done:
		return WallArchived
	case in.Status == Active || in.Status == Blocked:
		return WallActive
	case in.Status == Next:
		return WallNext
	}
	return WallBacklog
}

// Walls sorts initiatives onto the four walls, each by wall_order (those
// without one last, by id).
func Walls(ins []*Initiative) map[string][]*Initiative {
	w := make(map[string][]*Initiative, len(WallNames))
	for _, name := range WallNames {
		w[name] = []*Initiative{}
	}
	for _, in := range ins {
		w[in.Wall] = append(w[in.Wall], in)
	}
	for _, list := range w {
		sortByWallOrder(list)
	}
	return w
}

// Order is the roadmap's reading order. Initiatives that are not done come
// first, done ones last. Within each group, initiatives follow their next
// pointers as chains; chains start with the initiatives that have tasks
// (one without tasks never leads), then by wall_order and id. An
// initiative whose pointer is broken (to a missing initiative, one in the
// other group, itself, or one another initiative already points to) ends
// its chain there; when no chain leads to it either, it is an orphan.
// Orphans, and loops no chain leads into, come at the end of their group,
// least recently updated first.
func Order(ins []*Initiative) []*Initiative {
	var open, done []*Initiative
	for _, in := range ins {
		if in.Status == Done {
			done = append(done, in)
		} else {
			open = append(open, in)
		}
	}
	return append(orderGroup(open), orderGroup(done)...)
}

func orderGroup(group []*Initiative) []*Initiative {
	byID := make(map[string]*Initiative, len(group))
	for _, in := range group {
		byID[in.ID] = in
	}
	// Who points to whom, keeping only the first (by id) of several
	// initiatives that name the same next.
	sorted := append([]*Initiative(nil), group...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].ID < sorted[j].ID })
	next := map[string]*Initiative{}
	pointed := map[string]bool{}
	orphan := map[string]bool{}
	for _, in := range sorted {
		if in.Next == "" {
			continue
		}
		to := byID[in.Next]
		if to == nil || to == in || pointed[to.ID] {
			orphan[in.ID] = true
			continue
		}
		next[in.ID], pointed[to.ID] = to, true
	}
	var heads []*Initiative
	for _, in := range sorted {
		if !pointed[in.ID] && !orphan[in.ID] {
			heads = append(heads, in)
		}
	}
	sortByWallOrder(heads)
	sort.SliceStable(heads, func(i, j int) bool { return len(heads[i].Tasks) > 0 && len(heads[j].Tasks) == 0 })
	out := make([]*Initiative, 0, len(group))
	placed := map[string]bool{}
	for _, h := range heads {
		for in := h; in != nil && !placed[in.ID]; in = next[in.ID] {
			out = append(out, in)
			placed[in.ID] = true
		}
	}
	// What is left: orphans, and the members of loops no head reaches.
	var rest []*Initiative
	for _, in := range sorted {
		if !placed[in.ID] {
			rest = append(rest, in)
		}
	}
	sort.SliceStable(rest, func(i, j int) bool { return rest[i].Updated.Before(rest[j].Updated) })
	return append(out, rest...)
}
