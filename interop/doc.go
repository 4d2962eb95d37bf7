// Package interop is the node's contact with the outside world's formats and
// chains: A2A agent cards and pricing rows, x402 payment challenges, Solana
// payment links, Solana RPC use and transaction verification, the deposit
// poller, the provider-side payment cascade (free tier, prepaid balance,
// post-pay, x402) and the caller's client that pays and retries.
//
// An agent that embeds a node serves its card and skills through an Agent;
// node wires it to the HTTP bridge and the registry. interop keeps all of
// its state in the node's Badger store under the "x/" key prefix (see
// ledger.go) and must not import node, registryapi or wall: what it needs of
// the registry (a caller's reputation, filing a report) is handed to it as
// functions.
package interop
