package node

import (
	"testing"
	"time"

	"github.com/agentmesh/mesh/internal/admission"
	"github.com/agentmesh/mesh/internal/testkit"
)

// TestCardMemoryInProportion: while 1,000 agents register with cards of
// some 30 KB each and are read back (their record and their public card),
// the directory's heap in use grows by at most 2 times the cards' bytes; a
// node that joins afterwards never takes more than 4 times while it
// catches up. Full cards are kept once, as stored: not decoded into the
// read cache, nor held again in the DHT's values (on disk), nor in
// postings larger than the words (the directory grew 19.8 times, then
// 3.5-4.1 times, before). Issue 29's bar is of resident memory (4 times
// for the directory, 6 for the joiner), which is too noisy to assert on in
// a test process (mesh bench card-memory reports it): the directory's
// bound is half of it, as the collector lets the resident heap grow to
// about twice what is in use after a collection; the joiner's catch-up,
// in this process, also counts the directory serving it the log (pages of
// entries with their cards, encoded: some 0.7 times).
func TestCardMemoryInProportion(t *testing.T) {
	testkit.Slow(t, "1,000 cards of 30 KB registered, read and caught up with")
	cfg := testConfig(t, t.TempDir())
	cfg.Role = RoleBootstrap
	cfg.Budgets = admission.Config{}
	dir := startNode(t, cfg)
	base := heapInUse()
	cards := registerWithCards(t, dir, "mem", 1000, 30<<10)
	readAgents(t, dir, "mem", 1000)
	grown := int64(heapInUse()) - int64(base)
	t.Logf("%d bytes of cards: the directory's heap grew by %d (%.1fx)", cards, grown, float64(grown)/float64(cards))
	if grown > 2*cards {
		t.Fatalf("the directory holds %.1f times the cards' bytes", float64(grown)/float64(cards))
	}

	base = heapInUse()
	stop := peakHeap()
	jc := testConfig(t, t.TempDir())
	jc.Role, jc.Bootstrap = RoleNode, dir.P2PAddrs()
	j := startNode(t, jc)
	testkit.Eventually(t, time.Minute, func() bool { return j.clog.Seq() >= dir.clog.Seq() }, "the late joiner never caught up")
	readAgents(t, j, "mem", 1000)
	peak := int64(stop()) - int64(base)
	t.Logf("the late joiner's catch-up took at most %d bytes of live heap (%.1fx)", peak, float64(peak)/float64(cards))
	if peak > 4*cards {
		t.Fatalf("catching up took %.1f times the cards' bytes", float64(peak)/float64(cards))
	}
}
