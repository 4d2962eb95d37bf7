package node

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/agentmesh/mesh/registryapi"
)

// Version is the node software version, reported by /health.
var Version = "0.1.0-dev"

// Config configures a node. The zero value is not usable; start from
// DefaultConfig.
type Config struct {
	// DataDir holds the node's key and its Badger store. Ignored for the
	// store when InMemory is set (the key is then kept only in memory too,
	// unless DataDir is also set).
	DataDir string `json:"data_dir"`
	// InMemory keeps all state in RAM: for tests and throw-away nodes.
	InMemory bool `json:"in_memory"`
	// HTTPAddr is the listen address of the HTTP bridge; port 0 picks one.
	HTTPAddr string `json:"http_addr"`
	// PublicURL is the base URL clients use to reach this node (agent
	// handles are built on it). Empty means http://<the listen address>.
	PublicURL string `json:"public_url"`
	// SyncWrites makes every acknowledged write durable against power loss
	// (fsync per commit). A process crash never loses acknowledged writes.
	SyncWrites bool `json:"sync_writes"`
	// OnlineWindow is how long after its last heartbeat an agent shows online.
	OnlineWindow time.Duration `json:"online_window"`
	// Key is the node's identity key. Nil means load or create
	// DataDir/node.key. An agent embedding a node may pass its own key.
	Key ed25519.PrivateKey `json:"-"`
	// Logger receives the node's logs; nil discards them.
	Logger *slog.Logger `json:"-"`
	// Now is the clock; nil means time.Now. Tests inject their own.
	Now func() time.Time `json:"-"`
}

// DefaultConfig returns the configuration of `mesh node` without flags.
func DefaultConfig() Config {
	return Config{
		DataDir:      "./mesh-data",
		HTTPAddr:     "127.0.0.1:7777",
		SyncWrites:   true,
		OnlineWindow: registryapi.DefaultOnlineWindow,
	}
}

// Validate reports the first problem with c.
func (c *Config) Validate() error {
	if c.DataDir == "" && !c.InMemory {
		return errors.New("node: DataDir is required unless InMemory is set")
	}
	if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
		return fmt.Errorf("node: HTTPAddr %q: %w", c.HTTPAddr, err)
	}
	if c.OnlineWindow < 0 {
		return errors.New("node: OnlineWindow must not be negative")
	}
	if c.Key != nil && len(c.Key) != ed25519.PrivateKeySize {
		return errors.New("node: Key is not an Ed25519 private key")
	}
	return nil
}
