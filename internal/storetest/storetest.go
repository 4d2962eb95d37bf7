// Package storetest opens in-memory stores and command logs for tests. It
// is imported by tests only.
package storetest

import (
	"bytes"
	"testing"

	"github.com/agentmesh/mesh/internal/cmdlog"
	"github.com/agentmesh/mesh/store"
)

// DB is a store in memory, closed when t ends.
func DB(t testing.TB) *store.DB {
	t.Helper()
	db, err := store.Open(store.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// Log is a command log on a store in memory, closed when t ends.
func Log(t testing.TB) *cmdlog.Log {
	t.Helper()
	l, err := cmdlog.Open(DB(t))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Snapshot is an image of l's directory as a snapshot writes it, for a
// Restore.
func Snapshot(t testing.TB, l *cmdlog.Log) *bytes.Buffer {
	t.Helper()
	snap, err := l.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	var buf bytes.Buffer
	if _, err := snap.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	return &buf
}
