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
	Window    int           // messages in flight (sent, not yet acked)
}

// FanoutResult is what Fanout measured.
type FanoutResult struct {
	Messages, Deliveries int64
	Elapsed              time.Duration
	PerSecond            float64
	Disconnected         int64 // receivers dropped as slow consumers
}

func (r FanoutResult) String() string {
	return fmt.Sprintf("%d messages, %d deliveries in %.1fs: %.0f deliveries/s (%d receivers disconnected)",
		r.Messages, r.Deliveries, r.Elapsed.Seconds(), r.PerSecond, r.Disconnected)
}

// Fanout measures deliveries per second on one node: one sender, many
// receivers, all in one cluster. The sender keeps Window messages in
// flight, paced by acks, which come once every receiver got the frame.
func Fanout(ctx context.Context, base string, o FanoutOptions) (FanoutResult, error) {
	id, err := CreateCluster(ctx, base)
	if err != nil {
		return FanoutResult{}, err
	}
	conns, err := dial(ctx, o.Receivers, 64, func(i int) string { return WSURL(base, id, "r"+strconv.Itoa(i), nil) }, nil)
	if err != nil {
		return FanoutResult{}, err
	}
	defer closeAll(conns)
	var delivered, dropped atomic.Int64
	for _, c := range conns {
		go func() {
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
		}()
	}
	sender, err := wall.Dial(ctx, WSURL(base, id, "sender", url.Values{"vis": {"ghost"}}))
	if err != nil {
		return FanoutResult{}, err
	}
	defer sender.Close()
	if _, err := sender.Next(ctx); err != nil {
		return FanoutResult{}, err
	}
	payload := strings.Repeat("x", o.Size-2) // a JSON string of Size bytes
	inFlight := make(chan struct{}, o.Window)
	acks := make(chan error, 1)
	var acked atomic.Int64 // deliveries the node reported in acks
	go func() {
		for {
			f, err := sender.Next(ctx)
			if err != nil {
				acks <- err
				return
			}
			if f.Kind == wall.KindAck {
				acked.Add(int64(f.Delivered))
				<-inFlight
			}
		}
	}()
	start := time.Now()
	var sent int64
	for time.Since(start) < o.Duration {
		select {
		case inFlight <- struct{}{}:
		case err := <-acks:
			return FanoutResult{}, err
		}
		if err := sender.Send(ctx, payload); err != nil {
			return FanoutResult{}, err
		}
		sent++
	}
	for range o.Window { // drain: wait for the last acks
		select {
		case inFlight <- struct{}{}:
		case <-time.After(10 * time.Second):
			return FanoutResult{}, fmt.Errorf("acks stopped")
		}
	}
	el := time.Since(start)
	// An ack means the node wrote the frame to every socket; the receivers
	// may still be reading the last ones.
	for settle := time.Now().Add(5 * time.Second); delivered.Load() < acked.Load() && time.Now().Before(settle); {
		time.Sleep(time.Millisecond)
	}
	d := delivered.Load()
	return FanoutResult{Messages: sent, Deliveries: d, Elapsed: el, PerSecond: float64(d) / el.Seconds(), Disconnected: dropped.Load()}, nil
}

// LatencyOptions configures Latency.
type LatencyOptions struct {
	Rate     int // messages per second from the sender
	Duration time.Duration
	Size     int
}

// LatencyResult is what Latency measured: send-to-receive times over all
// receivers, and how many messages each receiver got of those sent.
type LatencyResult struct {
	Percentiles
	Sent     int
	Received []int // per receiver
}

func (r LatencyResult) String() string {
	lost := 0
	for _, n := range r.Received {
		lost += r.Sent - n
	}
	return fmt.Sprintf("%s; %d sent, received per receiver %v, %d lost", r.Percentiles, r.Sent, r.Received, lost)
}

// Latency measures send-to-receive time across nodes: a sender on the
// first node, one receiver on each of the others, messages at Rate.
func Latency(ctx context.Context, bases []string, o LatencyOptions) (LatencyResult, error) {
	id, err := CreateCluster(ctx, bases[0])
	if err != nil {
		return LatencyResult{}, err
	}
	conns, err := dial(ctx, len(bases)-1, 4, func(i int) string { return WSURL(bases[i+1], id, "rx"+strconv.Itoa(i), nil) }, nil)
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
	sender, err := wall.Dial(ctx, WSURL(bases[0], id, "sender", nil))
	if err != nil {
		return LatencyResult{}, err
	}
	defer sender.Close()
	go func() {
		for {
			if _, err := sender.Next(ctx); err != nil {
				return
			}
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
	// The last messages land (or are lost).
	for settle := time.Now().Add(2 * time.Second); time.Now().Before(settle); time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		all := !slices.ContainsFunc(received, func(n int) bool { return n < sent })
		mu.Unlock()
		if all {
			break
		}
	}
	closeAll(conns)
	wg.Wait()
	return LatencyResult{Percentiles: percentiles(samples), Sent: sent, Received: received}, nil
}
