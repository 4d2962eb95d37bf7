package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coder/websocket"

	"github.com/agentmesh/mesh/wall"
)

// MemoryResult is what idle sockets cost the node's process.
type MemoryResult struct {
	Conns int
	// Open is how many of them the node still held when measured (the
	// others were dropped, as slow consumers of the presence storm).
	Open int
	// InUse is heap plus goroutine stacks in use, after a collection, per
	// connection; RSS the growth of the resident set per connection right
	// after the sockets opened (garbage of the handshakes included), and
	// Settled once freed memory went back to the system, as the runtime's
	// scavenger does by itself on an idle node.
	InUse, RSS, Settled float64
}

func (r MemoryResult) String() string {
	return fmt.Sprintf("%d idle sockets of distinct members (%d still open): %.1f KiB per connection in use (heap+stacks), %.1f KiB resident (%.1f KiB once freed memory is returned)",
		r.Conns, r.Open, r.InUse/1024, r.RSS/1024, r.Settled/1024)
}

// IdleMemory opens n sockets to a new cluster on the node at base from
// another process (clients builds its command, given the wall address
// ending in agent=<prefix>), each with a handle of its own, and measures
// what they cost this process, which runs the node, once every member's
// arrival has been announced to every socket there before it.
func IdleMemory(ctx context.Context, base string, n int, clients func(wsURL string, n int) *exec.Cmd) (MemoryResult, error) {
	cl, err := CreateCluster(ctx, base)
	if err != nil {
		return MemoryResult{}, err
	}
	defer cl.Delete()
	RaiseFileLimit()
	before := inUse()
	debug.FreeOSMemory()
	rssBefore := rss()
	cmd := clients(WSURL(base, cl.ID, "idle-", nil), n)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return MemoryResult{}, err
	}
	defer func() { stdin.Close(); cmd.Wait() }()
	ready := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == "ready" {
				ready <- nil
				return
			}
		}
		ready <- fmt.Errorf("the client process ended before its sockets were open")
	}()
	select {
	case err := <-ready:
		if err != nil {
			return MemoryResult{}, err
		}
	case <-time.After(15 * time.Minute):
		return MemoryResult{}, fmt.Errorf("the clients took too long")
	}
	time.Sleep(time.Second) // writers settle
	open, err := openSockets(ctx, base)
	if err != nil {
		return MemoryResult{}, err
	}
	after, rssAfter := inUse(), rss()
	debug.FreeOSMemory()
	settled := rss()
	per := func(a, b uint64) float64 { return (float64(a) - float64(b)) / float64(n) }
	return MemoryResult{Conns: n, Open: open, InUse: per(after, before), RSS: per(rssAfter, rssBefore), Settled: per(settled, rssBefore)}, nil
}

// openSockets reads how many wall sockets the node at base holds from its
// metrics.
func openSockets(ctx context.Context, base string) (int, error) {
	m, err := metrics(ctx, base, "mesh_wall_sockets")
	return int(m["mesh_wall_sockets"]), err
}

func inUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse + m.StackInuse
}

// rss is the process's resident set, from /proc (0 where there is none).
func rss() uint64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseUint(f[1], 10, 64)
	return pages * uint64(os.Getpagesize())
}

// HoldClients opens n sockets at wsURL, which ends in agent=<prefix>, the
// i-th with handle <prefix><i>; it reads what they are sent until each
// socket knows every member is online (from its welcome, then presence
// frames), prints "ready" to out, and keeps them open until stop ends (the
// parent closes our stdin).
func HoldClients(ctx context.Context, wsURL string, n int, out io.Writer, stop io.Reader) error {
	RaiseFileLimit()
	var complete, closed atomic.Int64
	read := func(c *websocket.Conn, welcome []byte) {
		go func() { // also answers pings
			known := onlineIn(welcome)
			counted := false
			for {
				if !counted && known == n {
					counted = true
					complete.Add(1)
				}
				_, data, err := c.Read(ctx)
				if err != nil {
					closed.Add(1)
					return
				}
				known += presenceChange(data)
			}
		}()
	}
	conns, err := dial(ctx, n, 64, func(i int) string { return wsURL + strconv.Itoa(i) }, read)
	if err != nil {
		return err
	}
	defer closeAll(conns)
	for deadline := time.Now().Add(10 * time.Minute); complete.Load() < int64(n); time.Sleep(100 * time.Millisecond) {
		if k := closed.Load(); k > 0 || time.Now().After(deadline) {
			return fmt.Errorf("%d of %d sockets heard of every member; the node closed %d sockets", complete.Load(), n, k)
		}
	}
	fmt.Fprintln(out, "ready")
	io.Copy(io.Discard, stop)
	return nil
}

// onlineIn counts the members a welcome frame lists online.
func onlineIn(welcome []byte) int {
	var w wall.Frame
	json.Unmarshal(welcome, &w)
	return len(w.Online)
}

// presenceChange is what a frame changes in the count of members online:
// +1 for a presence frame saying one came online, -1 for one going
// offline, else 0. A welcome lists who was online, and presence frames
// follow it only for changes, so the two add up. It looks at the bytes
// only: n sockets get n(n-1)/2 presence frames.
func presenceChange(frame []byte) int {
	if !bytes.HasPrefix(frame, []byte(`{"kind":"presence"`)) {
		return 0
	}
	if bytes.Contains(frame, []byte(`"status":"offline"`)) {
		return -1
	}
	return 1
}

// RaiseFileLimit lifts the open-files limit to its hard maximum: many
// sockets need many descriptors.
func RaiseFileLimit() {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) == nil && l.Cur < l.Max {
		l.Cur = l.Max
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	}
}
