// Package agenttest starts a node that embeds an agent, on loopback, for
// the tests of programs built on package node (the mesh command, the
// examples). It is imported by tests only.
package agenttest

import (
	"context"
	"testing"
	"time"

	"github.com/agentmesh/mesh/node"
)

// Start runs cfg on loopback ports without fsync, waits until its agent is
// registered, and closes the node when the test ends.
func Start(t testing.TB, cfg node.Config) *node.Node {
	t.Helper()
	cfg.HTTPAddr, cfg.SyncWrites = "127.0.0.1:0", false
	cfg.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
	n, err := node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := n.WaitAgent(ctx); err != nil {
		t.Fatal(err)
	}
	return n
}
