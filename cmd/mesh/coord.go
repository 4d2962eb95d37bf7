package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/agentmesh/mesh/coord"
	"github.com/agentmesh/mesh/identity"
)

func coordCmd() *cobra.Command { return newCoordCmd(runCoord) }

// newCoordCmd is `mesh coord`, handing the configuration its flags and
// environment make to run.
func newCoordCmd(run func(context.Context, coord.Config) error) *cobra.Command {
	cfg := coord.DefaultConfig()
	host, _ := os.Hostname()
	var logLevel, releaseKey string
	c := &cobra.Command{
		Use:   "coord",
		Short: "Run the coordination daemon of a project folder",
		Long: `Run the local coordination daemon of a project folder (one with a cluster.yaml):
it serves the cluster, the roadmap and the walls of initiatives over HTTP and a
WebSocket event stream, rebuilds them when files change, runs the cluster's crons,
chat turns with a coding agent (--agent-cmd) and story runs, keeps the agent
instruction files in sync, updates itself (--site-url) and keeps a debug log. It
needs no mesh node.`,
		Args:    cobra.NoArgs,
		PreRunE: applyEnvHook,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newLogger(logLevel)
			if err != nil {
				return err
			}
			slog.SetDefault(log)
			cfg.Logger = log
			if cfg.ReleaseKey, err = parseReleaseKey(releaseKey); err != nil {
				return err
			}
			return run(cmd.Context(), cfg)
		},
	}
	f := c.Flags()
	f.StringVar(&cfg.Dir, "dir", cfg.Dir, "project folder, with cluster.yaml")
	f.IntVar(&cfg.Port, "port", 0, "explicit port; without it the cluster's sticky port, else the first free one of the range")
	f.StringVar(&cfg.Host, "host", cfg.Host, "address to listen on")
	f.StringVar(&cfg.Registry, "registry", cfg.Registry, "machine-global port registry file")
	f.StringVar(&cfg.DeviceID, "device-id", host, "this machine's device id; only the cluster's crons_owner fires crons")
	f.StringVar(&cfg.TLSBundle, "tls-bundle", "", "PEM file with certificate chain and key; default DIR/.coord/tls.pem, served over HTTPS when present")
	f.StringSliceVar(&cfg.AllowedOrigins, "allow-origin", cfg.AllowedOrigins, "host patterns of pages on another origin that may read the answers, write with the token and open /events, repeatable")
	f.StringSliceVar(&cfg.AllowedHosts, "allow-host", nil, "host name patterns a request's Host may name besides localhost, loopback addresses, the listen address and the certificate's names, repeatable")
	f.BoolVar(&cfg.RequireToken, "require-token", false, "every write needs the daemon's token, programs' too (a machine shared with other users)")
	f.DurationVar(&cfg.Poll, "poll", cfg.Poll, "file-change poll")
	f.DurationVar(&cfg.Heartbeat, "heartbeat", cfg.Heartbeat, "event socket heartbeat")
	f.DurationVar(&cfg.SendTimeout, "send-timeout", cfg.SendTimeout, "time a socket has to take a message before it is dropped")
	f.DurationVar(&cfg.CronTick, "cron-tick", cfg.CronTick, "cron scheduler tick")
	f.IntVar(&cfg.DebugMaxBytes, "debug-max-bytes", cfg.DebugMaxBytes, "bytes of debug log kept")
	f.DurationVar(&cfg.DebugMaxAge, "debug-max-age", cfg.DebugMaxAge, "age of debug events kept")
	f.StringVar(&cfg.Chat.AgentCmd, "agent-cmd", "", "coding-agent command of chat turns, run by /bin/sh -c with the message on stdin; empty: chat is off")
	f.DurationVar(&cfg.Chat.TurnTimeout, "turn-timeout", cfg.Chat.TurnTimeout, "time one attempt of a chat turn may take before the agent is killed")
	f.IntVar(&cfg.Chat.MaxRetries, "turn-retries", cfg.Chat.MaxRetries, "retries of a chat turn after transient upstream errors")
	f.IntVar(&cfg.Chat.PauseAfter, "agent-pause-after", cfg.Chat.PauseAfter, "rate-limited attempts in a row that pause an agent type")
	f.DurationVar(&cfg.Chat.PauseFor, "agent-pause", cfg.Chat.PauseFor, "how long a rate-limited agent type is paused: its turns wait")
	f.StringSliceVar(&cfg.AgentEnv, "agent-env", cfg.AgentEnv, "variables of this environment that agent turns and crons get: names, PREFIX_* and \"default\" (the credentials and tools of the coding agents); MESH_* never pass, repeatable")
	f.IntVar(&cfg.Chat.QueueMax, "chat-queue-max", cfg.Chat.QueueMax, "messages that may wait in one conversation")
	f.IntVar(&cfg.Chat.MaxConvs, "chat-max-convs", cfg.Chat.MaxConvs, "conversations kept")
	f.IntVar(&cfg.Chat.MaxText, "chat-max-text", cfg.Chat.MaxText, "bytes of an operator message")
	f.IntVar(&cfg.Chat.MaxOutput, "chat-max-output", cfg.Chat.MaxOutput, "bytes of an answer kept")
	f.Int64Var(&cfg.Chat.MaxTimeline, "chat-max-timeline", cfg.Chat.MaxTimeline, "bytes of a conversation's timeline file; past it the timeline is archived and starts anew")
	f.IntVar(&cfg.Chat.AttachmentMax, "attachment-max-bytes", cfg.Chat.AttachmentMax, "decoded bytes of one attachment; larger ones are skipped as too_large")
	f.IntVar(&cfg.Chat.MaxAttachments, "max-attachments", cfg.Chat.MaxAttachments, "attachments of one message; more are skipped as too_large")
	f.IntVar(&cfg.RunsMax, "runs-max", cfg.RunsMax, "story runs running at once")
	f.IntVar(&cfg.RunsKept, "runs-kept", cfg.RunsKept, "ended story runs kept")
	f.DurationVar(&cfg.ArchiveAfter, "archive-after", cfg.ArchiveAfter, "idle time after which a conversation's timeline is archived with gzip")
	f.DurationVar(&cfg.ArchiveScan, "archive-scan", cfg.ArchiveScan, "how often idle conversations and old archives are looked for")
	f.DurationVar(&cfg.StorageCache, "storage-cache", cfg.StorageCache, "how long a storage report is served before it is measured again")
	f.StringVar(&cfg.SiteURL, "site-url", "", "base URL of the published standard and releases; empty: no site watcher, no self-update")
	f.BoolVar(&cfg.InsecureSite, "insecure-site", false, "also take a file:// site or an http:// site on a loopback address (tests, a local mirror)")
	f.StringVar(&releaseKey, "release-key", "", "Ed25519 key (base64, as mesh pubkey prints it, or did:key) a release's signature file must verify against")
	f.DurationVar(&cfg.SiteTimeout, "site-timeout", cfg.SiteTimeout, "time one check of the site (a download included) may take")
	f.DurationVar(&cfg.UpdateCooldown, "update-cooldown", cfg.UpdateCooldown, "least time between two update attempts of the watcher")
	f.Int64Var(&cfg.UpdateMaxBytes, "update-max-bytes", cfg.UpdateMaxBytes, "largest release downloaded")
	f.DurationVar(&cfg.InstructionsWatch, "instructions-watch", cfg.InstructionsWatch, "how often the agent instruction files are compared with their source")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	envVar(f, "device-id", "MESH_DEVICE_ID")
	envVar(f, "log-level", "MESH_LOG_LEVEL") // as mesh node's
	bindEnv(f, "MESH_COORD_")
	return c
}

// parseReleaseKey reads --release-key: empty (none), a did:key or a base64
// Ed25519 public key.
func parseReleaseKey(s string) (ed25519.PublicKey, error) {
	var (
		key ed25519.PublicKey
		err error
	)
	switch s = strings.TrimSpace(s); {
	case s == "":
		return nil, nil
	case strings.HasPrefix(s, "did:"):
		key, err = identity.PublicKeyFromDID(s)
	default:
		key, err = identity.DecodePublicKey(s)
	}
	if err != nil {
		return nil, fmt.Errorf("--release-key: %w", err)
	}
	return key, nil
}

func runCoord(ctx context.Context, cfg coord.Config) error {
	// Resolved now: once a release replaces it, the running file is gone.
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cfg.Executable = exe
	d, err := coord.New(cfg)
	if err != nil {
		return err
	}
	err = runUntilSignal(ctx, d, func() { coordBanner(os.Stdout, d, cfg.Dir) })
	if !errors.Is(err, errRestart) {
		return err
	}
	// A new version replaced the executable: run it in this process, with
	// the same arguments and environment, so that it takes the same
	// (sticky or explicit) port again.
	return syscall.Exec(exe, os.Args, os.Environ())
}

// coordBanner says where the daemon serves and where a dashboard finds
// the token its writes need.
func coordBanner(w io.Writer, d *coord.Daemon, dir string) {
	fmt.Fprintf(w, "mesh coord %s\n  url   %s\n  port  %s\n  dir   %s\n", coord.Version, d.URL(), d.PortReason(), dir)
	fmt.Fprintf(w, "  token %s (a dashboard's writes send it: Authorization: Bearer <token>)\n", d.TokenFile())
}
