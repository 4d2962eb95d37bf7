package roadmap

import (
	"fmt"
	"slices"
	"time"

	"github.com/agentmesh/mesh/internal/atomicfile"
)

// edit rewrites the frontmatter of the file at path with edits, reading it
// afresh so that what someone else wrote meanwhile outside these keys is
// kept. The new content replaces the file atomically (a temporary file in
// the same folder, renamed), with the old file's mode, through files: a
// file or folder linked outside the project is not written.
func edit(files atomicfile.Root, path string, edits ...Edit) error {
	st, err := files.Stat(path)
	if err != nil {
		return err
	}
	b, err := files.ReadFile(path)
	if err != nil {
		return err
	}
	out, err := Set(b, edits...)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return files.Write(path, out, st.Mode().Perm())
}

// Change is one initiative a reconcile moved.
type Change struct {
	ID        string `json:"id"`
	Status    string `json:"status"`
	CommitSHA string `json:"commit_sha,omitempty"`
}

// Reconcile brings each initiative's status in line with its tasks': one
// whose tasks are all done becomes done, with completed_at (now) and
// commit_sha (head, when there is one); a done one with a task not done
// goes back to active and loses both. Initiatives without tasks, archived
// ones and those whose frontmatter is malformed are left alone. The walls
// the changed initiatives left (a done one leaves its wall for the
// archived one, a reopened one the archived wall) are renumbered 0, 1,
// 2... without them. It returns what it changed; an error stops at the
// first file it could not write.
func Reconcile(r *Roadmap, files atomicfile.Root, now time.Time, head string) ([]Change, error) {
	changes, moved, err := reconcile(r, files, now, head)
	if err != nil || len(moved) == 0 {
		return changes, err
	}
	for name, members := range Walls(r.Initiatives) {
		left := slices.ContainsFunc(moved, func(m *Initiative) bool { return m.Wall == name })
		if !left {
			continue
		}
		members = slices.DeleteFunc(members, func(m *Initiative) bool { return slices.Contains(moved, m) })
		if err := renumber(files, members, nil); err != nil {
			return changes, err
		}
	}
	return changes, nil
}

// reconcile writes the statuses of Reconcile; it returns the changes and
// the initiatives changed (as they were read: on the walls they left).
func reconcile(r *Roadmap, files atomicfile.Root, now time.Time, head string) ([]Change, []*Initiative, error) {
	var (
		changes []Change
		moved   []*Initiative
	)
	for _, in := range r.Initiatives {
		if len(in.Tasks) == 0 || in.Archived || in.Error != "" {
			continue
		}
		all := true
		for _, t := range in.Tasks {
			all = all && t.Status == Done
		}
		var edits []Edit
		switch {
		case all && in.Status != Done:
			edits = []Edit{{Key: "status", Value: Done}, {Key: "completed_at", Value: now.UTC().Format(time.RFC3339)}}
			if head != "" {
				edits = append(edits, Edit{Key: "commit_sha", Value: head})
			} else {
				edits = append(edits, Edit{Key: "commit_sha", Delete: true})
			}
		case !all && in.Status == Done:
			edits = []Edit{{Key: "status", Value: Active}, {Key: "completed_at", Delete: true}, {Key: "commit_sha", Delete: true}}
		default:
			continue
		}
		if err := edit(files, in.path, edits...); err != nil {
			return changes, moved, err
		}
		c := Change{ID: in.ID, Status: edits[0].Value.(string)}
		if c.Status == Done {
			c.CommitSHA = head
		}
		changes = append(changes, c)
		moved = append(moved, in) // done or not, it changed walls
	}
	return changes, moved, nil
}

// statusOfWall is the status an initiative takes when moved onto a wall.
var statusOfWall = map[string]string{WallActive: Active, WallNext: Next, WallBacklog: Backlog, WallArchived: Done}

// Reorder moves initiative id to position order (0 first; past the end is
// the end) of wall, and renumbers the wall's wall_order 0, 1, 2..., and the
// wall it left, when it changed walls, likewise. Moving onto the archived
// wall sets status done and archived true; onto another wall sets the
// wall's status (a blocked initiative stays blocked on the active wall),
// removes archived and, when it leaves done, completed_at and commit_sha.
// Initiatives whose frontmatter is malformed keep their place but are not
// renumbered. It returns the position taken.
func Reorder(r *Roadmap, files atomicfile.Root, id, wall string, order int) (int, error) {
	in := r.Find(id)
	switch {
	case statusOfWall[wall] == "":
		return 0, fmt.Errorf("%w %q: want active, next, backlog or archived", ErrWall, wall)
	case in == nil:
		return 0, fmt.Errorf("%w: %q", ErrNotFound, id)
	case in.Error != "":
		return 0, fmt.Errorf("%s: %w: fix the file first", in.File, ErrFrontmatter)
	}
	walls := Walls(r.Initiatives)
	without := func(list []*Initiative) []*Initiative {
		return slices.DeleteFunc(slices.Clone(list), func(m *Initiative) bool { return m == in })
	}
	members := without(walls[wall])
	order = min(max(order, 0), len(members))
	members = slices.Insert(members, order, in)
	if edits := moveEdits(in, wall, order); len(edits) > 0 {
		if err := edit(files, in.path, edits...); err != nil {
			return 0, err
		}
	}
	if err := renumber(files, members, in); err != nil {
		return 0, err
	}
	if in.Wall != wall {
		if err := renumber(files, without(walls[in.Wall]), nil); err != nil {
			return 0, err
		}
	}
	return order, nil
}

// renumber writes wall_order 0, 1, 2... into the members of a wall, in
// their order, where it differs; moved (already written) and malformed
// ones are passed by.
func renumber(files atomicfile.Root, members []*Initiative, moved *Initiative) error {
	for i, m := range members {
		if m == moved || m.Error != "" || (m.WallOrder != nil && *m.WallOrder == i) {
			continue
		}
		if err := edit(files, m.path, Edit{Key: "wall_order", Value: i}); err != nil {
			return err
		}
	}
	return nil
}

// moveEdits are the edits that put in at order on wall; none for what is
// already so, so that a file is rewritten only where it changes.
func moveEdits(in *Initiative, wall string, order int) []Edit {
	var edits []Edit
	if in.WallOrder == nil || *in.WallOrder != order {
		edits = append(edits, Edit{Key: "wall_order", Value: order})
	}
	status := statusOfWall[wall]
	if wall == WallActive && in.Status == Blocked {
		status = Blocked
	}
	if status != in.Status {
		edits = append(edits, Edit{Key: "status", Value: status})
	}
	switch {
	case wall == WallArchived && !in.Archived:
		edits = append(edits, Edit{Key: "archived", Value: true})
	case wall != WallArchived && in.fm.Has("archived"):
		edits = append(edits, Edit{Key: "archived", Delete: true})
	}
	if wall != WallArchived && in.Status == Done {
		edits = append(edits, Edit{Key: "completed_at", Delete: true}, Edit{Key: "commit_sha", Delete: true})
	}
	return edits
}
