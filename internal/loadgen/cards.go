package loadgen

import (
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/agentmesh/mesh/identity"
)

// Words draws words of a synthetic vocabulary of 20,000 words, a few
// common and most rare (Zipf), as agents' cards use words.
type Words struct {
	zipf  *rand.Zipf
	words []string
}

// vocabulary is the words, spelled once, on first use: not at the start
// of every process that links this package (every mesh command, a node
// too), where its 20,001 strings would lie in the heap for good, to be
// marked at every collection.
var vocabulary = sync.OnceValue(func() []string {
	out := make([]string, 20_001)
	for i := range out {
		out[i] = fmt.Sprintf("w%x", uint64(i)*2654435761%1_000_003)
	}
	return out
})

// NewWords returns the words of seed: the same seed draws the same words.
func NewWords(seed uint64) *Words {
	return &Words{rand.NewZipf(rand.New(rand.NewPCG(seed, 7)), 1.1, 1, uint64(len(vocabulary())-1)), vocabulary()}
}

// Text is n words, separated by spaces.
func (w *Words) Text(n int) string {
	out := make([]string, n)
	for i := range out {
		out[i] = w.words[w.zipf.Uint64()]
	}
	return strings.Join(out, " ")
}

// Card is an A2A card of agent id of about size bytes: a name, a
// description, and skills with descriptions and tags.
func (w *Words) Card(id string, size int) []byte {
	card := map[string]any{"name": "Agent " + id, "description": w.Text(60), "version": "1.0.0"}
	b, _ := json.Marshal(card)
	var skills []map[string]any
	for n := len(b); n < size; {
		skill := map[string]any{"id": fmt.Sprintf("skill-%d", len(skills)), "name": w.Text(3),
			"description": w.Text(80), "tags": strings.Fields(w.Text(3))}
		sb, _ := json.Marshal(skill)
		n += len(sb) + 1
		skills = append(skills, skill)
	}
	if skills != nil {
		card["skills"] = skills
	}
	b, _ = json.Marshal(card)
	return b
}

// RegisterPath is where agents register.
const RegisterPath = "/v1/agents/register"

// Registration is the body and Mesh-Sig header of a registration of agent
// id bound to key, at now, handing over card (none when nil).
func Registration(id string, key ed25519.PrivateKey, card []byte, now time.Time) (body []byte, sig string) {
	req := map[string]any{"agent_id": id, "capabilities": []string{"summarize"},
		"endpoint": "https://" + id + ".example", "pubkey": identity.EncodePublicKey(key.Public().(ed25519.PublicKey))}
	if card != nil {
		req["full_card"] = json.RawMessage(card)
	}
	body, _ = json.Marshal(req)
	return body, identity.Sign(key, "POST", RegisterPath, body, now)
}
