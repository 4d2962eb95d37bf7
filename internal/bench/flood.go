package bench

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gobwas/ws"
)

// FloodOptions configures PingFlood: Sockets clients on the open lobby,
// each with a 4 KiB receive buffer and never reading, send batches of
// 125-byte pings for Duration; a socket the node closes connects again.
type FloodOptions struct {
	Sockets  int
	Duration time.Duration
}

// FloodResult is what PingFlood measured: the node's resident memory
// before, at its peak and at the end (from its /metrics), the pings
// written and connections made, and whether the node still answered
// /health after.
type FloodResult struct {
	RSSBefore, RSSPeak, RSSAfter float64
	Pings, Connections           int64
	Healthy                      bool
}

func (r FloodResult) String() string {
	return fmt.Sprintf("%d pings written over %d connections; node resident memory %.0f MiB before, peak %.0f MiB (+%.0f MiB), %.0f MiB at the end; healthy after: %v",
		r.Pings, r.Connections, r.RSSBefore/(1<<20), r.RSSPeak/(1<<20), (r.RSSPeak-r.RSSBefore)/(1<<20), r.RSSAfter/(1<<20), r.Healthy)
}

const rssMetric = "process_resident_memory_bytes"

// PingFlood floods the node at base with pings, as a hostile client with no
// credentials can, and samples its resident memory every 100 ms.
func PingFlood(ctx context.Context, base string, o FloodOptions) (FloodResult, error) {
	var r FloodResult
	m, err := metrics(ctx, base, rssMetric)
	if err != nil {
		return r, err
	}
	r.RSSBefore, r.RSSPeak = m[rssMetric], m[rssMetric]
	fctx, cancel := context.WithTimeout(ctx, o.Duration)
	defer cancel()
	var pings, conns atomic.Int64
	var wg sync.WaitGroup
	for range o.Sockets {
		wg.Go(func() { floodOne(fctx, WSURL(base, "c_lobby", "x", url.Values{"vis": {"ghost"}}), &pings, &conns) })
	}
	for tick := time.NewTicker(100 * time.Millisecond); fctx.Err() == nil; <-tick.C {
		if m, err := metrics(ctx, base, rssMetric); err == nil {
			r.RSSPeak = max(r.RSSPeak, m[rssMetric])
		}
	}
	wg.Wait()
	if m, err := metrics(ctx, base, rssMetric); err == nil {
		r.RSSAfter = m[rssMetric]
	}
	var h struct{ Status string }
	r.Healthy = getJSON(ctx, base+"/health", &h) == nil && h.Status != ""
	r.Pings, r.Connections = pings.Load(), conns.Load()
	return r, nil
}

// floodOne connects, writes pings until the node hangs up, and connects
// again, until ctx ends.
func floodOne(ctx context.Context, u string, pings, conns *atomic.Int64) {
	const perBatch = 64
	ping := ws.MustCompileFrame(ws.MaskFrame(ws.NewPingFrame(bytes.Repeat([]byte("p"), 125))))
	batch := bytes.Repeat(ping, perBatch)
	d := ws.Dialer{NetDial: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if tcp, ok := c.(*net.TCPConn); ok {
			tcp.SetReadBuffer(4096)
		}
		return c, err
	}}
	for ctx.Err() == nil {
		c, _, _, err := d.Dial(ctx, u)
		if err != nil {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		conns.Add(1)
		stop := context.AfterFunc(ctx, func() { c.Close() })
		for {
			c.SetWriteDeadline(time.Now().Add(time.Second))
			if _, err := c.Write(batch); err != nil {
				break
			}
			pings.Add(perBatch)
		}
		stop()
		c.Close()
	}
}
