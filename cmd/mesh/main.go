package main

import (
	"fmt"
	"os"

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
	root.AddCommand(nodeCmd(), coordCmd(), keygenCmd(), pubkeyCmd(), signCmd(), chatCmd(), callCmd(), benchCmd(), quorumCmd())
	return root
}
