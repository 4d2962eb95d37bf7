package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/agentmesh/mesh/internal/testkit"
	"github.com/agentmesh/mesh/node"
)

// TestBenchGetAgent runs the load command briefly, twice against the same
// node (a second run must not trip over the first one's agents), beside
// its baseline (the mesh binary serving the node's bytes), then against a
// node of its own, and refuses flags that make no measurement.
func TestBenchGetAgent(t *testing.T) {
	t.Parallel()
	n, err := startBenchNode(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	bin := buildMesh(t)
	for _, slice := range []string{"1s", "100ms"} { // each run whole, then in three turns
		out, err := exec.Command(bin, "bench", "get-agent", "--url", n.URL(), "--agents", "5", "--concurrency", "2", "--duration", "300ms", "--rounds", "1", "--slice", slice).Output()
		if err != nil || !strings.Contains(string(out), "net/http writing the same bytes") || strings.Count(string(out), "errors 0") != 2 {
			t.Fatalf("bench get-agent: %v %q", err, out)
		}
	}
	// Without --url it starts a node, and runs it again for the second
	// round, on the same port and data: every read of the agents it
	// registered before still answers 200 (and the same bytes: the
	// baseline serves those).
	out, err := exec.Command(bin, "bench", "get-agent", "--agents", "5", "--concurrency", "2", "--duration", "300ms", "--rounds", "2", "--slice", "100ms").Output()
	if err != nil || strings.Count(string(out), "errors 0") != 4 || !strings.Contains(string(out), "CPU a request") {
		t.Fatalf("bench get-agent starting its node: %v %q", err, out)
	}
	for _, bad := range [][]string{{"--agents", "0"}, {"--concurrency", "0"}, {"--duration", "0s"}, {"--rounds", "0"}, {"--slice", "-1s"}} {
		root := rootCmd()
		root.SetArgs(append([]string{"bench", "get-agent", "--url", n.URL()}, bad...))
		root.SetOut(&bytes.Buffer{})
		root.SetErr(&bytes.Buffer{})
		if err := root.Execute(); err == nil {
			t.Fatalf("bench get-agent %v was accepted", bad)
		}
	}
}

// TestBenchWallAgainstANode: the wall benches drive a running node over
// real sockets with --url, under that node's own send limits: with a
// socket rate of 5 a second (bursts of 10) a fast sender is paced to it,
// with the limits lifted it is not, and in neither case is a message
// refused; the fan-out reports the node's memory per connection, and both
// benches delete their cluster.
func TestBenchWallAgainstANode(t *testing.T) {
	t.Parallel()
	limited, err := startBenchNode(context.Background(), func(c *node.Config) { c.WallSocketRate = 5 })
	if err != nil {
		t.Fatal(err)
	}
	defer limited.Close()
	free, err := startBenchNode(context.Background(), func(c *node.Config) { c.WallSocketRate, c.WallRoomRate = 0, 0 })
	if err != nil {
		t.Fatal(err)
	}
	defer free.Close()
	run := func(args ...string) string {
		t.Helper()
		var out bytes.Buffer
		root := rootCmd()
		root.SetArgs(append([]string{"bench"}, args...))
		root.SetOut(&out)
		if err := root.Execute(); err != nil {
			t.Fatalf("bench %v: %v", args, err)
		}
		return out.String()
	}
	fanout := regexp.MustCompile(`(\d+) messages \((\d+) refused\), (\d+) deliveries .* \(0 receivers disconnected\); node memory per connection: `)
	for _, tc := range []struct {
		n     *node.Node
		paced bool
	}{{limited, true}, {free, false}} {
		out := run("wall-fanout", "--url", tc.n.URL(), "--receivers", "3", "--size", "64", "--window", "8", "--duration", "400ms")
		m := fanout.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("wall-fanout: %q", out)
		}
		// Paced: a burst of 10, 5 a second after it, and the window sent
		// meanwhile; unpaced, thousands on loopback.
		sent, refused, deliveries := atoi(t, m[1]), atoi(t, m[2]), atoi(t, m[3])
		if deliveries != 3*sent || refused != 0 || (sent < 40) != tc.paced {
			t.Fatalf("wall-fanout at %s: %d sent, %d refused, %d deliveries to 3 receivers", tc.n.URL(), sent, refused, deliveries)
		}
		out = run("wall-latency", "--url", tc.n.URL(), "--rate", "100", "--duration", "200ms", "--size", "64")
		if !strings.Contains(out, " 0 lost") {
			t.Fatalf("wall-latency: %q", out)
		}
		var catalog struct {
			Clusters []struct{ Name string } `json:"clusters"`
		}
		if err := getJSON(tc.n.URL()+"/v1/clusters", &catalog); err != nil || slices.ContainsFunc(catalog.Clusters, func(c struct{ Name string }) bool { return c.Name == "bench" }) {
			t.Fatalf("the benches left clusters in the catalog: %v %v", catalog.Clusters, err)
		}
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func getJSON(url string, v any) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}

// TestBenchQuorum runs the quorum bench briefly: a lone directory and a
// quorum of 3 on disk each take registrations, none failing, and the
// quorum's share of the lone directory's rate is printed; flags that make
// no measurement are refused.
func TestBenchQuorum(t *testing.T) {
	testkit.Slow(t, "four nodes on disk")
	var out bytes.Buffer
	root := rootCmd()
	root.SetArgs([]string{"bench", "quorum", "--duration", "300ms", "--rounds", "2", "--concurrency", "2", "--dir", t.TempDir()})
	root.SetOut(&out)
	if err := root.Execute(); err != nil {
		t.Fatalf("bench quorum: %v\n%s", err, out.String())
	}
	for _, want := range []string{"round 2\n", "lone directory: ", "quorum of 3, to the leader: ", "quorum of 3, through a follower: ", "median of 2 rounds: to the leader ", "idle: every node started, this process spends ", "median CPU a registration (every node and client in this process, beyond its idle CPU): lone "} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("bench quorum printed no %q:\n%s", want, out.String())
		}
	}
	root = rootCmd()
	root.SetArgs([]string{"bench", "quorum", "--size", "0"})
	root.SetOut(&bytes.Buffer{})
	root.SetErr(&bytes.Buffer{})
	if root.Execute() == nil {
		t.Fatal("bench quorum --size 0 was accepted")
	}
}
