package coord

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/agentmesh/mesh/coord/clock"
	"github.com/agentmesh/mesh/coord/cron"
	"github.com/agentmesh/mesh/coord/portreg"
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
	// StateDir keeps the daemon's own files: the debug log, cron runs
	// (default Dir/.coord).
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
	// answers (CORS) and open /events from another origin. Clients that
	// send no Origin are always let in.
	AllowedOrigins []string
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
		CronTick: cron.DefaultTick, DebugMaxBytes: 5 << 20, DebugMaxAge: 30 * time.Minute}
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
	if c.Dir == "" {
		c.Dir = d.Dir
	}
	if c.Host == "" {
		c.Host = d.Host
	}
	if c.PortMin == 0 && c.PortMax == 0 {
		c.PortMin, c.PortMax = d.PortMin, d.PortMax
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
	switch {
	case c.Port < 0 || c.Port > 65535:
		return fmt.Errorf("%w: port %d", ErrConfig, c.Port)
	case c.PortMin < 1 || c.PortMax > 65535 || c.PortMin > c.PortMax:
		return fmt.Errorf("%w: port range %d..%d", ErrConfig, c.PortMin, c.PortMax)
	case c.Poll < 0 || c.Heartbeat < 0 || c.SendTimeout < 0 || c.CronTick < 0 || c.DebugMaxAge < 0 || c.DebugMaxBytes < 0:
		return fmt.Errorf("%w: durations and sizes must be positive", ErrConfig)
	}
	return nil
}
