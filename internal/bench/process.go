package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Proc is a `mesh node` running in a process of its own, on loopback:
// what a bench measures of it is its own, not shared with the bench's
// clients or other nodes.
type Proc struct {
	URL string
	// P2P is its full multiaddr, for --bootstrap.
	P2P    string
	exe    string
	args   []string // its command line after exe
	listen string   // its libp2p address, without /p2p/
	cmd    *exec.Cmd
	dir    string        // its data directory
	exited chan struct{} // closed once the process ended
}

// StartProc runs exe node with data directory dir on free loopback ports,
// plus args, and waits until it answers /health (its log goes to
// dir/node.log).
func StartProc(ctx context.Context, exe, dir string, args ...string) (*Proc, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	httpPort, err := freePort()
	if err != nil {
		return nil, err
	}
	p2pPort, err := freePort()
	if err != nil {
		return nil, err
	}
	listen := "/ip4/127.0.0.1/tcp/" + strconv.Itoa(p2pPort)
	p := &Proc{URL: "http://127.0.0.1:" + strconv.Itoa(httpPort), exe: exe, dir: dir, listen: listen,
		args: append([]string{"node", "--data", dir, "--http", "127.0.0.1:" + strconv.Itoa(httpPort), "--listen", listen}, args...)}
	if err := p.start(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

// Restart stops the node and runs it again, on the same ports with the
// same data: a process of its own again, with what it stored.
func (p *Proc) Restart(ctx context.Context) error {
	p.Stop()
	return p.start(ctx)
}

// start runs the node's command line and waits until it answers /health.
func (p *Proc) start(ctx context.Context) error {
	logf, err := os.OpenFile(filepath.Join(p.dir, "node.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(p.exe, p.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	p.cmd, p.exited = cmd, exited
	go func() { cmd.Wait(); close(exited) }()
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
		var h struct {
			PeerID string `json:"peer_id"`
		}
		if getJSON(ctx, p.URL+"/health", &h) == nil {
			p.P2P = p.listen + "/p2p/" + h.PeerID
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("the node exited: see %s", logf.Name())
		default:
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			p.Stop()
			return fmt.Errorf("the node never answered /health: see %s", logf.Name())
		}
	}
}

// Stop ends the node: SIGTERM, then SIGKILL after 30 s.
func (p *Proc) Stop() {
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		<-p.exited
	}
}

// Memory is what the node holds: its live heap as of its last
// collection (its next collection's goal less GOGC's headroom) and its
// heap in use (garbage included), from its /metrics; its resident set
// and the anonymous part of it, from /proc (the rest is files mapped, the
// store's value log among them, which the kernel may take back).
func (p *Proc) Memory(ctx context.Context) (Mem, error) {
	m, err := metrics(ctx, p.URL, "go_memstats_heap_inuse_bytes", "go_memstats_next_gc_bytes", "go_gc_gogc_percent")
	if err != nil {
		return Mem{}, err
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return Mem{}, err
	}
	out := Mem{Heap: m["go_memstats_heap_inuse_bytes"], Live: m["go_memstats_next_gc_bytes"] / (1 + m["go_gc_gogc_percent"]/100)}
	for _, line := range strings.Split(string(b), "\n") {
		name, v, _ := strings.Cut(line, ":")
		kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
		switch name {
		case "VmRSS":
			out.RSS = kb * 1024
		case "RssAnon":
			out.Anon = kb * 1024
		}
	}
	smaps, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", p.cmd.Process.Pid))
	if err != nil {
		return Mem{}, err
	}
	out.Store = mapped(smaps, filepath.Join(p.dir, "store"))
	out.DHT = mapped(smaps, filepath.Join(p.dir, "dht"))
	return out, nil
}

// mapped is the resident bytes of the files under dir that smaps (a
// process's /proc/<pid>/smaps) maps: Badger's value logs, tables and
// write-ahead logs, which it writes and reads through memory maps.
func mapped(smaps []byte, dir string) float64 {
	var total float64
	in := false
	for _, line := range strings.Split(string(smaps), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) > 0 && !strings.HasSuffix(f[0], ":"): // a mapping
			in = len(f) >= 6 && strings.HasPrefix(f[5], dir+"/")
		case in && len(f) == 3 && f[0] == "Rss:":
			kb, _ := strconv.ParseFloat(f[1], 64)
			total += kb * 1024
		}
	}
	return total
}

// pidCPU is the CPU time (user and system) process pid has used, from
// /proc (in the kernel's ticks of 10 ms); 0 when it cannot be read.
func pidCPU(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command's name, which ends with ')': utime
	// and stime are the 12th and 13th.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// Mem is a node's memory, in bytes: Store and DHT are the resident pages
// of the files of its data directory's store/ and dht/ (in RSS, not in
// Anon).
type Mem struct{ Live, Heap, RSS, Anon, Store, DHT float64 }

// Sub is m less o.
func (m Mem) Sub(o Mem) Mem {
	return Mem{m.Live - o.Live, m.Heap - o.Heap, m.RSS - o.RSS, m.Anon - o.Anon, m.Store - o.Store, m.DHT - o.DHT}
}

// Max is the larger of m and o, field by field.
func (m Mem) Max(o Mem) Mem {
	return Mem{max(m.Live, o.Live), max(m.Heap, o.Heap), max(m.RSS, o.RSS), max(m.Anon, o.Anon), max(m.Store, o.Store), max(m.DHT, o.DHT)}
}
