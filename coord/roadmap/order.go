package roadmap

import (
	"slices"
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
// pointers as chains, and an initiative without tasks never leads: a chain
// starts at its first initiative with tasks, and the initiatives without
// tasks before it (left at the head of a chain when an archive broke the
// pointer to them) follow later. An initiative whose pointer is broken (to
// a missing initiative, one in the other group, itself, or one another
// initiative already points to) ends its chain there; when no chain leads
// to it either, it is an orphan, and so are the members of a loop no chain
// enters. A group reads: the chains that start with tasks, by their first
// initiative's wall_order and id; the orphans with tasks, least recently
// updated first; the runs of initiatives without tasks, by wall_order and
// id; the orphans without tasks, least recently updated first.
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
	// Each head's chain, split before its first initiative with tasks.
	var led, taskless [][]*Initiative
	placed := map[string]bool{}
	for _, h := range sorted {
		if pointed[h.ID] || orphan[h.ID] {
			continue
		}
		var chain []*Initiative
		for in := h; in != nil && !placed[in.ID]; in = next[in.ID] {
			chain = append(chain, in)
			placed[in.ID] = true
		}
		i := slices.IndexFunc(chain, func(in *Initiative) bool { return len(in.Tasks) > 0 })
		switch {
		case i < 0:
			taskless = append(taskless, chain)
		case i > 0:
			taskless = append(taskless, chain[:i])
			fallthrough
		default:
			led = append(led, chain[i:])
		}
	}
	// What is left: orphans, and the members of loops no head reaches.
	var rest, restTaskless []*Initiative
	for _, in := range sorted {
		switch {
		case placed[in.ID]:
		case len(in.Tasks) > 0:
			rest = append(rest, in)
		default:
			restTaskless = append(restTaskless, in)
		}
	}
	out := make([]*Initiative, 0, len(group))
	out = appendChains(out, led)
	out = append(out, byUpdated(rest)...)
	out = appendChains(out, taskless)
	return append(out, byUpdated(restTaskless)...)
}

// appendChains appends chains to out, ordered by their first initiative's
// wall_order and id.
func appendChains(out []*Initiative, chains [][]*Initiative) []*Initiative {
	sort.SliceStable(chains, func(i, j int) bool { return beforeOnWall(chains[i][0], chains[j][0]) })
	for _, c := range chains {
		out = append(out, c...)
	}
	return out
}

// byUpdated sorts ins least recently updated first.
func byUpdated(ins []*Initiative) []*Initiative {
	sort.SliceStable(ins, func(i, j int) bool { return ins[i].Updated.Before(ins[j].Updated) })
	return ins
}
