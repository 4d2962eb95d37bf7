package main

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestNodeTrustedProxyFlag: --trusted-proxy is repeatable and
// comma-separated, MESH_TRUSTED_PROXY is its default, and a bad range
// stops the node before it starts, naming the range.
func TestNodeTrustedProxyFlag(t *testing.T) {
	t.Setenv("MESH_TRUSTED_PROXY", "10.0.0.0/8,fd00::/8")
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{nil, []string{"10.0.0.0/8", "fd00::/8"}},
		{[]string{"--trusted-proxy", "192.0.2.1", "--trusted-proxy", "198.51.100.0/24,::1"}, []string{"192.0.2.1", "198.51.100.0/24", "::1"}},
	} {
		c := nodeCmd()
		if err := c.ParseFlags(tc.args); err != nil {
			t.Fatal(err)
		}
		if got, _ := c.Flags().GetStringSlice("trusted-proxy"); !slices.Equal(got, tc.want) {
			t.Errorf("%q: trusted proxies %q, want %q", tc.args, got, tc.want)
		}
	}

	// A cancelled context stops a node that starts by mistake at once.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	root := rootCmd()
	root.SetArgs([]string{"node", "--data", filepath.Join(t.TempDir(), "data"), "--http", "127.0.0.1:0",
		"--listen", "/ip4/127.0.0.1/tcp/0", "--no-sync", "--trusted-proxy", "10.0.0.0/33"})
	if err := root.ExecuteContext(ctx); err == nil || !strings.Contains(err.Error(), `trusted proxy "10.0.0.0/33"`) {
		t.Fatalf("mesh node with a bad trusted proxy: %v", err)
	}
}
