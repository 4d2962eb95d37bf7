// Package admission decides which writes a node takes, so that one
// client, or one rogue node, cannot flood the directory's log.
//
// A write costs one token from each of the budgets (token buckets of
// internal/ratelimit) it falls under:
//
//   - client: per client address (httpx.AddrKey: an IPv4 address, an IPv6
//     /64), for a request with no established credential; at the directory,
//     for a request another node forwarded, per forwarding node and the
//     address that node reports, so a node can spend only its own clients'
//     budgets;
//   - credential: per established credential (a registered agent's bearer
//     token, or a Mesh-Sig by a key bound to a registered agent), so a
//     signed client keeps its own budget behind a shared address. A key
//     that is bound to nothing costs nothing to make, so it earns no
//     budget of its own: its requests count at their address;
//   - node: at the directory, per node that forwards or proposes to it,
//     and for its own clients' writes as one more node's share;
//   - directory: at the directory, every write its log takes, in all.
//
// A write refused by any budget takes nothing from the others and is
// answered 429 rate_limited (client, credential: the client is over its
// own budget) or 503 directory_busy (node, directory: the directory sheds
// load), both with Retry-After. Refusals are counted by surface and budget
// and remembered for a minute, for /health.
//
// Writes is the HTTP middleware of the edge budgets; Proposer meters the
// log itself, wrapped around whichever proposer sequences it (the local
// single writer or a consensus engine), so the directory-side meter stays
// on the propose path whatever orders the log.
//
// It knows nothing of agents, clusters or libp2p: surfaces, credentials
// and peers are strings its callers name.
package admission
