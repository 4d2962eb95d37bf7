// Package portreg chooses a coordination daemon's port and keeps the
// machine-global registry of which cluster holds which port: an explicit
// port wins; otherwise the cluster's sticky port, else the first free port
// of the range that no other live cluster holds and, while others remain,
// that is no other cluster's sticky port. A port another live cluster
// holds is never taken. The registry is a JSON file guarded by an
// exclusive lock on a file next to it, so daemons starting together
// choose one at a time.
package portreg

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/agentmesh/mesh/internal/atomicfile"
)

// Default range of ports.
const (
	DefaultMin = 5570
	DefaultMax = 5589
)

// ErrTaken is a port that another live cluster holds, or none free.
var ErrTaken = errors.New("port taken")

// Entry is one cluster in the registry.
type Entry struct {
	// Sticky is the port the cluster took last when it had to choose.
	Sticky int `json:"sticky_port,omitempty"`
	// Port and PID are the live daemon's; 0 when none runs.
	Port    int       `json:"port,omitempty"`
	PID     int       `json:"pid,omitempty"`
	Dir     string    `json:"dir,omitempty"`
	Updated time.Time `json:"updated"`
}

// Registry is the registry file's content: cluster id to entry.
type Registry struct {
	Clusters map[string]*Entry `json:"clusters"`
}

// Request is what a daemon asks for.
type Request struct {
	Cluster string
	Dir     string
	Host    string // the address to bind, e.g. 127.0.0.1
	// Explicit is --port (0: none); Preferred is cluster.yaml's
	// architect.port (0: none).
	Explicit, Preferred int
	Min, Max            int
}

// Choice is the listener and why its port was chosen.
type Choice struct {
	Listener net.Listener
	Port     int
	Reason   string
	// Skipped says which candidates were passed over and why.
	Skipped []string
}

// alive reports whether a process runs with pid.
var alive = func(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// Choose picks and binds a port for req under the registry at path,
// records it and returns the listener.
func Choose(path string, req Request) (Choice, error) {
	if req.Min == 0 && req.Max == 0 {
		req.Min, req.Max = DefaultMin, DefaultMax
	}
	var ch Choice
	err := locked(path, func(reg *Registry) error {
		held := map[int]string{}
		sticky := map[int]string{}
		for id, e := range reg.Clusters {
			if id == req.Cluster {
				continue
			}
			if e.Port > 0 && alive(e.PID) {
				held[e.Port] = id
			}
			if e.Sticky > 0 {
				sticky[e.Sticky] = id
			}
		}
		var err error
		ch, err = choose(req, reg.Clusters[req.Cluster], held, sticky)
		if err != nil {
			return err
		}
		e := reg.Clusters[req.Cluster]
		if e == nil {
			e = &Entry{}
			reg.Clusters[req.Cluster] = e
		}
		if req.Explicit == 0 {
			e.Sticky = ch.Port
		}
		e.Port, e.PID, e.Dir, e.Updated = ch.Port, os.Getpid(), req.Dir, time.Now().UTC()
		return nil
	})
	if err != nil && ch.Listener != nil {
		ch.Listener.Close()
		return Choice{}, err
	}
	return ch, err
}

func choose(req Request, own *Entry, held, sticky map[int]string) (Choice, error) {
	var ch Choice
	try := func(port int, why string) bool {
		if id, ok := held[port]; ok {
			ch.Skipped = append(ch.Skipped, fmt.Sprintf("%d (%s): held by live cluster %q", port, why, id))
			return false
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(req.Host, strconv.Itoa(port)))
		if err != nil {
			ch.Skipped = append(ch.Skipped, fmt.Sprintf("%d (%s): %v", port, why, err))
			return false
		}
		ch.Listener, ch.Port, ch.Reason = ln, ln.Addr().(*net.TCPAddr).Port, why
		return true
	}
	if req.Explicit != 0 {
		if id, ok := held[req.Explicit]; ok {
			return ch, fmt.Errorf("%w: port %d is held by live cluster %q", ErrTaken, req.Explicit, id)
		}
		if !try(req.Explicit, "explicit --port") {
			return ch, fmt.Errorf("port %d: %s", req.Explicit, ch.Skipped[len(ch.Skipped)-1])
		}
		return ch, nil
	}
	if req.Preferred != 0 && try(req.Preferred, "architect.port of cluster.yaml") {
		return ch, nil
	}
	if own != nil && own.Sticky != 0 && own.Sticky != req.Preferred && try(own.Sticky, "sticky port of the cluster in the registry") {
		return ch, nil
	}
	for _, others := range []bool{false, true} {
		for p := req.Min; p <= req.Max; p++ {
			if _, isSticky := sticky[p]; isSticky != others || (own != nil && p == own.Sticky) {
				continue
			}
			why := fmt.Sprintf("first free port in %d..%d", req.Min, req.Max)
			if others {
				why += fmt.Sprintf(" (the sticky port of cluster %q, which is not running)", sticky[p])
			}
			if try(p, why) {
				return ch, nil
			}
		}
	}
	return ch, fmt.Errorf("%w: no free port in %d..%d", ErrTaken, req.Min, req.Max)
}

// Release marks cluster's daemon as stopped (its sticky port stays).
func Release(path, cluster string) error {
	return locked(path, func(reg *Registry) error {
		if e := reg.Clusters[cluster]; e != nil && e.PID == os.Getpid() {
			e.Port, e.PID, e.Updated = 0, 0, time.Now().UTC()
		}
		return nil
	})
}

// Read returns the registry at path (empty when there is none).
func Read(path string) (*Registry, error) {
	reg := &Registry{Clusters: map[string]*Entry{}}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return reg, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, reg); err != nil {
		// A damaged registry is only memory of past choices: start over.
		return &Registry{Clusters: map[string]*Entry{}}, nil
	}
	if reg.Clusters == nil {
		reg.Clusters = map[string]*Entry{}
	}
	return reg, nil
}

// locked runs f on the registry under an exclusive lock and writes it
// back when f succeeds.
func locked(path string, f func(*Registry) error) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("port registry: %w", err)
	}
	lock, err := os.OpenFile(path+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("port registry: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("port registry: lock: %w", err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	reg, err := Read(path)
	if err != nil {
		return fmt.Errorf("port registry: %w", err)
	}
	if err := f(reg); err != nil {
		return err
	}
	b, err := json.MarshalIndent(reg, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.Write(path, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("port registry: %w", err)
	}
	return nil
}

// DefaultPath is the registry in the user's configuration folder.
func DefaultPath() string {
	dir, err := os.UserConfigDir()
	if err != nil {
		dir = os.TempDir()
	}
	return filepath.Join(dir, "mesh", "coord-ports.json")
}
