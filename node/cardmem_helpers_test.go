package node

import (
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/mesh/identity"
)

// cardWords draws words of a synthetic vocabulary of 20,000 words, a few
// common and most rare (Zipf), as cards' text is.
type cardWords struct{ zipf *rand.Zipf }

func newCardWords(seed uint64) *cardWords {
	return &cardWords{rand.NewZipf(rand.New(rand.NewPCG(seed, 7)), 1.1, 1, 20_000)}
}

func (w *cardWords) text(n int) string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("w%x", w.zipf.Uint64()*2654435761%1_000_003)
	}
	return strings.Join(out, " ")
}

// bigCard is an A2A card of about size bytes: a name, a description and
// skills with descriptions and tags.
func (w *cardWords) bigCard(id string, size int) []byte {
	card := map[string]any{"name": "Agent " + id, "description": w.text(60), "version": "1.0.0"}
	var skills []map[string]any
	for b, _ := json.Marshal(card); len(b) < size; b, _ = json.Marshal(card) {
		skills = append(skills, map[string]any{"id": fmt.Sprintf("skill-%d", len(skills)), "name": w.text(3),
			"description": w.text(80), "tags": strings.Fields(w.text(3))})
		card["skills"] = skills
	}
	b, _ := json.Marshal(card)
	return b
}

// registerWithCards registers n agents through node, each signed by a key
// of its own and handing over a full card of about size bytes; it returns
// the cards' bytes.
func registerWithCards(t testing.TB, node *Node, prefix string, n, size int) int64 {
	t.Helper()
	words := newCardWords(uint64(len(prefix)))
	var total int64
	for i := range n {
		id := fmt.Sprintf("%s-%05d", prefix, i)
		key := identity.GenerateKey()
		card := words.bigCard(id, size)
		total += int64(len(card))
		body, _ := json.Marshal(map[string]any{"agent_id": id, "capabilities": []string{"summarize"},
			"endpoint": "https://" + id + ".example", "pubkey": identity.EncodePublicKey(key.Public().(ed25519.PublicKey)),
			"full_card": json.RawMessage(card)})
		path := "/v1/agents/register"
		st, v := call(t, node, "POST", path, string(body), identity.SigHeaderName, identity.Sign(key, "POST", path, body, node.cfg.Now()))
		if st != 201 {
			t.Fatalf("register %s: %d %v", id, st, v)
		}
	}
	return total
}

// readAgents reads each of the n agents registered under prefix from
// node: its record and its public card, as clients and pages do.
func readAgents(t testing.TB, node *Node, prefix string, n int) {
	t.Helper()
	for i := range n {
		id := fmt.Sprintf("%s-%05d", prefix, i)
		for _, path := range []string{"/v1/agents/" + id, "/agent/" + id} {
			if st, v := call(t, node, "GET", path, "", "Accept", "application/json"); st != 200 {
				t.Fatalf("GET %s: %d %v", path, st, v)
			}
		}
	}
}

// heapInUse is the heap in use after a collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// peakHeap samples the live heap (in use after a collection) every
// 50 ms until stop is called, which returns the highest reading.
func peakHeap() (stop func() uint64) {
	done := make(chan struct{})
	peak := make(chan uint64)
	go func() {
		var hi uint64
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			hi = max(hi, heapInUse())
			select {
			case <-done:
				peak <- hi
				return
			case <-t.C:
			}
		}
	}()
	return func() uint64 { close(done); return <-peak }
}
