package main

import (
	"testing"

	"github.com/agentmesh/mesh/internal/testkit"
)

// TestMain runs up to 8 tests at once: those in process mostly wait on
// loopback (1.3 s of CPU in 12 s, one at a time). Those that start
// processes, or set the environment, are not parallel.
func TestMain(m *testing.M) { testkit.MainWaiting(m, 8) }
