package main

import (
	"context"
	"io"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/mesh/internal/admission"
	"github.com/agentmesh/mesh/node"
	"github.com/agentmesh/mesh/registryapi"
	"github.com/agentmesh/mesh/wall"
)

// TestNodeWallRateFlags: the wall's rates come from the flags, else from
// the environment, else the defaults; 0 is unlimited, and a malformed or
// negative value (of these, or of another numeric flag's variable) is an
// error that names where it came from.
func TestNodeWallRateFlags(t *testing.T) { // not parallel: it sets the environment
	for _, tc := range []struct {
		name         string
		env          map[string]string
		args         []string
		socket, room float64
		memory       int64
		control      float64
		err          string
	}{
		{name: "defaults", socket: wall.DefaultSocketRate, room: wall.DefaultRoomRate},
		{name: "flags", args: []string{"--wall-socket-rate", "0", "--wall-room-rate", "2500"}, socket: 0, room: 2500},
		{name: "env", env: map[string]string{"MESH_WALL_SOCKET_RATE": "120", "MESH_WALL_ROOM_RATE": "0"}, socket: 120, room: 0},
		{name: "flag over env", env: map[string]string{"MESH_WALL_SOCKET_RATE": "120"}, args: []string{"--wall-socket-rate=7"}, socket: 7, room: wall.DefaultRoomRate},
		{name: "bad env", env: map[string]string{"MESH_WALL_ROOM_RATE": "fast"}, err: "MESH_WALL_ROOM_RATE"},
		{name: "bad gossip env", env: map[string]string{"MESH_GOSSIP_QUEUE_BYTES": "4MiB"}, err: "MESH_GOSSIP_QUEUE_BYTES"},
		{name: "bad grace env", env: map[string]string{"MESH_SHUTDOWN_GRACE": "5"}, err: "MESH_SHUTDOWN_GRACE"},
		{name: "negative grace", args: []string{"--shutdown-grace", "-1s", "--data", t.TempDir()}, err: "ShutdownGrace"},
		{name: "bad flag", args: []string{"--wall-socket-rate", "lots"}, err: "wall-socket-rate"},
		{name: "wall memory and control flags", args: []string{"--wall-send-memory", "1048576", "--wall-control-rate", "3"},
			socket: wall.DefaultSocketRate, room: wall.DefaultRoomRate, memory: 1 << 20, control: 3},
		{name: "wall memory and control env", env: map[string]string{"MESH_WALL_SEND_MEMORY": "2097152", "MESH_WALL_CONTROL_RATE": "5"},
			socket: wall.DefaultSocketRate, room: wall.DefaultRoomRate, memory: 2 << 20, control: 5},
		{name: "bad memory env", env: map[string]string{"MESH_WALL_SEND_MEMORY": "64MiB"}, err: "MESH_WALL_SEND_MEMORY"},
		{name: "negative control rate", args: []string{"--wall-control-rate", "-1", "--data", t.TempDir()}, err: "ControlRate"},
		{name: "negative", args: []string{"--wall-room-rate", "-1", "--data", t.TempDir()}, err: "wall rate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := nodeConfigCase(t, tc.env, tc.args, tc.err)
			switch {
			case !ok:
			case got.WallSocketRate != tc.socket || got.WallRoomRate != tc.room:
				t.Fatalf("rates %v, %v; want %v, %v", got.WallSocketRate, got.WallRoomRate, tc.socket, tc.room)
			case tc.memory != 0 && (got.Wall.SendMemory != tc.memory || got.Wall.ControlRate != tc.control):
				t.Fatalf("send memory %d, control rate %v; want %d, %v", got.Wall.SendMemory, got.Wall.ControlRate, tc.memory, tc.control)
			case tc.memory == 0 && (got.Wall.SendMemory != wall.DefaultSendMemory || got.Wall.ControlRate != wall.DefaultControlRate):
				t.Fatalf("send memory %d, control rate %v; want the defaults", got.Wall.SendMemory, got.Wall.ControlRate)
			}
		})
	}
}

// TestNodeTrustedProxyFlag: --trusted-proxy is repeatable and
// comma-separated, MESH_TRUSTED_PROXY is its default, and a bad range
// stops the node before it starts, naming the range.
func TestNodeTrustedProxyFlag(t *testing.T) { // not parallel: it sets the environment
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
		if err := applyEnv(c.Flags()); err != nil {
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

// nodeConfigOf runs `mesh node` with env and args up to the
// configuration it would start with, and returns it with its validation.
func nodeConfigOf(t *testing.T, env map[string]string, args []string) (node.Config, error) {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	var got node.Config
	c := newNodeCmd(func(_ context.Context, cfg node.Config) error {
		got = cfg
		return cfg.Validate()
	})
	c.SetArgs(args)
	c.SetOut(io.Discard)
	c.SetErr(io.Discard)
	return got, c.Execute()
}

// nodeConfigCase is nodeConfigOf for a table case that wants an error
// naming wantErr ("" for none): ok reports whether the config is to be
// checked (no error wanted, none had).
func nodeConfigCase(t *testing.T, env map[string]string, args []string, wantErr string) (cfg node.Config, ok bool) {
	t.Helper()
	cfg, err := nodeConfigOf(t, env, args)
	switch {
	case wantErr != "":
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Fatalf("error %v, want one naming %q", err, wantErr)
		}
		return cfg, false
	case err != nil:
		t.Fatal(err)
	}
	return cfg, true
}

// TestNodeBudgetFlags: the write budgets and expiry windows come from the
// flags, else from the environment, else the defaults; 0 is unlimited (or
// never); a malformed value names where it came from.
func TestNodeBudgetFlags(t *testing.T) { // not parallel: it sets the environment
	for _, tc := range []struct {
		name    string
		env     map[string]string
		args    []string
		want    admission.Config
		agentTT time.Duration
		err     string
	}{
		{name: "defaults", want: admission.DefaultConfig(), agentTT: registryapi.DefaultActivationWindow},
		{name: "flags", args: []string{"--budget-client", "0", "--budget-credential", "2/9", "--budget-node", "50", "--budget-directory", "100/100", "--agent-activation-window", "0"},
			want: admission.Config{Credential: admission.Budget{Rate: 2, Burst: 9}, Node: admission.Budget{Rate: 50}, Directory: admission.Budget{Rate: 100, Burst: 100}}},
		{name: "env", env: map[string]string{"MESH_BUDGET_CLIENT": "1/3", "MESH_AGENT_ACTIVATION_WINDOW": "2h"},
			want: admission.Config{Client: admission.Budget{Rate: 1, Burst: 3}, Credential: admission.DefaultCredential, Node: admission.DefaultNode, Directory: admission.DefaultDirectory}, agentTT: 2 * time.Hour},
		{name: "flag over env", env: map[string]string{"MESH_BUDGET_NODE": "1/1"}, args: []string{"--budget-node=7/70"},
			want: admission.Config{Client: admission.DefaultClient, Credential: admission.DefaultCredential, Node: admission.Budget{Rate: 7, Burst: 70}, Directory: admission.DefaultDirectory}, agentTT: registryapi.DefaultActivationWindow},
		{name: "bad env", env: map[string]string{"MESH_BUDGET_DIRECTORY": "lots"}, err: "MESH_BUDGET_DIRECTORY"},
		{name: "bad flag", args: []string{"--budget-client", "5/0"}, err: "budget-client"},
		{name: "negative window", args: []string{"--cluster-join-window", "-1h", "--data", t.TempDir()}, err: "ClusterJoinWindow"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := nodeConfigCase(t, tc.env, tc.args, tc.err)
			switch {
			case !ok:
			case got.Budgets != tc.want || got.AgentActivationWindow != tc.agentTT:
				t.Fatalf("budgets %+v, window %s; want %+v, %s", got.Budgets, got.AgentActivationWindow, tc.want, tc.agentTT)
			}
		})
	}
}

// TestNodeCardFetchFlags: the card fetch settings come from the flags,
// else from the environment, else the defaults; bad values are refused.
func TestNodeCardFetchFlags(t *testing.T) { // not parallel: it sets the environment
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want node.CardFetch
		err  string
	}{
		{name: "defaults", want: node.DefaultCardFetch()},
		{name: "flags", args: []string{"--card-refresh", "1m", "--card-fetch-timeout", "2s", "--card-fetch-max-bytes", "4096",
			"--card-fetch-concurrency", "3", "--card-fetch-redirects", "0", "--card-fetch-allow", "10.0.0.0/8,127.0.0.1"},
			want: node.CardFetch{Refresh: time.Minute, Timeout: 2 * time.Second, MaxBytes: 4096, Concurrency: 3, Allow: []string{"10.0.0.0/8", "127.0.0.1"}}},
		{name: "env", env: map[string]string{"MESH_CARD_REFRESH": "0", "MESH_CARD_FETCH_ALLOW": "192.168.0.0/16", "MESH_CARD_FETCH_CONCURRENCY": "2"},
			want: func() node.CardFetch {
				c := node.DefaultCardFetch()
				c.Refresh, c.Concurrency, c.Allow = 0, 2, []string{"192.168.0.0/16"}
				return c
			}()},
		{name: "bad allow", args: []string{"--card-fetch-allow", "10.0.0.0/33"}, err: "10.0.0.0/33"},
		{name: "too large", args: []string{"--card-fetch-max-bytes", "1000000"}, err: "max bytes"},
		{name: "no concurrency", env: map[string]string{"MESH_CARD_FETCH_CONCURRENCY": "0"}, err: "concurrency"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := nodeConfigCase(t, tc.env, tc.args, tc.err)
			switch {
			case !ok:
			case !reflect.DeepEqual(got.Cards, tc.want):
				t.Fatalf("cards %+v, want %+v", got.Cards, tc.want)
			}
		})
	}
}
