package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/agentmesh/mesh/coord"
)

func coordCmd() *cobra.Command { return newCoordCmd(runCoord) }

// newCoordCmd is `mesh coord`, handing the configuration its flags and
// environment make to run.
func newCoordCmd(run func(context.Context, coord.Config) error) *cobra.Command {
	cfg := coord.DefaultConfig()
	host, _ := os.Hostname()
	var logLevel string
	c := &cobra.Command{
		Use:   "coord",
		Short: "Run the coordination daemon of a project folder",
		Long: `Run the local coordination daemon of a project folder (one with a cluster.yaml):
it serves the cluster, the roadmap and the walls of initiatives over HTTP and a
WebSocket event stream, rebuilds them when files change, runs the cluster's crons
and keeps a debug log. It needs no mesh node.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := flagsFromEnv(cmd.Flags(), coordEnv); err != nil {
				return err
			}
			log, err := newLogger(logLevel)
			if err != nil {
				return err
			}
			slog.SetDefault(log)
			cfg.Logger = log
			return run(cmd.Context(), cfg)
		},
	}
	f := c.Flags()
	f.StringVar(&cfg.Dir, "dir", env("MESH_COORD_DIR", cfg.Dir), "project folder, with cluster.yaml (env MESH_COORD_DIR)")
	f.IntVar(&cfg.Port, "port", 0, "explicit port; without it the cluster's sticky port, else the first free one of the range (env MESH_COORD_PORT)")
	f.StringVar(&cfg.Host, "host", env("MESH_COORD_HOST", cfg.Host), "address to listen on (env MESH_COORD_HOST)")
	f.StringVar(&cfg.Registry, "registry", env("MESH_COORD_REGISTRY", cfg.Registry), "machine-global port registry file (env MESH_COORD_REGISTRY)")
	f.StringVar(&cfg.DeviceID, "device-id", env("MESH_DEVICE_ID", host), "this machine's device id; only the cluster's crons_owner fires crons (env MESH_DEVICE_ID)")
	f.StringVar(&cfg.TLSBundle, "tls-bundle", env("MESH_COORD_TLS_BUNDLE", ""), "PEM file with certificate chain and key; default DIR/.coord/tls.pem, served over HTTPS when present (env MESH_COORD_TLS_BUNDLE)")
	f.StringSliceVar(&cfg.AllowedOrigins, "allow-origin", envList("MESH_COORD_ALLOW_ORIGIN", cfg.AllowedOrigins), "host patterns of pages on another origin that may read the answers and open /events, repeatable (env MESH_COORD_ALLOW_ORIGIN)")
	f.DurationVar(&cfg.Poll, "poll", cfg.Poll, "file-change poll (env MESH_COORD_POLL)")
	f.DurationVar(&cfg.Heartbeat, "heartbeat", cfg.Heartbeat, "event socket heartbeat (env MESH_COORD_HEARTBEAT)")
	f.DurationVar(&cfg.SendTimeout, "send-timeout", cfg.SendTimeout, "time a socket has to take a message before it is dropped (env MESH_COORD_SEND_TIMEOUT)")
	f.DurationVar(&cfg.CronTick, "cron-tick", cfg.CronTick, "cron scheduler tick (env MESH_COORD_CRON_TICK)")
	f.IntVar(&cfg.DebugMaxBytes, "debug-max-bytes", cfg.DebugMaxBytes, "bytes of debug log kept (env MESH_COORD_DEBUG_MAX_BYTES)")
	f.DurationVar(&cfg.DebugMaxAge, "debug-max-age", cfg.DebugMaxAge, "age of debug events kept (env MESH_COORD_DEBUG_MAX_AGE)")
	f.StringVar(&logLevel, "log-level", env("MESH_LOG_LEVEL", "info"), "debug, info, warn or error (env MESH_LOG_LEVEL)")
	return c
}

// coordEnv names the environment variables of the typed `mesh coord`
// flags, which flagsFromEnv parses as the flags do.
var coordEnv = map[string]string{
	"port":            "MESH_COORD_PORT",
	"poll":            "MESH_COORD_POLL",
	"heartbeat":       "MESH_COORD_HEARTBEAT",
	"send-timeout":    "MESH_COORD_SEND_TIMEOUT",
	"cron-tick":       "MESH_COORD_CRON_TICK",
	"debug-max-bytes": "MESH_COORD_DEBUG_MAX_BYTES",
	"debug-max-age":   "MESH_COORD_DEBUG_MAX_AGE",
}

func runCoord(ctx context.Context, cfg coord.Config) error {
	d, err := coord.New(cfg)
	if err != nil {
		return err
	}
	return runUntilSignal(ctx, d, func() {
		fmt.Printf("mesh coord %s\n  url   %s\n  port  %s\n  dir   %s\n", coord.Version, d.URL(), d.PortReason(), cfg.Dir)
	})
}
