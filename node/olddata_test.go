package node

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/loadgen"
)

// TestDataDirOfTheReleaseBefore: a data directory written by the release
// before values were stored compressed (testdata/release-before.tar.gz: a
// directory that took three signed registrations of agents old-0..2, each
// handing over a card of about 6 KB of loadgen.NewWords(7), each card
// twice in its log entry and twice in its row, uncompressed, and the DHT's
// values compressed whole) opens and serves each agent's record and
// mirrored card as that release did; a registration taken then is stored
// as this release stores it, and every card reads the same after a
// restart.
func TestDataDirOfTheReleaseBefore(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	untar(t, "testdata/release-before.tar.gz", dir)
	cfg := testConfig(t, dir)
	cfg.Role = RoleBootstrap
	n := startNode(t, cfg)
	words := loadgen.NewWords(7)
	cards := map[string][]byte{}
	for i := range 3 {
		id := fmt.Sprintf("old-%d", i)
		cards[id] = words.Card(id, 6<<10)
	}
	checkCards(t, n, cards)

	cards["new-0"] = words.Card("new-0", 6<<10)
	body, sig := loadgen.Registration("new-0", identity.GenerateKey(), cards["new-0"], n.cfg.Now())
	if st, v := call(t, n, "POST", loadgen.RegisterPath, string(body), identity.SigHeaderName, sig); st != 201 {
		t.Fatalf("register new-0: %d %v", st, v)
	}
	checkCards(t, n, cards)
	n.Close()
	checkCards(t, startNode(t, cfg), cards)
}

// checkCards reads each agent's record and mirrored card from n: the
// mirror has the card's name, description and skills.
func checkCards(t *testing.T, n *Node, cards map[string][]byte) {
	t.Helper()
	for id, card := range cards {
		if st, v := call(t, n, "GET", "/v1/agents/"+id, ""); st != 200 || v["agent_id"] != id {
			t.Fatalf("GET /v1/agents/%s: %d %v", id, st, v)
		}
		var want map[string]any
		json.Unmarshal(card, &want)
		st, got := call(t, n, "GET", "/agent/"+id+"/.well-known/agent.json", "")
		if st != 200 || got["name"] != want["name"] || got["description"] != want["description"] || fmt.Sprint(got["skills"]) != fmt.Sprint(want["skills"]) {
			t.Fatalf("the mirrored card of %s: %d %v", id, st, got)
		}
	}
}

// untar extracts the gzipped tar archive at path into dir.
func untar(t *testing.T, path, dir string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	r := tar.NewReader(z)
	for {
		h, err := r.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		target := filepath.Join(dir, filepath.Clean("/"+h.Name))
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(target, 0o700); err != nil {
				t.Fatal(err)
			}
			continue
		}
		out, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&0o700)
		if err == nil {
			_, err = io.Copy(out, r)
			err = errors.Join(err, out.Close())
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}
