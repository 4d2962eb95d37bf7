package coord

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/agentmesh/mesh/coord/cluster"
	"github.com/agentmesh/mesh/coord/roadmap"
	"github.com/agentmesh/mesh/internal/clock"
)

// DocsDir is the project's documentation folder listed in /state.
const DocsDir = "docs"

// maxDocs bounds the documents listed.
const maxDocs = 1000

// watched are the paths whose changes rebuild the state.
var watched = []string{cluster.FileName, roadmap.Dir, DocsDir}

// snapshot is the state the handlers serve; it is replaced whole.
type snapshot struct {
	cluster     cluster.Cluster
	roadmap     *roadmap.Roadmap
	docs        []Doc
	warnings    []string
	builtAt     time.Time
	fingerprint string
}

// Doc is one markdown file under docs/.
type Doc struct {
	Path  string `json:"path"`
	Title string `json:"title"`
}

// loadCluster reads cluster.yaml. A file that is not YAML, or that went
// missing, keeps the cluster the daemon has (prev), if any: a save half
// done in an editor must not reset the cluster's identity or crons.
func (d *Daemon) loadCluster(prev *cluster.Cluster) (cluster.Cluster, []string, error) {
	c, warns, err := cluster.Load(filepath.Join(d.cfg.Dir, cluster.FileName))
	switch {
	case err == nil:
		return c, warns, nil
	case prev != nil:
		return *prev, []string{err.Error() + "; keeping the configuration read before"}, nil
	case errors.Is(err, cluster.ErrSyntax):
		return c, warns, nil
	}
	return c, warns, err
}

// rebuild reads everything again, reconciles initiatives with their tasks
// and publishes the new snapshot. It reports whether the state changed
// since the last snapshot.
func (d *Daemon) rebuild() (bool, error) {
	d.writeMu.Lock()
	defer d.writeMu.Unlock()
	fp := roadmap.Fingerprint(d.cfg.Dir, watched...)
	prev := d.current()
	if prev != nil && prev.fingerprint == fp {
		return false, nil
	}
	var prevCluster *cluster.Cluster
	if prev != nil {
		prevCluster = &prev.cluster
	}
	c, warns, err := d.loadCluster(prevCluster)
	if err != nil {
		return false, err
	}
	r := roadmap.Load(d.cfg.Dir)
	if changes, err := roadmap.Reconcile(r, d.files, d.cfg.Clock.Now(), gitHead(d.cfg.Dir)); len(changes) > 0 || err != nil {
		if err != nil {
			d.log.Error("reconcile: cannot write an initiative", "err", err)
		}
		for _, ch := range changes {
			d.log.Info("reconcile", "initiative", ch.ID, "status", ch.Status, "commit_sha", ch.CommitSHA)
			d.events.publish("initiative.reconciled", map[string]any{"id": ch.ID, "status": ch.Status, "commit_sha": ch.CommitSHA})
		}
		fp = roadmap.Fingerprint(d.cfg.Dir, watched...)
		r = roadmap.Load(d.cfg.Dir)
	}
	warns = append(warns, r.Warnings...)
	d.setSecrets(c)
	s := &snapshot{cluster: c, roadmap: r, docs: d.docs(), warnings: warns, builtAt: d.cfg.Clock.Now().UTC(), fingerprint: fp}
	d.logNewWarnings(prev, warns)
	d.mu.Lock()
	d.state = s
	d.mu.Unlock()
	d.crons.SetJobs(c.Crons, c.CronsOwner)
	return true, nil
}

// logNewWarnings logs the warnings the previous snapshot did not have, so
// that a bad file is reported once, not at every rebuild.
func (d *Daemon) logNewWarnings(prev *snapshot, warns []string) {
	for _, w := range warns {
		if prev == nil || !slices.Contains(prev.warnings, w) {
			d.log.Warn(w)
			d.debug("warn", "config", w, nil)
		}
	}
}

func (d *Daemon) current() *snapshot {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.state
}

// onTick calls f at each tick of t until ctx ends.
func onTick(ctx context.Context, t clock.Ticker, f func()) {
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			f()
		}
	}
}

// poll rebuilds when the files changed, and says so on the socket.
func (d *Daemon) poll() {
	changed, err := d.rebuild()
	if err != nil {
		d.log.Error("rebuild", "err", err)
		return
	}
	if changed {
		d.events.publish("state.rebuilt", nil)
	}
}

// gitHead is the commit HEAD names in the project's repository, or ""
// when there is no repository, no commit or no git.
func gitHead(dir string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "git", "-C", dir, "rev-parse", "--verify", "--quiet", "HEAD").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// docs lists the markdown files under docs/ with their titles.
func (d *Daemon) docs() []Doc {
	out := []Doc{}
	root := filepath.Join(d.cfg.Dir, DocsDir)
	filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		if err != nil || len(out) >= maxDocs {
			return filepath.SkipDir
		}
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".md") {
			return nil
		}
		rel, _ := filepath.Rel(d.cfg.Dir, path)
		doc := Doc{Path: filepath.ToSlash(rel), Title: strings.TrimSuffix(e.Name(), ".md")}
		if b, err := readHead(path, 4096); err == nil {
			if fm, err := roadmap.ParseFrontmatter(b); err == nil {
				if t := fm.String("title"); t != "" {
					doc.Title = t
				} else if t := roadmap.Heading(fm.Body); t != "" {
					doc.Title = t
				}
			}
		}
		out = append(out, doc)
		return nil
	})
	return out
}

// readHead reads at most n bytes from the start of a file.
func readHead(path string, n int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	return readAtMost(f, n)
}

// readAtMost reads at most n bytes of f, and closes it.
func readAtMost(f *os.File, n int) ([]byte, error) {
	defer f.Close()
	b := make([]byte, n)
	k, err := f.Read(b)
	if k > 0 {
		err = nil
	}
	return b[:k], err
}
