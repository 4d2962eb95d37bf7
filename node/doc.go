// Package node wires a mesh node together: the store, the registry and the
// HTTP bridge, started and stopped as one. New(cfg), Start(ctx) and Close()
// are the one way to run a node, for the mesh command, for tests and for
// agents that embed a node.
//
// It holds no business logic; each surface lives in its own package.
package node
