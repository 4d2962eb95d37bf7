package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentmesh/mesh/internal/loadgen"
)

// SearchCrowdOptions sets up a search crowd measurement.
type SearchCrowdOptions struct {
	Exe      string // the mesh binary
	Dir      string
	URL      string // a running node (trusting 127.0.0.1 as a proxy); empty starts one
	Agents   int
	CardSize int           // bytes of each agent's card, about
	Crowd    int           // client addresses searching at once
	Rate     float64       // searches a second of each, the per-address budget's
	Every    time.Duration // between the honest client's searches
	Duration time.Duration // of each phase
	Progress io.Writer
}

// SearchCrowdResult is the honest client's searches alone and under the
// crowd, and what became of the crowd's.
type SearchCrowdResult struct {
	Quiet, Crowded  Latencies
	CrowdSent       int64
	CrowdFor        time.Duration
	CrowdByStatus   map[int]int64
	HonestRefusedBy map[int]int64 // the honest client's refusals under the crowd, by status
	Agents          int
}

// Latencies are a client's answered searches.
type Latencies struct {
	N        int
	P50, P90 time.Duration
	Max      time.Duration
}

func latencies(ds []time.Duration) Latencies {
	if len(ds) == 0 {
		return Latencies{}
	}
	slices.Sort(ds)
	return Latencies{N: len(ds), P50: ds[len(ds)/2], P90: ds[len(ds)*9/10], Max: ds[len(ds)-1]}
}

func (l Latencies) String() string {
	return fmt.Sprintf("%d answered, p50 %s, p90 %s, max %s", l.N, l.P50.Round(10*time.Microsecond), l.P90.Round(10*time.Microsecond), l.Max.Round(10*time.Microsecond))
}

func (r SearchCrowdResult) String() string {
	return fmt.Sprintf("%d agents. honest searches alone: %s; under the crowd: %s (%.1fx the quiet p50), refused %v.\n"+
		"  the crowd sent %d searches (%.0f a second), answered by status: %v",
		r.Agents, r.Quiet, r.Crowded, float64(r.Crowded.P50)/float64(r.Quiet.P50), r.HonestRefusedBy, r.CrowdSent,
		float64(r.CrowdSent)/r.CrowdFor.Seconds(), r.CrowdByStatus)
}

// SearchCrowd fills a node (o.URL, or a `mesh node` it starts in a process
// of its own, trusting loopback as a proxy so that X-Forwarded-For names
// each client) with o.Agents agents whose cards hold words of a synthetic
// vocabulary; then times an honest client's two-word searches, one every
// o.Every, for o.Duration alone, and again while o.Crowd other addresses
// each search at o.Rate a second (their per-address budget), each the
// most a search may ask: 16 words, 50 results.
func SearchCrowd(ctx context.Context, o SearchCrowdOptions) (SearchCrowdResult, error) {
	r := SearchCrowdResult{Agents: o.Agents, CrowdByStatus: map[int]int64{}, HonestRefusedBy: map[int]int64{}}
	url := o.URL
	if url == "" {
		n, err := StartProc(ctx, o.Exe, filepath.Join(o.Dir, "node"), "--role", "bootstrap", "--card-refresh", "0",
			"--budget-client", "0", "--budget-credential", "0", "--budget-directory", "0", "--trusted-proxy", "127.0.0.1/32")
		if err != nil {
			return r, err
		}
		defer n.Stop()
		url = n.URL
	}
	fmt.Fprintf(o.Progress, "registering %d agents at %s\n", o.Agents, url)
	if err := fillAgents(ctx, url, o.Agents, o.CardSize); err != nil {
		return r, err
	}
	words := loadgen.NewWords(99)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: o.Crowd + 1}}
	search := func(ctx context.Context, from string, query string) (int, time.Duration) {
		body := fmt.Sprintf(`{"query":%q,"limit":50}`, query)
		req, _ := http.NewRequestWithContext(ctx, "POST", url+"/v1/search", strings.NewReader(body))
		req.Header.Set("X-Forwarded-For", from)
		t0 := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			return 0, 0
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, time.Since(t0)
	}
	honest := func() Latencies {
		var took []time.Duration
		for end := time.Now().Add(o.Duration); time.Now().Before(end) && ctx.Err() == nil; time.Sleep(o.Every) {
			st, d := search(ctx, "203.0.113.7", words.Text(2))
			if st == http.StatusOK {
				took = append(took, d)
			} else {
				r.HonestRefusedBy[st]++
			}
		}
		return latencies(took)
	}
	fmt.Fprintf(o.Progress, "an honest client alone for %s\n", o.Duration)
	r.Quiet = honest()
	clear(r.HonestRefusedBy)
	fmt.Fprintf(o.Progress, "the same while %d addresses search at %.1f a second each\n", o.Crowd, o.Rate)
	crowdCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var sent atomic.Int64
	for i := range o.Crowd {
		wg.Go(func() {
			from := fmt.Sprintf("198.18.%d.%d", i/250, i%250+1)
			crowdWords := loadgen.NewWords(uint64(i) + 100)
			t := time.NewTicker(time.Duration(float64(time.Second) / o.Rate))
			defer t.Stop()
			time.Sleep(time.Duration(i) * time.Second / time.Duration(o.Crowd)) // spread over a second
			for {
				select {
				case <-crowdCtx.Done():
					return
				case <-t.C:
				}
				st, _ := search(crowdCtx, from, crowdWords.Text(16))
				if crowdCtx.Err() != nil {
					return
				}
				sent.Add(1)
				mu.Lock()
				r.CrowdByStatus[st]++
				mu.Unlock()
			}
		})
	}
	time.Sleep(time.Second) // the crowd gathers
	start := time.Now()
	r.Crowded = honest()
	stop()
	wg.Wait()
	r.CrowdFor = time.Since(start) + time.Second
	r.CrowdSent = sent.Load()
	return r, nil
}

// fillAgents registers n agents on the node at base from 8 clients, each
// with a card of about size bytes of words.
func fillAgents(ctx context.Context, base string, n, size int) error {
	var next atomic.Int64
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	prefix := fmt.Sprintf("crowd-%x", time.Now().UnixNano())
	for w := range 8 {
		wg.Go(func() {
			words := loadgen.NewWords(uint64(w) + 1)
			for i := int(next.Add(1)) - 1; i < n && ctx.Err() == nil; i = int(next.Add(1)) - 1 {
				id := fmt.Sprintf("%s-%d", prefix, i)
				body, _ := json.Marshal(map[string]any{"agent_id": id, "capabilities": []string{"echo"},
					"endpoint": "https://" + id + ".example", "full_card": json.RawMessage(words.Card(id, size))})
				if err := loadgen.Post(ctx, base+loadgen.RegisterPath, string(body)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}
