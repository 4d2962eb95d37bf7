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
			if cfg.ReleaseKey, err = parseReleaseKey(releaseKey); err != nil {
				return err
			}
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
	f.StringSliceVar(&cfg.AllowedOrigins, "allow-origin", envList("MESH_COORD_ALLOW_ORIGIN", cfg.AllowedOrigins), "host patterns of pages on another origin that may read the answers, write with the token and open /events, repeatable (env MESH_COORD_ALLOW_ORIGIN)")
	f.StringSliceVar(&cfg.AllowedHosts, "allow-host", envList("MESH_COORD_ALLOW_HOST", nil), "host name patterns a request's Host may name besides localhost, loopback addresses, the listen address and the certificate's names, repeatable (env MESH_COORD_ALLOW_HOST)")
	f.BoolVar(&cfg.RequireToken, "require-token", false, "every write needs the daemon's token, programs' too (a machine shared with other users) (env MESH_COORD_REQUIRE_TOKEN)")
	f.DurationVar(&cfg.Poll, "poll", cfg.Poll, "file-change poll (env MESH_COORD_POLL)")
	f.DurationVar(&cfg.Heartbeat, "heartbeat", cfg.Heartbeat, "event socket heartbeat (env MESH_COORD_HEARTBEAT)")
	f.DurationVar(&cfg.SendTimeout, "send-timeout", cfg.SendTimeout, "time a socket has to take a message before it is dropped (env MESH_COORD_SEND_TIMEOUT)")
	f.DurationVar(&cfg.CronTick, "cron-tick", cfg.CronTick, "cron scheduler tick (env MESH_COORD_CRON_TICK)")
	f.IntVar(&cfg.DebugMaxBytes, "debug-max-bytes", cfg.DebugMaxBytes, "bytes of debug log kept (env MESH_COORD_DEBUG_MAX_BYTES)")
	f.DurationVar(&cfg.DebugMaxAge, "debug-max-age", cfg.DebugMaxAge, "age of debug events kept (env MESH_COORD_DEBUG_MAX_AGE)")
	f.StringVar(&cfg.Chat.AgentCmd, "agent-cmd", env("MESH_COORD_AGENT_CMD", ""), "coding-agent command of chat turns, run by /bin/sh -c with the message on stdin; empty: chat is off (env MESH_COORD_AGENT_CMD)")
	f.DurationVar(&cfg.Chat.TurnTimeout, "turn-timeout", cfg.Chat.TurnTimeout, "time one attempt of a chat turn may take before the agent is killed (env MESH_COORD_TURN_TIMEOUT)")
	f.IntVar(&cfg.Chat.MaxRetries, "turn-retries", cfg.Chat.MaxRetries, "retries of a chat turn after transient upstream errors (env MESH_COORD_TURN_RETRIES)")
	f.IntVar(&cfg.Chat.PauseAfter, "agent-pause-after", cfg.Chat.PauseAfter, "rate-limited attempts in a row that pause an agent type (env MESH_COORD_AGENT_PAUSE_AFTER)")
	f.DurationVar(&cfg.Chat.PauseFor, "agent-pause", cfg.Chat.PauseFor, "how long a rate-limited agent type is paused: its turns wait (env MESH_COORD_AGENT_PAUSE)")
	f.StringSliceVar(&cfg.AgentEnv, "agent-env", envList("MESH_COORD_AGENT_ENV", cfg.AgentEnv), "variables of this environment that agent turns and crons get: names, PREFIX_* and \"default\" (the credentials and tools of the coding agents); MESH_* never pass, repeatable (env MESH_COORD_AGENT_ENV)")
	f.IntVar(&cfg.Chat.QueueMax, "chat-queue-max", cfg.Chat.QueueMax, "messages that may wait in one conversation (env MESH_COORD_CHAT_QUEUE_MAX)")
	f.IntVar(&cfg.Chat.MaxConvs, "chat-max-convs", cfg.Chat.MaxConvs, "conversations kept (env MESH_COORD_CHAT_MAX_CONVS)")
	f.IntVar(&cfg.Chat.MaxText, "chat-max-text", cfg.Chat.MaxText, "bytes of an operator message (env MESH_COORD_CHAT_MAX_TEXT)")
	f.IntVar(&cfg.Chat.MaxOutput, "chat-max-output", cfg.Chat.MaxOutput, "bytes of an answer kept (env MESH_COORD_CHAT_MAX_OUTPUT)")
	f.Int64Var(&cfg.Chat.MaxTimeline, "chat-max-timeline", cfg.Chat.MaxTimeline, "bytes of a conversation's timeline file; past it the timeline is archived and starts anew (env MESH_COORD_CHAT_MAX_TIMELINE)")
	f.IntVar(&cfg.Chat.AttachmentMax, "attachment-max-bytes", cfg.Chat.AttachmentMax, "decoded bytes of one attachment; larger ones are skipped as too_large (env MESH_COORD_ATTACHMENT_MAX_BYTES)")
	f.IntVar(&cfg.Chat.MaxAttachments, "max-attachments", cfg.Chat.MaxAttachments, "attachments of one message; more are skipped as too_large (env MESH_COORD_MAX_ATTACHMENTS)")
	f.IntVar(&cfg.RunsMax, "runs-max", cfg.RunsMax, "story runs running at once (env MESH_COORD_RUNS_MAX)")
	f.IntVar(&cfg.RunsKept, "runs-kept", cfg.RunsKept, "ended story runs kept (env MESH_COORD_RUNS_KEPT)")
	f.DurationVar(&cfg.ArchiveAfter, "archive-after", cfg.ArchiveAfter, "idle time after which a conversation's timeline is archived with gzip (env MESH_COORD_ARCHIVE_AFTER)")
	f.DurationVar(&cfg.ArchiveScan, "archive-scan", cfg.ArchiveScan, "how often idle conversations and old archives are looked for (env MESH_COORD_ARCHIVE_SCAN)")
	f.DurationVar(&cfg.StorageCache, "storage-cache", cfg.StorageCache, "how long a storage report is served before it is measured again (env MESH_COORD_STORAGE_CACHE)")
	f.StringVar(&cfg.SiteURL, "site-url", env("MESH_COORD_SITE_URL", ""), "base URL of the published standard and releases; empty: no site watcher, no self-update (env MESH_COORD_SITE_URL)")
	f.BoolVar(&cfg.InsecureSite, "insecure-site", false, "also take a file:// site or an http:// site on a loopback address (tests, a local mirror) (env MESH_COORD_INSECURE_SITE)")
	f.StringVar(&releaseKey, "release-key", env("MESH_COORD_RELEASE_KEY", ""), "Ed25519 key (base64, as mesh pubkey prints it, or did:key) a release's signature file must verify against (env MESH_COORD_RELEASE_KEY)")
	f.DurationVar(&cfg.SiteTimeout, "site-timeout", cfg.SiteTimeout, "time one check of the site (a download included) may take (env MESH_COORD_SITE_TIMEOUT)")
	f.DurationVar(&cfg.UpdateCooldown, "update-cooldown", cfg.UpdateCooldown, "least time between two update attempts of the watcher (env MESH_COORD_UPDATE_COOLDOWN)")
	f.Int64Var(&cfg.UpdateMaxBytes, "update-max-bytes", cfg.UpdateMaxBytes, "largest release downloaded (env MESH_COORD_UPDATE_MAX_BYTES)")
	f.DurationVar(&cfg.InstructionsWatch, "instructions-watch", cfg.InstructionsWatch, "how often the agent instruction files are compared with their source (env MESH_COORD_INSTRUCTIONS_WATCH)")
	f.StringVar(&logLevel, "log-level", env("MESH_LOG_LEVEL", "info"), "debug, info, warn or error (env MESH_LOG_LEVEL)")
	return c
}

// coordEnv names the environment variables of the typed `mesh coord`
// flags, which flagsFromEnv parses as the flags do.
var coordEnv = map[string]string{
	"port":                 "MESH_COORD_PORT",
	"poll":                 "MESH_COORD_POLL",
	"heartbeat":            "MESH_COORD_HEARTBEAT",
	"send-timeout":         "MESH_COORD_SEND_TIMEOUT",
	"cron-tick":            "MESH_COORD_CRON_TICK",
	"debug-max-bytes":      "MESH_COORD_DEBUG_MAX_BYTES",
	"debug-max-age":        "MESH_COORD_DEBUG_MAX_AGE",
	"turn-timeout":         "MESH_COORD_TURN_TIMEOUT",
	"turn-retries":         "MESH_COORD_TURN_RETRIES",
	"agent-pause-after":    "MESH_COORD_AGENT_PAUSE_AFTER",
	"agent-pause":          "MESH_COORD_AGENT_PAUSE",
	"chat-queue-max":       "MESH_COORD_CHAT_QUEUE_MAX",
	"chat-max-convs":       "MESH_COORD_CHAT_MAX_CONVS",
	"chat-max-text":        "MESH_COORD_CHAT_MAX_TEXT",
	"chat-max-timeline":    "MESH_COORD_CHAT_MAX_TIMELINE",
	"chat-max-output":      "MESH_COORD_CHAT_MAX_OUTPUT",
	"attachment-max-bytes": "MESH_COORD_ATTACHMENT_MAX_BYTES",
	"archive-after":        "MESH_COORD_ARCHIVE_AFTER",
	"archive-scan":         "MESH_COORD_ARCHIVE_SCAN",
	"storage-cache":        "MESH_COORD_STORAGE_CACHE",
	"site-timeout":         "MESH_COORD_SITE_TIMEOUT",
	"update-cooldown":      "MESH_COORD_UPDATE_COOLDOWN",
	"update-max-bytes":     "MESH_COORD_UPDATE_MAX_BYTES",
	"instructions-watch":   "MESH_COORD_INSTRUCTIONS_WATCH",
	"runs-max":             "MESH_COORD_RUNS_MAX",
	"runs-kept":            "MESH_COORD_RUNS_KEPT",
	"max-attachments":      "MESH_COORD_MAX_ATTACHMENTS",
	"require-token":        "MESH_COORD_REQUIRE_TOKEN",
	"insecure-site":        "MESH_COORD_INSECURE_SITE",
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
