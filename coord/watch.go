package coord

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/agentmesh/mesh/coord/instructions"
	"github.com/agentmesh/mesh/coord/update"
	"github.com/agentmesh/mesh/internal/httpx"
)

// watchState is what the site watcher learnt.
type watchState struct {
	mu          sync.Mutex
	latest      *int // the published standard version
	drift       bool
	lastAttempt time.Time
	updateMu    sync.Mutex // one update at a time
	restartOnce sync.Once
	restart     chan struct{}
}

var (
	errUpdateOff    = httpx.E(http.StatusServiceUnavailable, "update_disabled", "self-update needs --site-url")
	errUpdateFailed = httpx.E(http.StatusBadGateway, "update_failed", "the update failed; the daemon runs on")
	errReleaseSig   = httpx.E(http.StatusBadGateway, "release_signature_invalid", "the release is not signed by the pinned key; the daemon runs on")
)

func (d *Daemon) site() update.Site {
	return update.Site{BaseURL: d.cfg.SiteURL, Client: update.NewClient(d.cfg.SiteTimeout, d.cfg.InsecureSite), MaxBytes: d.cfg.UpdateMaxBytes}
}

// Restart is closed when a new version was installed over the
// executable: the caller closes the daemon and starts the executable
// again (mesh coord does so in place, with the same arguments).
func (d *Daemon) Restart() <-chan struct{} { return d.watch.restart }

// preamblePath caches the published preamble.
func (d *Daemon) preamblePath() string {
	return filepath.Join(d.cfg.StateDir, "standard", "agent-instructions.md")
}

// syncInstructions renders the instruction files that are out of date.
func (d *Daemon) syncInstructions() {
	preamble, _ := os.ReadFile(d.preamblePath())
	v, _ := standardVersion(d.cfg.Dir).(int)
	files, err := instructions.Sync(d.files, preamble, v)
	if err := unreported(err); err != nil {
		d.log.Warn("agent instructions", "err", err)
	}
	if len(files) > 0 {
		d.events.publish("agent_instructions.rendered", map[string]any{"files": files})
		d.debug("info", "instructions", "agent instructions rendered", map[string]any{"files": files})
	}
}

// watchSite checks the site every daemon.auto_update_check_interval_sec
// until ctx ends; first is the first wait, armed by Start.
func (d *Daemon) watchSite(ctx context.Context, first <-chan time.Time) {
	wait := first
	for {
		select {
		case <-ctx.Done():
			return
		case <-wait:
		}
		d.checkSite(ctx)
		wait = d.cfg.Clock.After(time.Duration(d.current().cluster.CheckIntervalSec) * time.Second)
	}
}

// checkSite reads the published standard and preamble and, unless
// daemon.auto_update is false, updates the daemon (at most one attempt
// every UpdateCooldown).
func (d *Daemon) checkSite(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.SiteTimeout)
	defer cancel()
	d.checkStandard(ctx)
	d.checkPreamble(ctx)
	if !d.current().cluster.AutoUpdate {
		return
	}
	d.watch.mu.Lock()
	cooling := !d.watch.lastAttempt.IsZero() && d.cfg.Clock.Now().Sub(d.watch.lastAttempt) < d.cfg.UpdateCooldown
	d.watch.mu.Unlock()
	if cooling {
		return
	}
	if _, err := d.selfUpdate(ctx); err != nil {
		d.log.Warn("self-update", "err", err)
	}
}

func (d *Daemon) checkStandard(ctx context.Context) {
	latest, err := d.site().StandardVersion(ctx)
	if err != nil {
		d.log.Warn("published standard version", "err", err)
		return
	}
	local, pinned := standardVersion(d.cfg.Dir).(int)
	drift := pinned && local < latest
	d.watch.mu.Lock()
	entering := drift && !d.watch.drift
	d.watch.latest, d.watch.drift = &latest, drift
	d.watch.mu.Unlock()
	if entering {
		d.events.publish("standard.drift", map[string]any{"local": local, "latest": latest})
		d.debug("warn", "standard", "the pinned standard is behind the published one", map[string]any{"local": local, "latest": latest})
	}
}

func (d *Daemon) checkPreamble(ctx context.Context) {
	p, err := d.site().Preamble(ctx)
	if err != nil {
		d.log.Warn("published preamble", "err", err)
		return
	}
	if have, err := os.ReadFile(d.preamblePath()); err == nil && bytes.Equal(have, p) {
		return
	}
	if err := d.files.Write(d.preamblePath(), p, 0o644); err != nil {
		d.log.Error("preamble cache", "err", err)
		return
	}
	d.events.publish("agent_instructions.preamble_refreshed", map[string]any{"bytes": len(p)})
	d.syncInstructions()
}

// standardView is /health's standard.
func (d *Daemon) standardView() map[string]any {
	d.watch.mu.Lock()
	defer d.watch.mu.Unlock()
	var latest any
	if d.watch.latest != nil {
		latest = *d.watch.latest
	}
	return map[string]any{"version": standardVersion(d.cfg.Dir), "latest": latest, "drift": d.watch.drift}
}

// selfUpdate installs the published release when it is newer and no chat
// is active; a newer release while a chat turn is under way or waiting,
// or a story run is running, is deferred.
func (d *Daemon) selfUpdate(ctx context.Context) (map[string]any, error) {
	d.watch.updateMu.Lock()
	defer d.watch.updateMu.Unlock()
	site := d.site()
	rel, err := site.Latest(ctx)
	if err != nil {
		return nil, errUpdateFailed.With("the published release could not be read; the daemon runs on").Because(err)
	}
	res := map[string]any{"updated": false, "version": Version, "latest": rel.Version}
	switch {
	case !update.Newer(rel.Version, Version):
		res["reason"] = "up_to_date"
		return res, nil
	}
	if err := d.verifyRelease(ctx, site, rel); err != nil {
		return nil, err
	}
	switch {
	case d.chat.Active() || d.runs.Running():
		res["reason"] = "deferred"
		d.events.publish("daemon.upgrade.deferred", map[string]any{"version": Version, "latest": rel.Version})
		return res, nil
	}
	d.watch.mu.Lock()
	d.watch.lastAttempt = d.cfg.Clock.Now()
	d.watch.mu.Unlock()
	if err := site.Install(ctx, rel, d.cfg.Executable); err != nil {
		d.events.publish("daemon.upgrade.failed", map[string]any{"version": Version, "latest": rel.Version})
		d.debug("error", "update", "self-update failed", map[string]any{"latest": rel.Version, "error": err.Error()})
		return nil, errUpdateFailed.With("installing %s failed; the daemon runs on", rel.Version).Because(err)
	}
	d.events.publish("daemon.upgrade.installed", map[string]any{"version": Version, "latest": rel.Version})
	d.debug("info", "update", "self-update installed; restarting", map[string]any{"latest": rel.Version})
	d.watch.restartOnce.Do(func() { close(d.watch.restart) })
	res["updated"] = true
	return res, nil
}

// verifyRelease checks a newer release's signature when a release key is
// pinned; a release that fails is announced as failed and never installed.
func (d *Daemon) verifyRelease(ctx context.Context, site update.Site, rel update.Release) error {
	if len(d.cfg.ReleaseKey) == 0 {
		return nil
	}
	err := site.Verify(ctx, rel, d.cfg.ReleaseKey)
	if err == nil {
		return nil
	}
	d.events.publish("daemon.upgrade.failed", map[string]any{"version": Version, "latest": rel.Version})
	d.debug("error", "update", "release refused", map[string]any{"latest": rel.Version, "error": err.Error()})
	if errors.Is(err, update.ErrSignature) {
		return errReleaseSig.With("%s is not signed by the pinned key; the daemon runs on", rel.Version).Because(err)
	}
	return errUpdateFailed.With("the signature of %s could not be read; the daemon runs on", rel.Version).Because(err)
}

func (d *Daemon) postSelfUpdate(w http.ResponseWriter, r *http.Request) error {
	if d.cfg.SiteURL == "" {
		return errUpdateOff
	}
	ctx, cancel := context.WithTimeout(r.Context(), d.cfg.SiteTimeout)
	defer cancel()
	res, err := d.selfUpdate(ctx)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if res["reason"] == "deferred" {
		status = http.StatusAccepted
	}
	httpx.WriteJSON(w, status, res)
	return nil
}
