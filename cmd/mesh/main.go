package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

func main() {
	if err := rootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "mesh:", err)
		os.Exit(1)
	}
}

func rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "mesh",
		Short:         "A peer-to-peer agent registry and chat mesh",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(nodeCmd(), coordCmd(), keygenCmd(), pubkeyCmd(), signCmd(), chatCmd(), callCmd(), benchCmd(), quorumCmd())
	return root
}

// envList is env for a comma-separated list.
func envList(name string, def []string) []string {
	if v, ok := os.LookupEnv(name); ok {
		return strings.Split(v, ",")
	}
	return def
}

// env returns the environment variable name, or def when it is unset:
// every flag falls back to an environment variable.
func env(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

// flagsFromEnv sets each flag of vars (flag name to variable) that the
// command line left out from its environment variable, parsed as the flag
// parses its value, so that a malformed value is an error rather than a
// silent default.
func flagsFromEnv(f *pflag.FlagSet, vars map[string]string) error {
	for name, v := range vars {
		val, ok := os.LookupEnv(v)
		if !ok || f.Changed(name) {
			continue
		}
		if err := f.Set(name, val); err != nil {
			return fmt.Errorf("%s=%q: %w", v, val, err)
		}
	}
	return nil
}
