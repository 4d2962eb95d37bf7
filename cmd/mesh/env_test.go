package main

import (
	"context"
	"crypto/ed25519"
	"io"
	"math"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/agentmesh/mesh/coord"
	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/node"
)

// daemonCmds are `mesh node` and `mesh coord`, each running nothing, and
// the variables their flags declare rather than derive.
func daemonCmds() map[string]func() *cobra.Command {
	return map[string]func() *cobra.Command{
		"node":  func() *cobra.Command { return newNodeCmd(func(context.Context, node.Config) error { return nil }) },
		"coord": func() *cobra.Command { return newCoordCmd(func(context.Context, coord.Config) error { return nil }) },
	}
}

// sampleKey is a base64 Ed25519 public key.
var sampleKey = identity.EncodePublicKey(identity.GenerateKey().Public().(ed25519.PublicKey))

// sampleValue is a valid value for a flag of type typ that is not its
// default, and how the flag prints it once set.
func sampleValue(fl *pflag.Flag) (set, want string) {
	switch fl.Value.Type() {
	case "bool":
		if fl.DefValue == "true" {
			return "false", "false"
		}
		return "true", "true"
	case "duration":
		return "7s", "7s"
	case "stringSlice":
		return "a,b", "[a,b]"
	case "RATE/BURST":
		return "7/9", "7/9"
	case "string":
		switch fl.Name { // strings the command checks
		case "log-level":
			return "debug", "debug"
		case "release-key":
			return sampleKey, sampleKey
		}
		return "x7", "x7"
	}
	return "7", "7" // the numbers
}

// runWithEnv runs the command mk makes with the environment env and no
// arguments, and returns it (its flags as set) and its error.
func runWithEnv(t *testing.T, mk func() *cobra.Command, env map[string]string) (*cobra.Command, error) {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	c := mk()
	c.SetArgs(nil)
	c.SetOut(io.Discard)
	c.SetErr(io.Discard)
	return c, c.Execute()
}

// TestEveryFlagHasItsVariable: every flag of mesh node and mesh coord has
// an environment variable, named once in its help, derived from its name
// unless declared; set, the variable is the flag's value.
func TestEveryFlagHasItsVariable(t *testing.T) { // not parallel: it sets the environment
	declared := map[string]string{"coord device-id": "MESH_DEVICE_ID", "coord log-level": "MESH_LOG_LEVEL"}
	prefix := map[string]string{"node": "MESH_", "coord": "MESH_COORD_"}
	for name, mk := range daemonCmds() {
		mk().Flags().VisitAll(func(fl *pflag.Flag) {
			if fl.Hidden || fl.Deprecated != "" {
				return
			}
			t.Run(name+" --"+fl.Name, func(t *testing.T) {
				v := envOf(fl)
				want := declared[name+" "+fl.Name]
				if want == "" {
					want = prefix[name] + strings.ToUpper(strings.ReplaceAll(fl.Name, "-", "_"))
				}
				if v != want || strings.Count(fl.Usage, "(env ") != 1 || !strings.HasSuffix(fl.Usage, "(env "+want+")") {
					t.Fatalf("variable %q, help %q: want %s named once", v, fl.Usage, want)
				}
				set, shown := sampleValue(fl)
				c, err := runWithEnv(t, mk, map[string]string{v: set})
				if err != nil {
					t.Fatal(err)
				}
				if got := c.Flags().Lookup(fl.Name).Value.String(); got != shown {
					t.Fatalf("%s=%s: --%s is %s", v, set, fl.Name, got)
				}
			})
		})
	}
}

// TestBooleanVariables: a boolean flag's variable means what it says
// (true, false, 1, 0 and the other forms of strconv.ParseBool), and
// anything else stops the command, naming the variable; MESH_NO_SYNC=false
// keeps fsync on, MESH_DHT_SERVER=0 keeps DHT server mode off.
func TestBooleanVariables(t *testing.T) { // not parallel: it sets the environment
	for name, mk := range daemonCmds() {
		mk().Flags().VisitAll(func(fl *pflag.Flag) {
			if fl.Value.Type() != "bool" || envOf(fl) == "" {
				return
			}
			v := envOf(fl)
			for val, want := range map[string]string{"true": "true", "false": "false", "1": "true", "0": "false", "FALSE": "false", "T": "true"} {
				t.Run(v+"="+val, func(t *testing.T) {
					c, err := runWithEnv(t, mk, map[string]string{v: val})
					if got := c.Flags().Lookup(fl.Name).Value.String(); err != nil || got != want {
						t.Errorf("%s: --%s is %s (%v), want %s", name, fl.Name, got, err, want)
					}
				})
			}
			for _, val := range []string{"yes", "on", "", "2", "enabled"} {
				t.Run(v+"="+val, func(t *testing.T) {
					if _, err := runWithEnv(t, mk, map[string]string{v: val}); err == nil || !strings.Contains(err.Error(), v) {
						t.Errorf("%s: %v, want an error naming %s", name, err, v)
					}
				})
			}
		})
	}
	for env, want := range map[string]func(node.Config) bool{
		"MESH_NO_SYNC=false":   func(c node.Config) bool { return c.SyncWrites },
		"MESH_NO_SYNC=1":       func(c node.Config) bool { return !c.SyncWrites },
		"MESH_DHT_SERVER=0":    func(c node.Config) bool { return !c.DHTServer },
		"MESH_DHT_SERVER=true": func(c node.Config) bool { return c.DHTServer },
	} {
		t.Run(env, func(t *testing.T) {
			k, v, _ := strings.Cut(env, "=")
			got, err := nodeConfigOf(t, map[string]string{k: v}, []string{"--data", t.TempDir()})
			if err != nil || !want(got) {
				t.Errorf("sync %v, dht server %v (%v)", got.SyncWrites, got.DHTServer, err)
			}
		})
	}
}

// TestSubcommandVariables: the other subcommands' variables are named in
// their flags' help, once, and set the flags.
func TestSubcommandVariables(t *testing.T) { // not parallel: it sets the environment
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		if c.Name() == "node" || c.Name() == "coord" {
			return
		}
		c.LocalFlags().VisitAll(func(fl *pflag.Flag) {
			v := envOf(fl)
			if v == "" {
				return
			}
			if strings.Count(fl.Usage, "(env "+v+")") != 1 {
				t.Errorf("%s --%s: help %q does not name %s once", c.CommandPath(), fl.Name, fl.Usage, v)
			}
			set, shown := sampleValue(fl)
			t.Setenv(v, set)
			if err := applyEnv(c.LocalFlags()); err != nil || fl.Value.String() != shown {
				t.Errorf("%s %s=%s: --%s is %s (%v)", c.CommandPath(), v, set, fl.Name, fl.Value.String(), err)
			}
		})
	}
	walk(rootCmd())
}

// TestZeroIsUnlimited: every rate, budget and quota flag says once that
// 0 is unlimited, and means it: --wall-control-rate 0, whose Config field
// takes its default at 0, becomes no bound at all.
func TestZeroIsUnlimited(t *testing.T) { // not parallel: it sets the environment
	for name, mk := range daemonCmds() {
		mk().Flags().VisitAll(func(fl *pflag.Flag) {
			_, marked := fl.Annotations[unlimitedKey]
			rate := strings.HasSuffix(fl.Name, "-rate") || strings.HasPrefix(fl.Name, "budget-")
			if rate && !marked || strings.Count(fl.Usage, "0 is unlimited") != map[bool]int{true: 1}[marked] {
				t.Errorf("%s --%s: marked %v, help %q", name, fl.Name, marked, fl.Usage)
			}
		})
	}
	cfg, err := nodeConfigOf(t, nil, []string{"--data", t.TempDir(), "--wall-control-rate", "0", "--search-rate", "0", "--wall-socket-rate", "0", "--budget-client", "0"})
	if err != nil || !math.IsInf(cfg.Wall.ControlRate, 1) || cfg.SearchRate != 0 || cfg.WallSocketRate != 0 || !cfg.Budgets.Client.Unlimited() {
		t.Fatalf("rates of 0: control %v, search %d, socket %v, client budget %v (%v)", cfg.Wall.ControlRate, cfg.SearchRate, cfg.WallSocketRate, cfg.Budgets.Client, err)
	}
	if cfg, _ := nodeConfigOf(t, nil, []string{"--wall-control-rate", "3"}); cfg.Wall.ControlRate != 3 {
		t.Fatalf("--wall-control-rate 3: %v", cfg.Wall.ControlRate)
	}
}
