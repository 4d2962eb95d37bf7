// Package bench runs the measurements behind `mesh bench`: in-process
// meshes on loopback, WebSocket clients, and the figures they yield. It is
// test and operations tooling: nothing in the node imports it.
package bench
