// Command mesh runs a mesh node (mesh node) and offers the tools a person
// needs to use one: identity keys and Mesh-Sig headers for curl (keygen,
// pubkey, sign), a paying caller of agents' skills (call), a terminal client
// for cluster walls (chat) and the measurements (bench). It only turns flags
// and environment into configuration and prints; the work is done by the
// packages it calls.
package main
