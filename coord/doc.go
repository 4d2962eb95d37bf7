// Package coord is the local coordination daemon (mesh coord): it serves a
// project's cluster.yaml, roadmap and walls of initiatives over HTTP(S)
// and a WebSocket event stream to a dashboard, rebuilds its state when the
// project's files change, reconciles initiatives with their tasks, runs the
// cluster's crons, chat turns with a coding agent and story runs, keeps the
// agent instruction files in sync, updates itself and keeps a debug log.
// It needs no mesh node and is imported only by cmd/mesh.
//
// The parts live in sub-packages: cluster (cluster.yaml), roadmap (the
// files and their frontmatter), cron (schedules, jobs, runs), chat
// (conversations and their agent turns), runs (story runs), instructions
// (the agent instruction files), update (the published standard and
// releases), debuglog (with its redaction), agentenv (the environment of
// agent turns and crons), portreg (the machine-global port registry) and
// clock (the injectable time source), with tailbuf as a small helper.
// Every file of the project is written whole, and only inside the project,
// through one internal/atomicfile.Root. This package wires them: Config,
// New, Start (which first takes the project's lock: one daemon per
// project), Close, the HTTP routes and the event hub.
package coord
