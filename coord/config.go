package coord

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path"
	"slices"
	"time"

	"github.com/agentmesh/mesh/coord/agentenv"
	"github.com/agentmesh/mesh/coord/chat"
	"github.com/agentmesh/mesh/coord/cron"
	"github.com/agentmesh/mesh/coord/portreg"
	"github.com/agentmesh/mesh/coord/update"
	"github.com/agentmesh/mesh/internal/clock"
)

// Version is the daemon's version string.
var Version = "go-0.1.0"

// Config configures a Daemon. The zero value of a field means its default.
type Config struct {
	// Dir is the project folder: cluster.yaml, roadmap/, docs/.
	Dir string
	// Host is the address to listen on (127.0.0.1).
	Host string
	// Port is an explicit port; 0 lets the daemon choose (see portreg).
	Port int
	// PortMin and PortMax bound the ports it chooses from (5570..5589).
	PortMin, PortMax int
	// Registry is the machine-global port registry file.
	Registry string
	// Listener, when set, is served instead of choosing a port: for
	// tests and embedding.
	Listener net.Listener
	// StateDir, a folder inside Dir, keeps the daemon's own files: the
	// debug log, cron runs (default Dir/.coord).
	StateDir string
	// TLSBundle is a PEM file with the certificate chain and its private
	// key; when it exists the daemon serves HTTPS (default
	// StateDir/tls.pem).
	TLSBundle string
	// DeviceID names this machine; only the daemon whose device id is the
	// cluster's crons_owner fires crons.
	DeviceID string
	// AllowedOrigins are the host patterns (path.Match syntax, e.g.
	// "dash.example.com" or "localhost:*") whose pages may read the
	// answers (CORS), write (with the token) and open /events from
	// another origin. Programs that send no Origin are not concerned.
	AllowedOrigins []string
	// AllowedHosts are host name patterns (path.Match syntax) a request's
	// Host may name besides localhost, loopback addresses, the listen
	// address and the certificate's names; any other Host is refused.
	AllowedHosts []string
	// RequireToken makes every write carry the daemon's token (TokenFile),
	// programs' too; without it only writes from pages must.
	RequireToken bool
	// Poll is the file-change poll (1.5 s).
	Poll time.Duration
	// Heartbeat is the socket heartbeat (20 s).
	Heartbeat time.Duration
	// SendTimeout is how long a socket may take to accept a message
	// before it is dropped (5 s).
	SendTimeout time.Duration
	// CronTick is the cron scheduler's tick (10 s).
	CronTick time.Duration
	// DebugMaxBytes and DebugMaxAge bound the debug log (5 MB, 30 min).
	DebugMaxBytes int
	DebugMaxAge   time.Duration
	// Chat is the agent command and the limits of chat turns, queues and
	// attachments (chat.DefaultConfig); the daemon fills its folder,
	// clock, logger and hooks.
	Chat chat.Config
	// AgentEnv is the allow list of the variables of the daemon's
	// environment that agent turns and crons get: names, prefixes ending
	// in *, and "default" for agentenv.Default. The daemon's own MESH_*
	// variables never pass; cluster.yaml's env is added.
	AgentEnv []string
	// ArchiveAfter is how long a conversation stays idle before its
	// timeline is archived (90 days); ArchiveScan how often that is looked
	// for (1 h); StorageCache how long a storage report is served again
	// (30 s).
	ArchiveAfter, ArchiveScan, StorageCache time.Duration
	// SiteURL is where the standard (standard/version,
	// standard/agent-instructions.md) and the releases
	// (releases/mesh-<os>-<arch>) are published; empty turns the site
	// watcher and self-update off.
	SiteURL string
	// InsecureSite also takes a file:// site and an http:// site on a
	// loopback address (tests, a local mirror); otherwise only https.
	InsecureSite bool
	// ReleaseKey, when set, is the pinned Ed25519 key a release's
	// signature file must verify against (see update.SignedText).
	ReleaseKey ed25519.PublicKey
	// SiteTimeout bounds one check of the site, download included (5 min).
	SiteTimeout time.Duration
	// UpdateCooldown is the least time between two update attempts of the
	// watcher (5 min); UpdateMaxBytes bounds a release (256 MiB).
	UpdateCooldown time.Duration
	UpdateMaxBytes int64
	// Executable is the file a release replaces (the running executable).
	Executable string
	// InstructionsWatch is how often the instruction source is compared
	// with the rendered files (3 s).
	InstructionsWatch time.Duration
	// RunsKept is how many ended story runs are kept (100); RunsMax how
	// many may run at once (16).
	RunsKept, RunsMax int
	// Clock is the time source (the system clock).
	Clock clock.Clock
	// Logger receives the daemon's logs (discarded when nil).
	Logger *slog.Logger
}

// DefaultConfig is the configuration of `mesh coord` without flags.
func DefaultConfig() Config {
	return Config{Dir: ".", Host: "127.0.0.1", PortMin: portreg.DefaultMin, PortMax: portreg.DefaultMax,
		Registry: portreg.DefaultPath(), AllowedOrigins: []string{"localhost", "localhost:*", "127.0.0.1", "127.0.0.1:*"},
		Poll: 1500 * time.Millisecond, Heartbeat: 20 * time.Second, SendTimeout: 5 * time.Second,
		CronTick: cron.DefaultTick, DebugMaxBytes: 5 << 20, DebugMaxAge: 30 * time.Minute, Chat: chat.DefaultConfig(), RunsKept: 100, RunsMax: 16,
		AgentEnv:     []string{agentenv.DefaultWord},
		ArchiveAfter: 90 * 24 * time.Hour, ArchiveScan: time.Hour, StorageCache: 30 * time.Second,
		SiteTimeout: 5 * time.Minute, UpdateCooldown: 5 * time.Minute, UpdateMaxBytes: 256 << 20, InstructionsWatch: 3 * time.Second}
}

// ErrConfig is an unusable configuration.
var ErrConfig = errors.New("coord: invalid configuration")

// Validate checks c and fills what is left at zero from DefaultConfig.
func (c *Config) Validate() error {
	d := DefaultConfig()
	fill := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	fill(&c.Poll, d.Poll)
	fill(&c.Heartbeat, d.Heartbeat)
	fill(&c.SendTimeout, d.SendTimeout)
	fill(&c.CronTick, d.CronTick)
	fill(&c.DebugMaxAge, d.DebugMaxAge)
	fill(&c.ArchiveAfter, d.ArchiveAfter)
	fill(&c.ArchiveScan, d.ArchiveScan)
	fill(&c.StorageCache, d.StorageCache)
	fill(&c.SiteTimeout, d.SiteTimeout)
	fill(&c.UpdateCooldown, d.UpdateCooldown)
	fill(&c.InstructionsWatch, d.InstructionsWatch)
	if c.UpdateMaxBytes == 0 {
		c.UpdateMaxBytes = d.UpdateMaxBytes
	}
	if c.Executable == "" {
		c.Executable, _ = os.Executable()
	}
	if c.Dir == "" {
		c.Dir = d.Dir
	}
	if c.Host == "" {
		c.Host = d.Host
	}
	if c.PortMin == 0 && c.PortMax == 0 {
		c.PortMin, c.PortMax = d.PortMin, d.PortMax
	}
	if c.RunsKept == 0 {
		c.RunsKept = d.RunsKept
	}
	if c.RunsMax == 0 {
		c.RunsMax = d.RunsMax
	}
	if c.DebugMaxBytes == 0 {
		c.DebugMaxBytes = d.DebugMaxBytes
	}
	if c.Registry == "" {
		c.Registry = d.Registry
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.AgentEnv == nil {
		c.AgentEnv = d.AgentEnv
	}
	if _, err := agentenv.New(c.AgentEnv); err != nil {
		return fmt.Errorf("%w: --agent-env: %v", ErrConfig, err)
	}
	switch {
	case c.Port < 0 || c.Port > 65535:
		return fmt.Errorf("%w: port %d", ErrConfig, c.Port)
	case c.PortMin < 1 || c.PortMax > 65535 || c.PortMin > c.PortMax:
		return fmt.Errorf("%w: port range %d..%d", ErrConfig, c.PortMin, c.PortMax)
	case len(c.ReleaseKey) != 0 && len(c.ReleaseKey) != ed25519.PublicKeySize:
		return fmt.Errorf("%w: a release key is %d bytes", ErrConfig, ed25519.PublicKeySize)
	case c.Poll < 0 || c.Heartbeat < 0 || c.SendTimeout < 0 || c.CronTick < 0 || c.DebugMaxAge < 0 || c.ArchiveAfter < 0 || c.ArchiveScan < 0 || c.StorageCache < 0 ||
		c.SiteTimeout < 0 || c.UpdateCooldown < 0 || c.InstructionsWatch < 0 || c.UpdateMaxBytes < 0 || c.DebugMaxBytes < 0 || c.RunsKept < 0 || c.RunsMax < 0:
		return fmt.Errorf("%w: durations and sizes must be positive", ErrConfig)
	}
	if err := checkPatterns(slices.Concat(c.AllowedOrigins, c.AllowedHosts)); err != nil {
		return fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if c.SiteURL != "" {
		if err := update.CheckURL(c.SiteURL, c.InsecureSite); err != nil {
			return fmt.Errorf("%w: site URL %q: %v", ErrConfig, c.SiteURL, err)
		}
	}
	return nil
}

// checkPatterns refuses a host pattern that path.Match cannot read (an
// empty one matches nothing: MESH_COORD_ALLOW_ORIGIN= allows no page).
func checkPatterns(patterns []string) error {
	for _, p := range patterns {
		if _, err := path.Match(p, ""); err != nil {
			return fmt.Errorf("host pattern %q of --allow-origin or --allow-host is malformed", p)
		}
	}
	return nil
}
