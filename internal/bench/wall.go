package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/agentmesh/mesh/wall"
)

// WSURL is the wall address of cluster id on the node at base.
func WSURL(base, id, agent string, extra url.Values) string {
	q := url.Values{"agent": {agent}}
	for k, v := range extra {
		q[k] = v
	}
	return "ws" + strings.TrimPrefix(base, "http") + "/v1/clusters/" + id + "/ws?" + q.Encode()
}

// receiver is a socket that counts messages and times them.
type receiver struct {
	conn     *websocket.Conn
	messages atomic.Int64
}

// dial opens n sockets, `parallel` at a time, and waits for each welcome;
// then, if set, opened(c, welcome) takes over reading c (at once: a socket
// left unread while the others open would fall behind on presence frames).
func dial(ctx context.Context, n, parallel int, urlOf func(i int) string, opened func(c *websocket.Conn, welcome []byte)) ([]*websocket.Conn, error) {
	conns := make([]*websocket.Conn, n)
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			c, _, err := websocket.Dial(ctx, urlOf(i), nil)
			var welcome []byte
			if err == nil {
				c.SetReadLimit(1 << 20)
				_, welcome, err = c.Read(ctx)
			}
			if err != nil {
				mu.Lock()
				if first == nil {
					first = fmt.Errorf("socket %d: %w", i, err)
				}
				mu.Unlock()
				return
			}
			conns[i] = c
			if opened != nil {
				opened(c, welcome)
			}
		})
	}
	wg.Wait()
	if first != nil {
		closeAll(conns)
	}
	return conns, first
}

func closeAll(conns []*websocket.Conn) {
	for _, c := range conns {
		if c != nil {
			c.CloseNow()
		}
	}
}

// FanoutOptions configures Fanout.
type FanoutOptions struct {
	Receivers int           // sockets receiving
	Size      int           // payload bytes
	Duration  time.Duration // measured sending time
	Window    int           // messages in flight (sent, not yet answered)
	// Memory reads the node's memory from its /metrics before and after
	// the receivers connect, and at the end of the sending: for a node in
	// another process (in this one, the receivers' memory would count).
	Memory bool
}

// FanoutResult is what Fanout measured.
type FanoutResult struct {
	Messages, Deliveries int64
	Refused              int64 // messages the node refused (error frames)
	Elapsed              time.Duration
	PerSecond            float64
	Disconnected         int64 // receivers dropped as slow consumers
	// PerConn is the node's memory per receiver, when Memory was asked.
	PerConn *ConnMemory
}

// ConnMemory is what each connection costs a node: heap and stacks in use
// (Go's own figures, without a collection first) and resident memory,
// with the receivers idle and at the end of the sending.
type ConnMemory struct {
	IdleInUse, IdleRSS, LoadedInUse, LoadedRSS float64
}

func (r FanoutResult) String() string {
	s := fmt.Sprintf("%d messages (%d refused), %d deliveries in %.1fs: %.0f deliveries/s (%d receivers disconnected)",
		r.Messages, r.Refused, r.Deliveries, r.Elapsed.Seconds(), r.PerSecond, r.Disconnected)
	if m := r.PerConn; m != nil {
		s += fmt.Sprintf("; node memory per connection: %.1f KiB in use, %.1f KiB resident idle; %.1f KiB, %.1f KiB at the end of the sending",
			m.IdleInUse/1024, m.IdleRSS/1024, m.LoadedInUse/1024, m.LoadedRSS/1024)
	}
	return s
}

// Fanout measures deliveries per second on one node: one sender, many
// receivers, all in one cluster. The sender keeps Window messages in
// flight, paced by their answers: an ack once every receiver got the
// frame, or an error frame when the node refused it.
func Fanout(ctx context.Context, base string, o FanoutOptions) (FanoutResult, error) {
	cl, err := CreateCluster(ctx, base)
	if err != nil {
		return FanoutResult{}, err
	}
	defer cl.Delete()
	mem := nodeMemory{base: base, on: o.Memory}
	if err := mem.read(ctx); err != nil {
		return FanoutResult{}, err
	}
	conns, err := dial(ctx, o.Receivers, 64, func(i int) string { return WSURL(base, cl.ID, "r"+strconv.Itoa(i), nil) }, nil)
	if err != nil {
		return FanoutResult{}, err
	}
	defer closeAll(conns)
	var delivered, dropped atomic.Int64
	for _, c := range conns {
		go countMessages(ctx, c, &delivered, &dropped)
	}
	sender, err := wall.Dial(ctx, WSURL(base, cl.ID, "sender", url.Values{"vis": {"ghost"}}))
	if err != nil {
		return FanoutResult{}, err
	}
	defer sender.Close()
	if _, err := sender.Next(ctx); err != nil {
		return FanoutResult{}, err
	}
	if err := mem.read(ctx); err != nil {
		return FanoutResult{}, err
	}
	res, err := sendPaced(ctx, sender, o)
	if err != nil {
		return res, err
	}
	// An ack means the node wrote the frame to every socket; the receivers
	// may still be reading the last ones.
	for settle := time.Now().Add(5 * time.Second); delivered.Load() < res.Deliveries && time.Now().Before(settle); {
		time.Sleep(time.Millisecond)
	}
	if err := mem.read(ctx); err != nil {
		return res, err
	}
	res.Deliveries, res.Disconnected = delivered.Load(), dropped.Load()
	res.PerSecond = float64(res.Deliveries) / res.Elapsed.Seconds()
	res.PerConn = mem.perConn(o.Receivers)
	return res, nil
}

// countMessages counts the message frames c reads, and whether the node
// dropped it as a slow consumer.
func countMessages(ctx context.Context, c *websocket.Conn, delivered, dropped *atomic.Int64) {
	for {
		_, r, err := c.Reader(ctx)
		if err != nil {
			if ctx.Err() == nil && websocket.CloseStatus(err) == websocket.StatusPolicyViolation {
				dropped.Add(1)
			}
			return
		}
		var head [32]byte
		n, _ := io.ReadFull(r, head[:])
		io.Copy(io.Discard, r)
		if strings.HasPrefix(string(head[:n]), `{"kind":"message"`) {
			delivered.Add(1)
		}
	}
}

// sendPaced sends Size-byte messages from sender for Duration, Window at
// a time, and waits for the last answers. Its result's Deliveries are
// those the acks reported.
func sendPaced(ctx context.Context, sender *wall.Client, o FanoutOptions) (FanoutResult, error) {
	payload := strings.Repeat("x", max(o.Size-2, 0)) // a JSON string of Size bytes
	inFlight := make(chan struct{}, o.Window)
	failed := make(chan error, 1)
	var acked, refused atomic.Int64
	go func() {
		for {
			f, err := sender.Next(ctx)
			if err != nil {
				failed <- err
				return
			}
			switch f.Kind {
			case wall.KindAck:
				acked.Add(int64(f.Delivered))
			case wall.KindError:
				refused.Add(1)
			default:
				continue
			}
			<-inFlight
		}
	}()
	start := time.Now()
	var sent int64
	for time.Since(start) < o.Duration {
		select {
		case inFlight <- struct{}{}:
		case err := <-failed:
			return FanoutResult{}, err
		}
		if err := sender.Send(ctx, payload); err != nil {
			return FanoutResult{}, err
		}
		sent++
	}
	for range o.Window { // drain: wait for the last answers
		select {
		case inFlight <- struct{}{}:
		case <-time.After(10 * time.Second):
			return FanoutResult{}, fmt.Errorf("answers stopped")
		}
	}
	return FanoutResult{Messages: sent, Refused: refused.Load(), Deliveries: acked.Load(), Elapsed: time.Since(start)}, nil
}

// nodeMemory reads a node's memory from its /metrics (when on), a reading
// per call of read.
type nodeMemory struct {
	base       string
	on         bool
	inUse, rss []float64
}

func (m *nodeMemory) read(ctx context.Context) error {
	if !m.on {
		return nil
	}
	v, err := metrics(ctx, m.base, "go_memstats_heap_inuse_bytes", "go_memstats_stack_inuse_bytes", "process_resident_memory_bytes")
	if err != nil {
		return err
	}
	m.inUse = append(m.inUse, v["go_memstats_heap_inuse_bytes"]+v["go_memstats_stack_inuse_bytes"])
	m.rss = append(m.rss, v["process_resident_memory_bytes"])
	return nil
}

// perConn divides the growth since the first reading, at the second and
// third, among n connections.
func (m *nodeMemory) perConn(n int) *ConnMemory {
	if len(m.inUse) < 3 || n == 0 {
		return nil
	}
	per := func(v []float64, i int) float64 { return (v[i] - v[0]) / float64(n) }
	return &ConnMemory{IdleInUse: per(m.inUse, 1), IdleRSS: per(m.rss, 1), LoadedInUse: per(m.inUse, 2), LoadedRSS: per(m.rss, 2)}
}

// LatencyOptions configures Latency.
type LatencyOptions struct {
	Rate     int // messages per second from the sender
	Duration time.Duration
	Size     int
}

// LatencyResult is what Latency measured: send-to-receive times over all
// receivers, and how many messages each receiver got of those the node
// took (Sent less Refused).
type LatencyResult struct {
	Percentiles
	// Join is how long the sender waited for its welcome: on a node that
	// did not serve the cluster yet, the room's start and its roster
	// exchanges with the receivers' nodes.
	Join     time.Duration
	Sent     int
	Refused  int   // messages the sender's node refused (error frames)
	Received []int // per receiver
}

func (r LatencyResult) String() string {
	lost := 0
	for _, n := range r.Received {
		lost += r.Sent - r.Refused - n
	}
	return fmt.Sprintf("%s; %d sent, %d refused, received per receiver %v, %d lost; the sender joined in %v",
		r.Percentiles, r.Sent, r.Refused, r.Received, lost, r.Join.Round(10*time.Microsecond))
}

// Latency measures send-to-receive time across nodes: a sender on the
// first node, one receiver on each of the others, messages at Rate.
func Latency(ctx context.Context, bases []string, o LatencyOptions) (LatencyResult, error) {
	cl, err := CreateCluster(ctx, bases[0])
	if err != nil {
		return LatencyResult{}, err
	}
	defer cl.Delete()
	conns, err := dial(ctx, len(bases)-1, 4, func(i int) string { return WSURL(bases[i+1], cl.ID, "rx"+strconv.Itoa(i), nil) }, nil)
	if err != nil {
		return LatencyResult{}, err
	}
	defer closeAll(conns)
	var mu sync.Mutex
	var samples []time.Duration
	received := make([]int, len(conns))
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Go(func() {
			for {
				_, data, err := c.Read(ctx)
				if err != nil {
					return
				}
				var f struct {
					Kind    string `json:"kind"`
					Payload struct {
						Sent int64 `json:"sent"`
					} `json:"payload"`
				}
				if json.Unmarshal(data, &f) == nil && f.Kind == wall.KindMessage {
					d := time.Since(time.Unix(0, f.Payload.Sent))
					mu.Lock()
					samples = append(samples, d)
					received[i]++
					mu.Unlock()
				}
			}
		})
	}
	dialed := time.Now()
	sender, err := wall.Dial(ctx, WSURL(bases[0], cl.ID, "sender", nil))
	if err != nil {
		return LatencyResult{}, err
	}
	defer sender.Close()
	// The welcome: the sender's room is up and has synced with the
	// receivers' nodes.
	if _, err := sender.Next(ctx); err != nil {
		return LatencyResult{}, err
	}
	join := time.Since(dialed)
	var refused, answered atomic.Int64
	go func() {
		for {
			f, err := sender.Next(ctx)
			if err != nil {
				return
			}
			switch f.Kind {
			case wall.KindError:
				refused.Add(1)
			case wall.KindAck:
			default:
				continue
			}
			answered.Add(1)
		}
	}()
	pad := strings.Repeat("x", max(o.Size-40, 0))
	tick := time.NewTicker(time.Second / time.Duration(o.Rate))
	defer tick.Stop()
	sent := 0
	for end := time.Now().Add(o.Duration); time.Now().Before(end); <-tick.C {
		if err := sender.Send(ctx, map[string]any{"sent": time.Now().UnixNano(), "pad": pad}); err != nil {
			return LatencyResult{}, err
		}
		sent++
	}
	// The node takes the last messages (a node pacing the sender takes
	// them later than they were sent), then they land or are lost.
	for wait := time.Now().Add(time.Minute); answered.Load() < int64(sent) && time.Now().Before(wait); {
		time.Sleep(10 * time.Millisecond)
	}
	for settle := time.Now().Add(2 * time.Second); time.Now().Before(settle); time.Sleep(10 * time.Millisecond) {
		taken := sent - int(refused.Load())
		mu.Lock()
		all := !slices.ContainsFunc(received, func(n int) bool { return n < taken })
		mu.Unlock()
		if all {
			break
		}
	}
	closeAll(conns)
	wg.Wait()
	return LatencyResult{Percentiles: percentiles(samples), Join: join, Sent: sent, Refused: int(refused.Load()), Received: received}, nil
}
