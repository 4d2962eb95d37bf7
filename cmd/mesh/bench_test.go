package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestBenchGetAgent runs the load command briefly, twice against the same
// node (a second run must not trip over the first one's agents), and
// refuses flags that make no measurement.
func TestBenchGetAgent(t *testing.T) {
	n, err := startBenchNode(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	for range 2 {
		var out bytes.Buffer
		root := rootCmd()
		root.SetArgs([]string{"bench", "get-agent", "--url", n.URL(), "--agents", "5", "--concurrency", "2", "--duration", "300ms"})
		root.SetOut(&out)
		if err := root.Execute(); err != nil || !strings.Contains(out.String(), "req/s") || !strings.Contains(out.String(), "errors 0") {
			t.Fatalf("bench get-agent: %v %q", err, out.String())
		}
	}
	for _, bad := range [][]string{{"--agents", "0"}, {"--concurrency", "0"}, {"--duration", "0s"}} {
		root := rootCmd()
		root.SetArgs(append([]string{"bench", "get-agent", "--url", n.URL()}, bad...))
		root.SetOut(&bytes.Buffer{})
		root.SetErr(&bytes.Buffer{})
		if err := root.Execute(); err == nil {
			t.Fatalf("bench get-agent %v was accepted", bad)
		}
	}
}
