package bench

import (
	"context"
	"testing"
	"time"

	"github.com/agentmesh/mesh/internal/testkit"
)

// TestQuorumSetupsHoldOnlyTheirOwnWrites: each setup of the quorum bench
// writes to nodes that hold what it wrote and nothing else, as the lone
// directory does, so that no setup is measured on larger stores than
// another.
func TestQuorumSetupsHoldOnlyTheirOwnWrites(t *testing.T) {
	testkit.Slow(t, "seven nodes on disk")
	const clients = 2
	run, err := Quorum(context.Background(), QuorumOptions{Size: 3, Concurrency: clients, Duration: time.Second, Rounds: 2, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	made := make([]int64, 3) // lone, to the leader, through a follower
	if run.Idle <= 0 {
		t.Errorf("idle CPU %v", run.Idle)
	}
	for i, r := range run.Rounds {
		for j, s := range []QuorumSetup{r.Lone, r.Leader, r.Follower} {
			if s.Requests == 0 || s.Errors > 0 {
				t.Fatalf("round %d, setup %d: %d registrations, %d failed", i+1, j, s.Requests, s.Errors)
			}
			made[j] += s.Requests
			// A registration a client sent as the round ended is not
			// counted, and may land: one a client a round at most.
			if s.Agents < made[j] || s.Agents > made[j]+int64(clients*(i+1)) {
				t.Errorf("round %d, setup %d: %d agents held, %d registered through it", i+1, j, s.Agents, made[j])
			}
		}
	}
}
