// Package registryapi is the agent registry: the canonical directory as a
// deterministic state machine, bearer tokens, Mesh-Sig checks on signed
// requests, reputation reports and their rollup, DHT agent records, and the
// HTTP handlers of the /v1/agents surface and the legacy hub paths.
//
// # The directory is a state machine
//
// Every write (register, delete, feedback, catalog import, and the
// directory's activate and expire of registrations never used, see
// expiry.go) is a Command, proposed to the canonical log (internal/cmdlog) as an entry of
// Kind. The log orders entries and hands each to Directory.Apply, which
// changes state in the store inside the transaction that also appends the
// entry to the change log. Apply reads nothing but the command and the
// current state: the clock reading and every random value (api key hashes)
// travel inside the command. So any replica that applies the same commands
// in the same order reaches the same state, whether the order comes from
// the local single writer or from a consensus engine.
//
// Heartbeats are not: they are soft state kept apart from the log
// (Presence), recorded by the directory node and copied by the others.
//
// Reads (GET agent, identity, reputation) go to the store, through a small
// cache of agent rows that every applied command invalidates.
//
// It must not import the wall package.
package registryapi
