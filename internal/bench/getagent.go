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
	Progress    io.Writer
}

// GetAgentResult is the node's runs and the baseline's, in the order run.
type GetAgentResult struct {
	Node, Baseline []loadgen.Result
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
	return b.String()
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
// net/http serving those same bytes for each id. It then drives both
// alike, alternately, o.Rounds times each.
func GetAgent(ctx context.Context, o GetAgentOptions) (GetAgentResult, error) {
	var res GetAgentResult
	url := o.URL
	if url == "" {
		n, err := StartProc(ctx, o.Exe, filepath.Join(o.Dir, "node"), "--role", "bootstrap", "--card-refresh", "0",
			"--budget-client", "0", "--budget-credential", "0", "--budget-directory", "0")
		if err != nil {
			return res, err
		}
		defer n.Stop()
		url = n.URL
	}
	prefix := fmt.Sprintf("bench-%x", time.Now().UnixNano()) // runs against one node do not collide
	fmt.Fprintf(o.Progress, "registering %d agents at %s\n", o.Agents, url)
	stored := map[string][]byte{}
	for i := range o.Agents {
		id := fmt.Sprintf("%s-%d", prefix, i)
		body := fmt.Sprintf(`{"agent_id":"%s","capabilities":["echo"],"endpoint":"https://bench.example/%d"}`, id, i)
		if err := loadgen.Post(ctx, url+"/v1/agents/register", body); err != nil {
			return res, err
		}
		v, err := getBytes(ctx, url+"/v1/agents/"+id)
		if err != nil {
			return res, err
		}
		stored[id] = v
	}
	base, stop, err := startBaseline(ctx, o.Exe, o.Dir, stored)
	if err != nil {
		return res, err
	}
	defer stop()
	drive := func(target string) loadgen.Result {
		return loadgen.Run(ctx, loadgen.Options{
			Concurrency: o.Concurrency, Duration: o.Duration,
			Request: func(w, i int) (*http.Request, error) {
				return http.NewRequest("GET", fmt.Sprintf("%s/v1/agents/%s-%d", target, prefix, (w*7919+i)%o.Agents), nil)
			},
		})
	}
	for range o.Rounds {
		for _, run := range []struct {
			target string
			into   *[]loadgen.Result
		}{{url, &res.Node}, {base, &res.Baseline}} {
			r := drive(run.target)
			fmt.Fprintf(o.Progress, "  %s: %s\n", run.target, r)
			if r.Errors > 0 {
				return res, fmt.Errorf("%s: %d requests failed", run.target, r.Errors)
			}
			*run.into = append(*run.into, r)
		}
	}
	return res, nil
}

// startBaseline runs `exe bench serve-bytes` on a free port, handing it
// stored (a file of one id and its bytes a line); it returns its base URL.
func startBaseline(ctx context.Context, exe, dir string, stored map[string][]byte) (string, func(), error) {
	f, err := os.Create(filepath.Join(dir, "stored.jsonl"))
	if err != nil {
		return "", nil, err
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	for id, b := range stored {
		line, _ := json.Marshal([]any{id, string(b)})
		w.Write(append(line, '\n'))
	}
	if err := w.Flush(); err != nil {
		return "", nil, err
	}
	port, err := freePort()
	if err != nil {
		return "", nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.CommandContext(ctx, exe, "bench", "serve-bytes", "--http", addr, "--file", f.Name())
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop := func() { cmd.Process.Kill(); cmd.Wait() }
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return "http://" + addr, stop, nil
		}
		if time.Now().After(deadline) {
			stop()
			return "", nil, fmt.Errorf("the baseline never listened on %s", addr)
		}
	}
}

// ServeBytes is the baseline of GetAgent: plain net/http answering GET
// /v1/agents/{id} with the bytes stored for id (read from file, one
// [id, bytes] a line), as JSON, until ctx ends.
func ServeBytes(ctx context.Context, addr, file string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	stored := map[string][]byte{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var line []string
		if json.Unmarshal(sc.Bytes(), &line) != nil || len(line) != 2 {
			return fmt.Errorf("%s: not [id, bytes] lines", file)
		}
		stored[line[0]] = []byte(line[1])
	}
	f.Close()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/agents/{id}", func(w http.ResponseWriter, r *http.Request) {
		b, ok := stored[r.PathValue("id")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(b)
	})
	srv := &http.Server{Addr: addr, Handler: mux}
	go func() { <-ctx.Done(); srv.Close() }()
	if err := srv.ListenAndServe(); err != http.ErrServerClosed {
		return err
	}
	return nil
}

// getBytes is the body of a 200 answer to GET url.
func getBytes(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	return b, err
}
