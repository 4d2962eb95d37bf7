package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
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
	root.AddCommand(nodeCmd(), keygenCmd(), pubkeyCmd(), signCmd(), chatCmd(), callCmd(), benchCmd())
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
