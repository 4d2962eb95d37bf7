package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/agentmesh/mesh/internal/loadgen"
)

// GetAgentOptions sets up a read measurement.
type GetAgentOptions struct {
	Exe         string // the mesh binary
	Dir         string // where the node keeps its data
	URL         string // a running node; empty starts one (Exe, Dir)
	Agents      int
	Concurrency int
	Duration    time.Duration // of each run
	Rounds      int           // node and baseline runs, alternately
	// Slice cuts each run into slices of at most this, the node's and
	// the baseline's alternately (in the order node, baseline, baseline,
	// node, ...), so that both meet the same seconds of a shared machine
	// (0: each run whole, one after the other).
	Slice    time.Duration
	Progress io.Writer
}

// GetAgentResult is the node's runs and the baseline's, in the order run,
// and the CPU time each process spent a request in each run (when read:
// not for a node at --url), which other work on the machine moves far
// less than the rates and latencies.
type GetAgentResult struct {
	Node, Baseline       []loadgen.Result
	NodeCPU, BaselineCPU []time.Duration
}

func (r GetAgentResult) String() string {
	var b strings.Builder
	for i := range r.Node {
		fmt.Fprintf(&b, "node:     %s\nbaseline: %s\n", r.Node[i], r.Baseline[i])
	}
	n, base := total(r.Node), total(r.Baseline)
	var rate, p99 []float64
	for i := range r.Node {
		rate = append(rate, r.Node[i].PerSecond/r.Baseline[i].PerSecond)
		p99 = append(p99, float64(r.Node[i].P99)/float64(r.Baseline[i].P99))
	}
	fmt.Fprintf(&b, "node %.0f req/s, p99 %s; net/http writing the same bytes %.0f req/s, p99 %s: throughput %.2fx, p99 %.2fx "+
		"(median of the rounds' ratios: %.2fx, %.2fx)",
		n.PerSecond, n.P99, base.PerSecond, base.P99, n.PerSecond/base.PerSecond, float64(n.P99)/float64(base.P99), Median(rate), Median(p99))
	if len(r.NodeCPU) == len(r.Node) && len(r.BaselineCPU) == len(r.Baseline) && len(r.Node) > 0 {
		var cpu []float64
		for i := range r.NodeCPU {
			cpu = append(cpu, float64(r.NodeCPU[i])/float64(r.BaselineCPU[i]))
		}
		fmt.Fprintf(&b, "; CPU a request: node %s, baseline %s (medians of the runs): %.2fx (median of the rounds' ratios)",
			medianDuration(r.NodeCPU), medianDuration(r.BaselineCPU), Median(cpu))
	}
	return b.String()
}

func medianDuration(d []time.Duration) time.Duration {
	v := make([]float64, len(d))
	for i := range d {
		v[i] = float64(d[i])
	}
	return time.Duration(Median(v)).Round(10 * time.Nanosecond)
}

// Median is the median of v (the upper one of an even count).
func Median(v []float64) float64 {
	s := slices.Sorted(slices.Values(v))
	return s[len(s)/2]
}

// total sums runs: requests a second over all of them, the mean of their p99s.
func total(rs []loadgen.Result) loadgen.Result {
	var t loadgen.Result
	var p99 time.Duration
	for _, r := range rs {
		t.Requests += r.Requests
		t.Elapsed += r.Elapsed
		p99 += r.P99
	}
	t.PerSecond = float64(t.Requests) / t.Elapsed.Seconds()
	t.P99 = p99 / time.Duration(len(rs))
	return t
}

// GetAgent registers o.Agents agents on a node (o.URL, or a `mesh node`
// it starts in a process of its own), reads each one's answer to GET
// /v1/agents/<id> once, and starts the baseline in another process: plain
// net/http answering each id with that same answer, header fields and
// body. It then drives both alike, o.Rounds times each. Each round runs
// on processes of its own (a baseline started afresh, and the node, when
// GetAgent started it, run again on its data: on a shared machine two
// processes of the same program differ for their whole life by more than
// the node and the baseline do), after a warm-up of each that is not
// counted: it drives each for o.Duration, in slices of o.Slice taken in
// turns (the node first in odd rounds and the baseline first in even
// ones, and the order swapped from one pair of slices to the next), each
// side's slices pooled into its run.
func GetAgent(ctx context.Context, o GetAgentOptions) (GetAgentResult, error) {
	var res GetAgentResult
	url, node := o.URL, (*Proc)(nil)
	if url == "" {
		n, err := StartProc(ctx, o.Exe, filepath.Join(o.Dir, "node"), "--role", "bootstrap", "--card-refresh", "0",
			"--budget-client", "0", "--budget-credential", "0", "--budget-directory", "0")
		if err != nil {
			return res, err
		}
		defer n.Stop()
		url, node = n.URL, n
	}
	prefix := fmt.Sprintf("bench-%x", time.Now().UnixNano()) // runs against one node do not collide
	fmt.Fprintf(o.Progress, "registering %d agents at %s\n", o.Agents, url)
	stored, err := registerAgents(ctx, url, prefix, o.Agents)
	if err != nil {
		return res, err
	}
	drive := func(target string, d time.Duration) loadgen.Result {
		return loadgen.Run(ctx, loadgen.Options{
			Concurrency: o.Concurrency, Duration: d,
			Request: func(w, i int) (*http.Request, error) {
				return http.NewRequest("GET", fmt.Sprintf("%s/v1/agents/%s-%d", target, prefix, (w*7919+i)%o.Agents), nil)
			},
		})
	}
	for round := range o.Rounds {
		nodePID := 0
		if node != nil {
			if round > 0 {
				if err := node.Restart(ctx); err != nil {
					return res, err
				}
			}
			nodePID = node.cmd.Process.Pid
		}
		base, basePID, stop, err := startBaseline(ctx, o.Exe, o.Dir, stored)
		if err != nil {
			return res, err
		}
		err = measureRound(o, drive, round, [2]side{{url, nodePID, &res.Node, &res.NodeCPU}, {base, basePID, &res.Baseline, &res.BaselineCPU}})
		stop()
		if err != nil {
			return res, err
		}
	}
	return res, nil
}

// measureRound warms both sides up, then drives each for o.Duration in
// turns of o.Slice, and appends to each side its run and its CPU time a
// request.
func measureRound(o GetAgentOptions, drive func(string, time.Duration) loadgen.Result, round int, sides [2]side) error {
	for _, s := range sides {
		fmt.Fprintf(o.Progress, "  warm-up %s: %s\n", s.target, drive(s.target, warmUp(o.Duration)))
	}
	var parts [2][]loadgen.Result
	var cpu [2]time.Duration
	for k, d := range sliced(o.Duration, o.Slice) {
		for i := range sides {
			j := (i + k + round) % 2 // node first, then the baseline first: ABBA
			before := pidCPU(sides[j].pid)
			parts[j] = append(parts[j], drive(sides[j].target, d))
			if before > 0 {
				cpu[j] += pidCPU(sides[j].pid) - before
			}
		}
	}
	for j, s := range sides {
		r := loadgen.Merge(parts[j]...)
		fmt.Fprintf(o.Progress, "  %s: %s\n", s.target, r)
		if r.Errors > 0 {
			return fmt.Errorf("%s: %d requests failed", s.target, r.Errors)
		}
		*s.into = append(*s.into, r)
		if cpu[j] > 0 && r.Requests > 0 {
			*s.cpu = append(*s.cpu, cpu[j]/time.Duration(r.Requests))
		}
	}
	return nil
}

// side is one of the two servers GetAgent drives: where it listens, its
// process (0: not known) and where its runs go.
type side struct {
	target string
	pid    int
	into   *[]loadgen.Result
	cpu    *[]time.Duration
}

// sliced is d cut into equal slices of at most slice (d whole when slice
// is 0 or longer).
func sliced(d, slice time.Duration) []time.Duration {
	n := 1
	if slice > 0 && slice < d {
		n = int((d + slice - 1) / slice)
	}
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = d / time.Duration(n)
	}
	return out
}

// warmUp is how long each target is driven, uncounted, before each round:
// both start it with code paged in, caches filled and heaps grown.
func warmUp(d time.Duration) time.Duration { return min(d/5, time.Second) }

// storedAnswer is a node's answer to GET /v1/agents/<id>: its header
// fields but Date and Content-Length, which net/http writes itself, and
// its body.
type storedAnswer struct {
	ID     string      `json:"id"`
	Header http.Header `json:"header"`
	Body   string      `json:"body"`
}

// registerAgents registers n agents prefix-0 to prefix-<n-1> at url, and
// reads each one's answer once.
func registerAgents(ctx context.Context, url, prefix string, n int) ([]storedAnswer, error) {
	var stored []storedAnswer
	for i := range n {
		id := fmt.Sprintf("%s-%d", prefix, i)
		body := fmt.Sprintf(`{"agent_id":"%s","capabilities":["echo"],"endpoint":"https://bench.example/%d"}`, id, i)
		if err := loadgen.Post(ctx, url+"/v1/agents/register", body); err != nil {
			return nil, err
		}
		h, b, err := getAnswer(ctx, url+"/v1/agents/"+id)
		if err != nil {
			return nil, err
		}
		h.Del("Date")
		h.Del("Content-Length")
		stored = append(stored, storedAnswer{ID: id, Header: h, Body: string(b)})
	}
	return stored, nil
}

// startBaseline runs `exe bench serve-bytes` on a free port, handing it
// stored (a file of one answer a line); it returns its base URL and its
// process id.
func startBaseline(ctx context.Context, exe, dir string, stored []storedAnswer) (string, int, func(), error) {
	f, err := os.Create(filepath.Join(dir, "stored.jsonl"))
	if err != nil {
		return "", 0, nil, err
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for _, a := range stored {
		enc.Encode(a)
	}
	if err := w.Flush(); err != nil {
		return "", 0, nil, err
	}
	port, err := freePort()
	if err != nil {
		return "", 0, nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.CommandContext(ctx, exe, "bench", "serve-bytes", "--http", addr, "--file", f.Name())
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return "", 0, nil, err
	}
	stop := func() { cmd.Process.Kill(); cmd.Wait() }
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return "http://" + addr, cmd.Process.Pid, stop, nil
		}
		if time.Now().After(deadline) {
			stop()
			return "", 0, nil, fmt.Errorf("the baseline never listened on %s", addr)
		}
	}
}

// ServeBytes is the baseline of GetAgent: plain net/http answering GET
// /v1/agents/{id} with the answer stored for id (read from file, one
// storedAnswer a line), until ctx ends.
func ServeBytes(ctx context.Context, addr, file string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	var stored []storedAnswer
	dec := json.NewDecoder(f)
	for {
		var a storedAnswer
		if err := dec.Decode(&a); err == io.EOF {
			break
		} else if err != nil {
			f.Close()
			return fmt.Errorf("%s: not a stored answer a line: %w", file, err)
		}
		stored = append(stored, a)
	}
	f.Close()
	srv := &http.Server{Addr: addr, Handler: serveStored(stored)}
	go func() { <-ctx.Done(); srv.Close() }()
	if err := srv.ListenAndServe(); err != http.ErrServerClosed {
		return err
	}
	return nil
}

// serveStored answers GET /v1/agents/{id} with the answer stored for id,
// as net/http does it at its fastest: the header fields' values assigned
// as they are (no canonicalising), the body in one write.
func serveStored(stored []storedAnswer) http.Handler {
	type field struct {
		name   string
		values []string
	}
	type answer struct {
		header []field
		body   []byte
	}
	byID := map[string]answer{}
	for _, a := range stored {
		var header []field
		for name, values := range a.Header {
			header = append(header, field{name, values})
		}
		byID[a.ID] = answer{header, []byte(a.Body)}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/agents/{id}", func(w http.ResponseWriter, r *http.Request) {
		a, ok := byID[r.PathValue("id")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		h := w.Header()
		for _, f := range a.header {
			h[f.name] = f.values
		}
		w.Write(a.body)
	})
	return mux
}

// getAnswer is the header and body of a 200 answer to GET url.
func getAnswer(ctx context.Context, url string) (http.Header, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	return resp.Header, b, err
}

// getBytes is the body of a 200 answer to GET url.
func getBytes(ctx context.Context, url string) ([]byte, error) {
	_, b, err := getAnswer(ctx, url)
	return b, err
}
