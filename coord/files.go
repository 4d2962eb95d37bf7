package coord

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"

	"github.com/agentmesh/mesh/internal/atomicfile"
)

// maxRefusals bounds the refused writes listed in /state's warnings.
const maxRefusals = 100

// debugLogFile is the debug log, under the state folder.
const debugLogFile = "debug.jsonl"

// refusals are the operations on files refused because their path leads
// outside the project, by path: each is a warning of /state until the
// path is written (or read) again, which it is when the link that led
// out is gone.
type refusals struct {
	mu    sync.Mutex
	msg   map[string]string
	order []string
}

// add records a refusal; it reports whether it is new.
func (r *refusals) add(path, msg string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.msg[path]; ok {
		return false
	}
	if r.msg == nil {
		r.msg = map[string]string{}
	}
	if len(r.order) >= maxRefusals {
		delete(r.msg, r.order[0])
		r.order = r.order[1:]
	}
	r.msg[path] = msg
	r.order = append(r.order, path)
	return true
}

func (r *refusals) clear(path string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.msg[path]; ok {
		delete(r.msg, path)
		r.order = slices.DeleteFunc(r.order, func(p string) bool { return p == path })
	}
}

func (r *refusals) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.order))
	for _, p := range r.order {
		out = append(out, r.msg[p])
	}
	return out
}

// fileReport is told by the project's files of each refused operation
// (a warning: logged, in the debug log and in /state until it clears)
// and of each that succeeded (which clears it).
func (d *Daemon) fileReport(path string, err error) {
	if err == nil {
		d.refusals.clear(path)
		return
	}
	what := "read or write " + filepath.ToSlash(path)
	var oe *atomicfile.OutsideError
	if errors.As(err, &oe) && oe.Op == "run in" {
		what = "run a command in " + filepath.ToSlash(path)
	}
	msg := fmt.Sprintf("refused to %s: the path leads outside the project folder (through a symbolic link out of it, or an absolute one)", what)
	if !d.refusals.add(path, msg) {
		return
	}
	d.log.Warn(msg)
	// The debug log's own refusal is not written to it.
	if path != d.debugLogRel() {
		d.debug("warn", "files", msg, map[string]any{"path": filepath.ToSlash(path)})
	}
}

// unreported is err without the refusals fileReport was told of (err
// may join several).
func unreported(err error) error {
	var errs []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	} else if err != nil {
		errs = []error{err}
	}
	return errors.Join(slices.DeleteFunc(errs, func(e error) bool { return errors.Is(e, atomicfile.ErrOutside) })...)
}

// debugLogRel is the debug log's path relative to the project.
func (d *Daemon) debugLogRel() string {
	rel, _ := filepath.Rel(d.cfg.Dir, filepath.Join(d.cfg.StateDir, debugLogFile))
	return rel
}
