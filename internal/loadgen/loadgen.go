// Package loadgen drives HTTP load against a node and reports throughput
// and latency percentiles. It backs the `mesh bench` command.
package loadgen

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Options configures a run.
type Options struct {
	// Concurrency is the number of workers, each with its own connection.
	Concurrency int
	// Duration of the measured phase.
	Duration time.Duration
	// Request builds the i-th request of a worker.
	Request func(worker, i int) (*http.Request, error)
	// Progress, if set, is called about once a second with requests so far.
	Progress func(done int64)
}

// Result summarises a run.
type Result struct {
	Requests  int64
	Errors    int64
	Elapsed   time.Duration
	PerSecond float64
	P50, P99  time.Duration
	Max       time.Duration
	// latencies are the requests' latencies, sorted: what Merge pools.
	latencies []time.Duration
}

// Merge is runs taken as one: their requests, errors and elapsed times
// summed, and the percentiles of all their requests' latencies.
func Merge(rs ...Result) Result {
	var r Result
	lat := make([][]time.Duration, len(rs))
	for i, x := range rs {
		r.Requests += x.Requests
		r.Errors += x.Errors
		r.Elapsed += x.Elapsed
		lat[i] = x.latencies
	}
	r.summarise(slices.Concat(lat...))
	return r
}

// summarise sets r's rate from its requests and elapsed time, and its
// percentiles from all, the latencies of its requests.
func (r *Result) summarise(all []time.Duration) {
	slices.Sort(all)
	r.latencies = all
	if r.Elapsed > 0 {
		r.PerSecond = float64(r.Requests) / r.Elapsed.Seconds()
	}
	if len(all) > 0 {
		r.P50, r.P99, r.Max = all[len(all)*50/100], all[len(all)*99/100], all[len(all)-1]
	}
}

func (r Result) String() string {
	return fmt.Sprintf("%d requests in %.1fs: %.0f req/s, p50 %s, p99 %s, max %s, errors %d",
		r.Requests, r.Elapsed.Seconds(), r.PerSecond, r.P50, r.P99, r.Max, r.Errors)
}

// Run sends requests from opts.Concurrency workers for opts.Duration. Any
// answer other than 2xx counts as an error.
func Run(ctx context.Context, opts Options) Result {
	client := &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: opts.Concurrency, MaxConnsPerHost: opts.Concurrency, DisableCompression: true,
	}}
	defer client.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, opts.Duration)
	defer cancel()
	var done, errs atomic.Int64
	lat := make([][]time.Duration, opts.Concurrency)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range opts.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				req, err := opts.Request(w, i)
				if err != nil {
					errs.Add(1)
					return
				}
				t0 := time.Now()
				resp, err := client.Do(req.WithContext(ctx))
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				if ctx.Err() != nil {
					return // cut off by the deadline: not a sample
				}
				lat[w] = append(lat[w], time.Since(t0))
				done.Add(1)
				if err != nil || resp.StatusCode/100 != 2 {
					errs.Add(1)
				}
			}
		}()
	}
	stopProgress := progress(opts.Progress, &done)
	wg.Wait()
	stopProgress()
	r := Result{Requests: done.Load(), Errors: errs.Load(), Elapsed: time.Since(start)}
	r.summarise(slices.Concat(lat...))
	return r
}

func progress(fn func(int64), done *atomic.Int64) (stop func()) {
	if fn == nil {
		return func() {}
	}
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				fn(done.Load())
			}
		}
	}()
	return func() { close(quit); wg.Wait() }
}

// Post sends one JSON POST, with headers hdr (name, value, ...), and
// fails unless the status is 2xx; for setup. A 429 or 503 with
// Retry-After (a node's write budget) is sent again after the wait it
// names, up to maxWait in all.
func Post(ctx context.Context, url, body string, hdr ...string) error {
	waited := time.Duration(0)
	for {
		req, err := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
		if err != nil {
			return err
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode/100 == 2 {
			return nil
		}
		wait, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		if wait <= 0 || waited >= maxWait || (resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusServiceUnavailable) {
			return fmt.Errorf("POST %s: %d %s", url, resp.StatusCode, b)
		}
		d := time.Duration(wait) * time.Second
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d):
		}
		waited += d
	}
}

// maxWait bounds what Post waits for a node's write budget.
const maxWait = 10 * time.Minute
