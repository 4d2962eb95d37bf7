package coord

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/agentmesh/mesh/coord/agentenv"
	"github.com/agentmesh/mesh/coord/chat"
	"github.com/agentmesh/mesh/coord/cluster"
	"github.com/agentmesh/mesh/coord/cron"
	"github.com/agentmesh/mesh/coord/debuglog"
	"github.com/agentmesh/mesh/coord/portreg"
	"github.com/agentmesh/mesh/coord/runs"
	"github.com/agentmesh/mesh/internal/atomicfile"
	"github.com/agentmesh/mesh/internal/httpx"
)

// Daemon is a running coordination daemon.
type Daemon struct {
	cfg    Config
	log    *slog.Logger
	events *hub
	crons  *cron.Scheduler
	chat   *chat.Engine
	runs   *runs.Manager
	mux    *httpx.Mux

	// writeMu serialises what writes the roadmap: rebuilds (which
	// reconcile) and reorders.
	writeMu sync.Mutex
	mu      sync.RWMutex
	state   *snapshot

	storageCache storageCache
	watch        watchState
	dlog         *debuglog.Log
	lock         *projectLock
	// files confines every write (and read of what is rendered) to the
	// project folder; refusals are warnings of /state.
	files    atomicfile.Root
	refusals refusals
	// env decides the environment of agent turns and crons.
	env agentenv.Policy
	// token is the daemon's token, a secret of the debug log.
	token     string
	srv       *http.Server
	ln        net.Listener
	clusterID string
	endpoint  string
	reason    string
	started   time.Time
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// New checks cfg and prepares a daemon; it starts nothing.
func New(cfg Config) (*Daemon, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	cfg.Dir = dir
	if cfg.StateDir == "" {
		cfg.StateDir = filepath.Join(dir, ".coord")
	}
	if rel, err := filepath.Rel(dir, cfg.StateDir); err != nil || rel == "." || !filepath.IsLocal(rel) {
		return nil, fmt.Errorf("%w: the state folder %s is not inside the project folder", ErrConfig, cfg.StateDir)
	}
	if cfg.TLSBundle == "" {
		cfg.TLSBundle = filepath.Join(cfg.StateDir, "tls.pem")
	}
	d := &Daemon{cfg: cfg, log: cfg.Logger, mux: httpx.NewMux(), watch: watchState{restart: make(chan struct{})}}
	d.env, _ = agentenv.New(cfg.AgentEnv) // checked by Validate
	d.files = atomicfile.NewRoot(dir, d.fileReport)
	d.events = newHub(d.log, cfg.SendTimeout, cfg.Clock.Now)
	d.crons = cron.New(cron.Config{Project: dir, RunsDir: filepath.Join(cfg.StateDir, "cron"), DeviceID: cfg.DeviceID,
		Files: d.files, Env: d.environ, Tick: cfg.CronTick, Clock: cfg.Clock, Logger: d.log, Emit: d.cronEvent})
	if d.chat, err = d.newChat(); err != nil {
		return nil, err
	}
	d.runs = d.newRuns()
	d.routes()
	return d, nil
}

// Start takes the project's lock, reads the project, chooses the port and
// starts serving. A project folder without cluster.yaml is an error: it is
// not a project; one another live daemon runs on is ErrRunning.
func (d *Daemon) Start(ctx context.Context) (err error) {
	defer func() {
		if err != nil {
			d.Close()
		}
	}()
	if _, err := os.Stat(filepath.Join(d.cfg.Dir, cluster.FileName)); err != nil {
		return fmt.Errorf("coord: %s has no %s (is it the project folder?): %w", d.cfg.Dir, cluster.FileName, err)
	}
	// One daemon per project: nothing is written before the lock is held.
	if err := d.lockProject(); err != nil {
		return err
	}
	d.ignoreStateDir()
	if d.dlog, err = debuglog.Open(debuglog.Config{Path: filepath.Join(d.cfg.StateDir, debugLogFile),
		MaxBytes: d.cfg.DebugMaxBytes, MaxAge: d.cfg.DebugMaxAge, Clock: d.cfg.Clock, Files: d.files}); err != nil {
		return fmt.Errorf("coord: debug log: %w", err)
	}
	if _, err := d.rebuild(); err != nil {
		return fmt.Errorf("coord: %w", err)
	}
	// Runs first: a turn the chat starts again may end at once.
	if err := d.runs.Load(); err != nil {
		return fmt.Errorf("coord: runs: %w", err)
	}
	if err := d.chat.Start(); err != nil {
		return fmt.Errorf("coord: conversations: %w", err)
	}
	d.runs.Resume()
	tlsNames, err := d.listen()
	if err != nil {
		return err
	}
	g, err := d.newGuard(tlsNames)
	if err != nil {
		return err
	}
	d.token = g.token
	d.setSecrets(d.current().cluster)
	ctx, d.cancel = context.WithCancel(context.WithoutCancel(ctx))
	d.started = d.cfg.Clock.Now().UTC()
	d.srv = &http.Server{Handler: httpx.Recover(d.log, g.wrap(d.mux)), ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout: 30 * time.Second, ErrorLog: slog.NewLogLogger(d.log.Handler(), slog.LevelDebug)}
	ln := d.ln
	d.wg.Go(func() {
		if err := d.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			d.log.Error("serve", "err", err)
		}
	})
	// Tickers are made here, not in their goroutines, so that a test's
	// clock cannot move before they exist.
	poll, beat := d.cfg.Clock.NewTicker(d.cfg.Poll), d.cfg.Clock.NewTicker(d.cfg.Heartbeat)
	archive := d.cfg.Clock.NewTicker(d.cfg.ArchiveScan)
	d.wg.Go(func() { onTick(ctx, poll, d.poll) })
	d.wg.Go(func() { onTick(ctx, archive, d.archiveScan) })
	d.syncInstructions()
	instr := d.cfg.Clock.NewTicker(d.cfg.InstructionsWatch)
	d.wg.Go(func() { onTick(ctx, instr, d.syncInstructions) })
	if d.cfg.SiteURL != "" {
		first := d.cfg.Clock.After(time.Duration(d.current().cluster.CheckIntervalSec) * time.Second)
		d.wg.Go(func() { d.watchSite(ctx, first) })
	}
	d.wg.Go(func() { onTick(ctx, beat, func() { d.events.publish("heartbeat", nil) }) })
	d.crons.Start()
	d.debug("info", "daemon", "started", map[string]any{"endpoint": d.endpoint, "port_reason": d.reason})
	return nil
}

// listen takes the configured listener or chooses a port, and wraps it in
// TLS when a certificate bundle is there, whose names it returns.
func (d *Daemon) listen() ([]string, error) {
	st := d.current()
	d.clusterID = st.cluster.ID
	if d.cfg.Listener != nil {
		d.ln, d.reason = d.cfg.Listener, "listener given by the caller"
	} else {
		ch, err := portreg.Choose(d.cfg.Registry, portreg.Request{Cluster: st.cluster.ID, Dir: d.cfg.Dir, Host: d.cfg.Host,
			Explicit: d.cfg.Port, Preferred: st.cluster.Port, Min: d.cfg.PortMin, Max: d.cfg.PortMax})
		for _, s := range ch.Skipped {
			d.log.Info("port passed over", "port", s)
		}
		if err != nil {
			return nil, fmt.Errorf("coord: %w", err)
		}
		d.ln, d.reason = ch.Listener, ch.Reason
	}
	host := d.cfg.Host
	scheme := "http"
	cert, names, err := loadBundle(d.cfg.TLSBundle)
	switch {
	case err != nil:
		return nil, fmt.Errorf("coord: TLS bundle %s: %w", d.cfg.TLSBundle, err)
	case cert != nil:
		d.ln = tls.NewListener(d.ln, &tls.Config{Certificates: []tls.Certificate{*cert}, MinVersion: tls.VersionTLS12})
		scheme = "https"
		if len(names) > 0 {
			host = names[0]
		}
	}
	port := d.ln.Addr().(*net.TCPAddr).Port
	d.endpoint = scheme + "://" + net.JoinHostPort(host, strconv.Itoa(port))
	if err := d.lock.write(lockInfo{PID: os.Getpid(), Port: port, URL: d.endpoint, Started: d.cfg.Clock.Now().UTC()}); err != nil {
		return nil, fmt.Errorf("coord: %s: %w", LockFile, err)
	}
	return names, nil
}

// lockProject takes the project's lock, or fails naming the daemon that
// holds it.
func (d *Daemon) lockProject() error {
	// Through the project's files: a .coord linked outside the project
	// stops the daemon here, before it writes anything there.
	f, err := d.files.OpenFile("open", LockFile, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("coord: %w", err)
	}
	if d.lock, err = takeLock(f, d.cfg.Dir); err != nil {
		return err
	}
	return d.lock.write(lockInfo{PID: os.Getpid(), Started: d.cfg.Clock.Now().UTC()})
}

// ignoreStateDir writes a .gitignore of "*" into the state folder, unless
// it has one: the daemon's files (its token, conversations, debug log) are
// never committed with the project, and so never cloned with it.
func (d *Daemon) ignoreStateDir() {
	err := d.files.Create(filepath.Join(d.cfg.StateDir, ".gitignore"), 0o644, func(w io.Writer) error {
		_, err := io.WriteString(w, "# Written by mesh coord: the daemon's own files are not the project's.\n*\n")
		return err
	})
	if err != nil && !errors.Is(err, fs.ErrExist) {
		d.log.Warn("cannot write the state folder's .gitignore", "err", err)
	}
}

// URL is the address the daemon serves at, e.g. http://127.0.0.1:5570.
func (d *Daemon) URL() string { return d.endpoint }

// PortReason says why the daemon took its port.
func (d *Daemon) PortReason() string { return d.reason }

// Close stops serving (listener and sockets first), then the loops and the
// crons (runs under way are killed), releases the port in the registry and
// last the project's lock. It is safe to call twice and after a failed
// Start.
func (d *Daemon) Close() error {
	d.closeOnce.Do(func() {
		if d.srv != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			d.closeErr = d.srv.Shutdown(ctx)
			cancel()
		} else if d.ln != nil {
			d.ln.Close()
		}
		d.events.close()
		if d.cancel != nil {
			d.cancel()
		}
		d.wg.Wait()
		d.chat.Close()
		d.crons.Close()
		if d.dlog != nil {
			d.dlog.Close()
		}
		if d.ln != nil && d.cfg.Listener == nil {
			if err := portreg.Release(d.cfg.Registry, d.clusterID); err != nil {
				d.log.Warn("port registry", "err", err)
			}
		}
		if d.lock != nil {
			d.lock.release()
		}
	})
	return d.closeErr
}

// debug appends a daemon event to the debug log when debug is enabled.
func (d *Daemon) debug(lvl, tag, msg string, data map[string]any) {
	var v any
	if data != nil {
		v = data
	}
	d.debugEvent(debuglog.Event{Lvl: lvl, Tag: tag, Msg: msg, Data: v})
}

// debugEvent appends ev, from the daemon, when debug is enabled.
func (d *Daemon) debugEvent(ev debuglog.Event) {
	st := d.current()
	if d.dlog == nil || st == nil || !st.cluster.DebugEnabled {
		return
	}
	ev.Src = "daemon"
	if err := d.dlog.Append(ev); err != nil {
		d.log.Warn("debug log", "err", err)
	}
}

// cronEvent publishes a scheduler event and logs run ends.
func (d *Daemon) cronEvent(typ string, fields map[string]any) {
	d.events.publish(typ, fields)
	if typ != "cron.run.started" {
		d.debug("info", "cron", typ, fields)
	}
}
