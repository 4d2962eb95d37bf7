package node

import (
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/admission"
	"github.com/agentmesh/mesh/internal/loadgen"
	"github.com/agentmesh/mesh/internal/testkit"
)

// TestCardMemoryInProportion: while 1,000 agents register with cards of
// some 30 KB each and are read back (their record and their public card),
// the directory's heap in use grows by at most 0.7 times the cards' bytes,
// and the pages of its stores' files that it maps (Badger writes its
// value logs through memory maps: what ps counts in its resident set
// besides the heap) by at most 1.1 times (4.8 times before values were
// stored compressed, a log entry kept its card once and the DHT's values
// a record's value once for its two keys, 1.2 times before a row referred
// to its log entry for its record and card, 0.8 now); a node that joins afterwards
// never takes more than 3 times while it catches up (its stores opened
// meanwhile: 1.7 times with 8 MiB memtables and 4-byte term ids in the
// search index, 1.2 times now). Full cards are kept once, as stored: not
// decoded into the read cache, nor held again in the DHT's values (on
// disk), nor in postings larger than the words (the directory grew 19.8
// times, then 3.5-4.1 times, before). Issue 29's bar is of resident
// memory (4 times for the directory, 6 for the joiner), which is too
// noisy to assert on in a test process (mesh bench card-memory reports
// it): the directory's bound, 1.5 times, is under two fifths of it
// (0.5-1.0 times now: the gossip of the last seconds' batches, cards in
// them, is still held when it is measured; 0.8 before the search index
// packed its postings, 0.9 before it packed its term ids), as the
// collector lets the
// resident heap grow to about twice what is in use after a collection;
// the joiner's catch-up, in this process, also counts the directory
// serving it the log (pages of entries with their cards, encoded: some
// 0.7 times).
//
// Built with -race the test registers 150 cards and asserts no bound: the
// race detector's instrumentation (of zstd above all) made 1,000 cards
// take over five minutes and the catch-up more than one, and the bounds
// are asserted by the plain go test ./... that CI runs first; the paths
// still run under the detector.
func TestCardMemoryInProportion(t *testing.T) {
	testkit.Slow(t, "1,000 cards of 30 KB registered, read and caught up with")
	n, bound := 1000, func(over bool, format string, args ...any) {
		if over {
			t.Fatalf(format, args...)
		}
	}
	if testkit.Race {
		n, bound = 150, func(bool, string, ...any) {}
	}
	cfg := testConfig(t, t.TempDir())
	cfg.Role = RoleBootstrap
	cfg.Budgets = admission.Config{}
	dir := startNode(t, cfg)
	base, files := heapInUse(), mappedResident(t, cfg.DataDir)
	cards := registerWithCards(t, dir, "mem", n, 30<<10)
	readAgents(t, dir, "mem", n, cardRequests)
	grown := int64(heapInUse()) - int64(base)
	t.Logf("%d bytes of cards: the directory's heap grew by %d (%.1fx)", cards, grown, float64(grown)/float64(cards))
	bound(2*grown > 3*cards, "the directory holds %.1f times the cards' bytes", float64(grown)/float64(cards))
	mapped := mappedResident(t, cfg.DataDir) - files
	t.Logf("its stores' files mapped and resident grew by %d (%.1fx)", mapped, float64(mapped)/float64(cards))
	bound(10*mapped > 11*cards, "the directory's stores' files take %.1f times the cards' bytes of its resident set", float64(mapped)/float64(cards))

	base = heapInUse()
	stop := peakHeap()
	jc := testConfig(t, t.TempDir())
	jc.Role, jc.Bootstrap = RoleNode, dir.P2PAddrs()
	j := startNode(t, jc)
	testkit.Eventually(t, time.Minute, func() bool { return j.clog.Seq() >= dir.clog.Seq() }, "the late joiner never caught up")
	readAgents(t, j, "mem", n, 1) // one at a time: 8 at once raised the peak measured to 1.8 times
	peak := int64(stop()) - int64(base)
	t.Logf("the late joiner's catch-up took at most %d bytes of live heap (%.1fx)", peak, float64(peak)/float64(cards))
	bound(peak > 3*cards, "catching up took %.1f times the cards' bytes", float64(peak)/float64(cards))
}

// TestCardReadsAfterItsRowIsCached: the read cache keeps an agent's row
// without its full card, yet once the row is cached (by a read of its
// record) every reader of the card still sees it: search results and the
// agents page (the card's name and description), the public address (its
// skills) and the mirrored card.
func TestCardReadsAfterItsRowIsCached(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, t.TempDir())
	cfg.Role = RoleBootstrap
	dir := startNode(t, cfg)
	card := `{"name":"Cardholder Prime","description":"kept once, read from the store","skills":[{"id":"s1","name":"Skill One"}]}`
	body, sig := loadgen.Registration("holder-1", identity.GenerateKey(), []byte(card), dir.cfg.Now())
	if st, v := call(t, dir, "POST", loadgen.RegisterPath, string(body), identity.SigHeaderName, sig); st != 201 {
		t.Fatalf("register: %d %v", st, v)
	}
	if st, v := call(t, dir, "GET", "/v1/agents/holder-1", ""); st != 200 || v["full_card"] != nil {
		t.Fatalf("the record: %d %v", st, v)
	}
	testkit.Eventually(t, 10*time.Second, func() bool {
		st, v := call(t, dir, "POST", "/v1/search", `{"query":"cardholder"}`)
		res, _ := v["results"].([]any)
		return st == 200 && len(res) == 1 && res[0].(map[string]any)["name"] == "Cardholder Prime" &&
			res[0].(map[string]any)["description"] == "kept once, read from the store"
	}, "the search result never showed the card's texts")
	if st, html := rawCall(t, dir, "GET", "/agents?q=cardholder", "", "Accept", "text/html"); st != 200 || !strings.Contains(html, "Cardholder Prime") {
		t.Fatalf("the agents page: %d\n%s", st, html)
	}
	st, v := call(t, dir, "GET", "/agent/holder-1", "", "Accept", "application/json")
	skills, _ := v["skills"].([]any)
	if st != 200 || v["name"] != "Cardholder Prime" || v["card"] == nil || len(skills) != 1 || skills[0].(map[string]any)["name"] != "Skill One" {
		t.Fatalf("the public address: %d %v", st, v)
	}
	if st, v := call(t, dir, "GET", "/agent/holder-1/.well-known/agent.json", ""); st != 200 || v["name"] != "Cardholder Prime" || v["description"] != "kept once, read from the store" {
		t.Fatalf("the mirrored card: %d %v", st, v)
	}
}
