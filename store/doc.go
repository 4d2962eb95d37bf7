// Package store is the node's persistent state: a thin layer over Badger v4
// that fixes how keys are built, how values are encoded (JSON) and how keys
// expire (TTL), and that offers an in-memory mode for tests.
//
// It knows nothing of HTTP, libp2p or business rules: callers own their key
// namespaces (see the key layout tables in the packages that use it).
package store
