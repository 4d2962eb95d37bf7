// Package identity holds the primitives every other package shares to name
// and authenticate a key holder: Ed25519 key files, did:key encoding, and the
// Mesh-Sig signed-request scheme (spec section 5).
//
// It sits at the bottom of the dependency graph: it knows nothing of HTTP
// routing, storage, agents or the network. Replay protection (remembering
// nonces) is left to the caller, because where nonces live depends on who
// applies the request (see registryapi).
package identity
