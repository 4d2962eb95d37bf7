package node

import (
	"bytes"
	"testing"
	"time"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/loadgen"
	"github.com/agentmesh/mesh/internal/testkit"
	"github.com/agentmesh/mesh/store"
)

// TestCardsServedPastCompactionAndSnapshots: an agent's row refers to its
// registration's log entry for its record and card; once the directory's
// change log is compacted past that entry, the directory still serves the
// card (mirrored and on the public address), and a node that joins
// afterwards (it installs a snapshot: the entry is no longer served),
// serves it the same; the agent's next registration is served by both.
// The directory's row holds neither the record nor the card.
func TestCardsServedPastCompactionAndSnapshots(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, t.TempDir())
	cfg.Role = RoleBootstrap
	dir := startNode(t, cfg)
	key := identity.GenerateKey()
	register := func(name string) {
		t.Helper()
		card := `{"name":"` + name + `","description":"served from its log entry","skills":[{"id":"s1","name":"Skill One"}]}`
		body, sig := loadgen.Registration("entry-1", key, []byte(card), dir.cfg.Now())
		if st, v := call(t, dir, "POST", loadgen.RegisterPath, string(body), identity.SigHeaderName, sig); st != 201 && st != 200 {
			t.Fatalf("register: %d %v", st, v)
		}
	}
	served := func(n *Node, name string) bool {
		st, v := call(t, n, "GET", "/agent/entry-1/.well-known/agent.json", "")
		st2, p := call(t, n, "GET", "/agent/entry-1", "", "Accept", "application/json")
		skills, _ := p["skills"].([]any)
		return st == 200 && v["name"] == name && st2 == 200 && p["name"] == name && len(skills) == 1
	}
	register("First Card")
	if err := dir.clog.Compact(0); err != nil {
		t.Fatal(err)
	}
	if !served(dir, "First Card") {
		t.Fatal("the directory no longer serves the card after compacting its log")
	}
	var row []byte
	dir.clog.DB().View(func(tx *store.Txn) error { row, _ = tx.Get([]byte("a/entry-1")); return nil })
	if !bytes.Contains(row, []byte(`"record_logged":true`)) || bytes.Contains(row, []byte("First Card")) {
		t.Fatalf("the directory's row holds the card itself, or nothing: %s", row)
	}
	jc := testConfig(t, t.TempDir())
	jc.Role, jc.Bootstrap = RoleNode, dir.P2PAddrs()
	j := startNode(t, jc)
	testkit.Eventually(t, 30*time.Second, func() bool { return j.clog.Seq() >= dir.clog.Seq() && served(j, "First Card") },
		"the joiner never served the card")
	register("Second Card")
	testkit.Eventually(t, 30*time.Second, func() bool { return served(dir, "Second Card") && served(j, "Second Card") },
		"the card registered again was not served by both")
}
