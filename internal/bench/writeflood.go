package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/node"
	"github.com/agentmesh/mesh/p2p"
)

// WriteFloodOptions shapes `mesh bench write-flood`.
type WriteFloodOptions struct {
	// Duration of each phase.
	Duration time.Duration
	// Flooders are the requests the flood keeps in flight.
	Flooders int
	// HonestRate is how many registrations a second honest clients make
	// through another node, each from an address of its own.
	HonestRate float64
	// Tweak, if set, edits every node's configuration (budgets, say).
	Tweak func(*node.Config)
}

// WriteFloodPhase is what one phase measured.
type WriteFloodPhase struct {
	Name string
	// Sent and Taken are the flood's requests a second, and those that
	// got a 2xx.
	Sent, Taken float64
	// Honest is the latency of the honest registrations that succeeded;
	// HonestFailed counts the others.
	Honest       Percentiles
	HonestFailed int
	// Writes is what the directory's log took a second, all writers.
	Writes float64
}

func (p WriteFloodPhase) String() string {
	return fmt.Sprintf("%-13s flood sent %7.0f/s taken %6.0f/s | honest %s failed %d | directory log %5.0f writes/s",
		p.Name, p.Sent, p.Taken, p.Honest, p.HonestFailed, p.Writes)
}

// WriteFlood runs a directory (node 0) and two nodes, and measures honest
// registrations through node 2 while, phase by phase: nothing floods;
// one client address floods node 1 with registrations ("address"); a
// rogue peer forwards registrations to the directory at full speed, each
// naming a client of its own invention ("rogue node"); many addresses
// (a botnet) register on the directory at full speed, each once ("many
// addresses"). Every node trusts loopback as a proxy, so that a request's
// X-Forwarded-For names its client.
func WriteFlood(ctx context.Context, o WriteFloodOptions) ([]WriteFloodPhase, error) {
	m, err := StartMesh(ctx, 3, func(cfg *node.Config) {
		cfg.TrustedProxies = []string{"127.0.0.1"}
		if o.Tweak != nil {
			o.Tweak(cfg)
		}
	})
	if err != nil {
		return nil, err
	}
	defer m.Close()
	dir, target, honest := m.Nodes[0], m.Nodes[1], m.Nodes[2]
	rogue, err := startRogue(ctx, dir)
	if err != nil {
		return nil, err
	}
	defer rogue.Close()

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: o.Flooders, MaxConnsPerHost: o.Flooders}}
	defer client.CloseIdleConnections()
	post := func(ctx context.Context, base, body, from string) bool {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/agents/register", strings.NewReader(body))
		req.Header.Set("X-Forwarded-For", from)
		resp, err := client.Do(req)
		if err != nil {
			return false
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode/100 == 2
	}
	run := fmt.Sprintf("%x", time.Now().UnixNano())
	phases := []struct {
		name  string
		flood func(ctx context.Context, w, i int) bool // nil: no flood
	}{
		{"none", nil},
		{"address", func(ctx context.Context, w, i int) bool {
			return post(ctx, target.URL(), registration(fmt.Sprintf("addr-%s-%d-%d", run, w, i)), "198.51.100.7")
		}},
		{"rogue node", func(ctx context.Context, w, i int) bool {
			return rogue.register(ctx, registration(fmt.Sprintf("rogue-%s-%d-%d", run, w, i)), fmt.Sprintf("10.%d.%d.%d", w%250, i/250%250, i%250))
		}},
		{"many addresses", func(ctx context.Context, w, i int) bool {
			return post(ctx, dir.URL(), registration(fmt.Sprintf("bot-%s-%d-%d", run, w, i)), fmt.Sprintf("100.%d.%d.%d", 64+w%64, i/250%250, i%250))
		}},
	}
	var out []WriteFloodPhase
	for n, ph := range phases {
		seq0, err := seqOf(ctx, dir)
		if err != nil {
			return nil, err
		}
		pctx, cancel := context.WithTimeout(ctx, o.Duration)
		var sent, taken atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		if ph.flood != nil {
			for w := range o.Flooders {
				wg.Go(func() {
					for i := 0; pctx.Err() == nil; i++ {
						ok := ph.flood(pctx, w, i)
						if pctx.Err() != nil {
							return
						}
						sent.Add(1)
						if ok {
							taken.Add(1)
						}
					}
				})
			}
		}
		samples, failed := honestRegistrations(pctx, honest.URL(), o.HonestRate, fmt.Sprintf("honest-%s-%d", run, n), n)
		wg.Wait()
		cancel()
		elapsed := time.Since(start).Seconds()
		seq1, err := seqOf(ctx, dir)
		if err != nil {
			return nil, err
		}
		out = append(out, WriteFloodPhase{Name: ph.name, Sent: float64(sent.Load()) / elapsed, Taken: float64(taken.Load()) / elapsed,
			Honest: percentiles(samples), HonestFailed: failed, Writes: float64(seq1-seq0) / elapsed})
	}
	return out, nil
}

// registration is an anonymous registration of id.
func registration(id string) string { return `{"agent_id":"` + id + `","capabilities":["bench"]}` }

// honestRegistrations registers at rate a second through base until ctx
// ends, each from its own address, and returns the latencies of those
// that succeeded and how many did not.
func honestRegistrations(ctx context.Context, base string, rate float64, prefix string, phase int) ([]time.Duration, int) {
	var samples []time.Duration
	failed := 0
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return samples, failed
		case <-tick.C:
		}
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/agents/register", strings.NewReader(registration(fmt.Sprint(prefix, "-", i))))
		req.Header.Set("X-Forwarded-For", fmt.Sprintf("198.18.%d.%d", phase*50+i/250%50, i%250))
		t0 := time.Now()
		resp, err := http.DefaultClient.Do(req) // not cut off by ctx: a registration under way is measured whole
		if err != nil {
			failed++
			continue
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			failed++
			continue
		}
		samples = append(samples, time.Since(t0))
	}
}

func seqOf(ctx context.Context, n *node.Node) (uint64, error) {
	m, err := metrics(ctx, n.URL(), "mesh_directory_seq")
	return uint64(m["mesh_directory_seq"]), err
}

// rogue is a bare libp2p peer that speaks the forward stream as a
// modified node would: it forwards whatever it likes, naming any client.
type rogue struct {
	*p2p.Host
	dir peer.ID
}

func startRogue(ctx context.Context, dir *node.Node) (*rogue, error) {
	boot, err := p2p.ParseAddrs(dir.P2PAddrs()[:1])
	if err != nil {
		return nil, err
	}
	h, err := p2p.New(p2p.Config{Key: identity.GenerateKey(), Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Bootstrap: boot})
	if err == nil {
		err = h.Start(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("rogue peer: %w", err)
	}
	for deadline := time.Now().Add(10 * time.Second); !h.Connected(boot[0].ID); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			h.Close()
			return nil, fmt.Errorf("rogue peer: never connected to the directory")
		}
	}
	return &rogue{Host: h, dir: boot[0].ID}, nil
}

// register forwards a registration naming client, and reports whether the
// directory took it.
func (r *rogue) register(ctx context.Context, body, client string) bool {
	req, _ := http.NewRequest(http.MethodPost, "/v1/agents/register", strings.NewReader(body))
	req.Header.Set("X-Mesh-Client", client)
	var buf bytes.Buffer
	req.Write(&buf)
	raw, err := r.Request(ctx, r.dir, node.ForwardProtocol, buf.Bytes(), 1<<20)
	if err != nil {
		return false
	}
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), req)
	return err == nil && resp.StatusCode/100 == 2
}
