package coord

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// LockFile, under the project folder, is held by the one daemon that runs
// on the project, and names it.
const LockFile = ".coord/daemon.lock"

// ErrRunning is a project another live daemon runs on.
var ErrRunning = errors.New("another daemon runs on this project")

// lockInfo is what the lock file says of the daemon that holds it.
type lockInfo struct {
	PID     int       `json:"pid"`
	Port    int       `json:"port,omitempty"`
	URL     string    `json:"url,omitempty"`
	Started time.Time `json:"started"`
}

// projectLock is an exclusive flock on the lock file: the kernel lets it
// go when its holder ends, however it ends, so a crashed daemon's project
// is taken over by the next one. The file itself stays: a lock file
// removed while another daemon opens it would let two hold two files.
type projectLock struct {
	f *os.File
}

// takeLock locks the project whose lock file f is, or fails with
// ErrRunning naming the daemon that holds it.
func takeLock(f *os.File, dir string) (*projectLock, error) {
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		defer f.Close()
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("coord: lock %s: %w", LockFile, err)
		}
		var held lockInfo
		b, _ := os.ReadFile(f.Name())
		json.Unmarshal(b, &held)
		who := fmt.Sprintf("pid %d, port %d (%s)", held.PID, held.Port, held.URL)
		if held.Port == 0 {
			who = fmt.Sprintf("pid %d (starting: no port yet)", held.PID)
		}
		return nil, fmt.Errorf("coord: %w: %s: %s; stop it first", ErrRunning, dir, who)
	}
	return &projectLock{f: f}, nil
}

// write says who holds the lock.
func (l *projectLock) write(info lockInfo) error {
	b, _ := json.Marshal(info)
	b = append(b, '\n')
	if _, err := l.f.WriteAt(b, 0); err != nil {
		return err
	}
	return l.f.Truncate(int64(len(b)))
}

// release empties the file and lets the lock go.
func (l *projectLock) release() {
	l.f.Truncate(0)
	syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
	l.f.Close()
}
