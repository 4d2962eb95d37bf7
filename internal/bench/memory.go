package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// MemoryResult is what idle sockets cost the node's process.
type MemoryResult struct {
	Conns int
	// InUse is heap plus goroutine stacks in use, after a collection, per
	// connection; RSS the growth of the resident set per connection right
	// after the sockets opened (garbage of the handshakes included), and
	// Settled once freed memory went back to the system, as the runtime's
	// scavenger does by itself on an idle node.
	InUse, RSS, Settled float64
}

func (r MemoryResult) String() string {
	return fmt.Sprintf("%d idle sockets: %.1f KiB per connection in use (heap+stacks), %.1f KiB resident (%.1f KiB once freed memory is returned)",
		r.Conns, r.InUse/1024, r.RSS/1024, r.Settled/1024)
}

// IdleMemory opens n sockets to cluster id on the node at base from
// another process (clients builds its command, given the wall address),
// and measures what they cost this process, which runs the node.
func IdleMemory(ctx context.Context, base string, n int, clients func(wsURL string, n int) *exec.Cmd) (MemoryResult, error) {
	id, err := CreateCluster(ctx, base)
	if err != nil {
		return MemoryResult{}, err
	}
	RaiseFileLimit()
	before := inUse()
	debug.FreeOSMemory()
	rssBefore := rss()
	cmd := clients(WSURL(base, id, "idle", nil), n)
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
	case <-time.After(5 * time.Minute):
		return MemoryResult{}, fmt.Errorf("the clients took too long")
	}
	time.Sleep(time.Second) // writers and greetings settle
	after, rssAfter := inUse(), rss()
	debug.FreeOSMemory()
	settled := rss()
	per := func(a, b uint64) float64 { return (float64(a) - float64(b)) / float64(n) }
	return MemoryResult{Conns: n, InUse: per(after, before), RSS: per(rssAfter, rssBefore), Settled: per(settled, rssBefore)}, nil
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

// HoldClients opens n sockets at wsURL, prints "ready" to out, and keeps
// them open until stop ends (the parent closes our stdin).
func HoldClients(ctx context.Context, wsURL string, n int, out io.Writer, stop io.Reader) error {
	RaiseFileLimit()
	conns, err := dial(ctx, n, 64, func(int) string { return wsURL })
	if err != nil {
		return err
	}
	defer closeAll(conns)
	for _, c := range conns {
		c.CloseRead(ctx) // answer pings, drop frames
	}
	fmt.Fprintln(out, "ready")
	io.Copy(io.Discard, stop)
	return nil
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
