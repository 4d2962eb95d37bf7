package registryapi

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/cmdlog"
	"github.com/agentmesh/mesh/internal/storetest"
)

// spacedCard is a full card as an agent may send it: not compacted.
const spacedCard = `{ "name": "Once Only", "description": "a card the log carries once",
	"skills": [ { "id": "s1", "name": "Skill One", "tags": ["once"] } ] }`

// registerCard registers id, signed by a key of its own, handing
// spacedCard over; it returns the key, the body signed and the answer.
func registerCard(h *harness, id string) (ed25519.PrivateKey, string, reply) {
	key := identity.GenerateKey()
	body := fmt.Sprintf(`{"agent_id":%q,"capabilities":["echo"],"endpoint":"https://%s.example","pubkey":%q,"full_card":%s}`,
		id, id, identity.EncodePublicKey(key.Public().(ed25519.PublicKey)), spacedCard)
	return key, body, h.want(h.signed(key, "POST", "/v1/agents/register", body), 201, "")
}

// entryOf is log entry seq of h, decoded: its registration as logged.
func entryOf(t *testing.T, h *harness, seq uint64) (cmdlog.Entry, map[string]json.RawMessage) {
	t.Helper()
	raws, err := h.log.Changes(seq-1, 1, 1<<20)
	if err != nil || len(raws) != 1 {
		t.Fatalf("entry %d: %d, %v", seq, len(raws), err)
	}
	var e cmdlog.Entry
	var cmd struct {
		Register map[string]json.RawMessage `json:"register"`
	}
	if err := json.Unmarshal(raws[0], &e); err != nil || json.Unmarshal(e.Op, &cmd) != nil || cmd.Register == nil {
		t.Fatalf("entry %d: %s", seq, raws[0])
	}
	return e, cmd.Register
}

// TestSignedCardLoggedOnce: the log entry of a signed registration that
// hands a full card over carries the card once, in the request as its
// agent signed it (card_signed, no full_card of its own), and the row
// serves the card compacted, as the mirrored card does; a
// registration without a Mesh-Sig carries its card itself. An entry
// logged by the release before, the card twice, applies the same.
func TestSignedCardLoggedOnce(t *testing.T) {
	h := newHarness(t)
	registerCard(h, "once")
	e, reg := entryOf(t, h, h.seq())
	if reg["full_card"] != nil || string(reg["card_signed"]) != "true" || !strings.Contains(string(reg["signed"]), "Once Only") {
		t.Fatalf("the signed registration's entry: %s", e.Op)
	}
	var compact bytes.Buffer
	json.Compact(&compact, []byte(spacedCard))
	row, err := h.dir.Lookup("once")
	if err != nil || !bytes.Equal(row.FullCard, compact.Bytes()) || row.CardFrom != cardFromRegistration {
		t.Fatalf("the row's card: %s (%s), %v", row.FullCard, row.CardFrom, err)
	}
	if r := h.want(h.do("GET", "/agent/once/.well-known/agent.json", ""), 200, ""); r.str("name") != "Once Only" {
		t.Fatalf("the mirrored card: %s", r.raw)
	}

	h.want(h.do("POST", "/v1/agents/register", `{"agent_id":"plain","capabilities":[],"full_card":`+spacedCard+`}`), 201, "")
	if _, reg := entryOf(t, h, h.seq()); !bytes.Equal(reg["full_card"], compact.Bytes()) || reg["card_signed"] != nil {
		t.Fatalf("the unsigned registration's entry: %v", reg)
	}

	// The release before logged the card in the request and again.
	var old map[string]json.RawMessage
	json.Unmarshal(e.Op, &old)
	var oldReg map[string]json.RawMessage
	json.Unmarshal(old["register"], &oldReg)
	delete(oldReg, "card_signed")
	oldReg["full_card"] = compact.Bytes()
	old["register"], _ = json.Marshal(oldReg)
	e.Op, _ = json.Marshal(old)
	replica := newHarnessOn(t, storetest.DB(t))
	if _, err := replica.log.Commit(&e); err != nil {
		t.Fatalf("the entry of the release before: %v", err)
	}
	if row, err := replica.dir.Lookup("once"); err != nil || !bytes.Equal(row.FullCard, compact.Bytes()) || row.RecordSeq != 1 {
		t.Fatalf("the row of the release before's entry: %+v, %v", row, err)
	}
}

// TestSignedCardAppliesWhateverItsRules: an entry with card_signed applies
// the card its signed request carries, compacted, whatever the rules of a
// card are when it is applied: a replica, or a node replaying its log
// after an upgrade, keeps the card the directory admitted, though today's
// rules (here a skill without an id) would refuse it.
func TestSignedCardAppliesWhateverItsRules(t *testing.T) {
	h := newHarness(t)
	key := identity.GenerateKey()
	body := fmt.Sprintf(`{"agent_id":"rules","capabilities":[],"pubkey":%q,"full_card":%s}`,
		identity.EncodePublicKey(key.Public().(ed25519.PublicKey)), spacedCard)
	h.want(h.signed(key, "POST", "/v1/agents/register", body), 201, "")
	e, _ := entryOf(t, h, h.seq())
	const admittedOnce = `{ "name": "Older Rules", "skills": [ { "name": "no id" } ] }`
	var cmd map[string]map[string]json.RawMessage
	if err := json.Unmarshal(e.Op, &cmd); err != nil {
		t.Fatal(err)
	}
	var signed Signed
	json.Unmarshal(cmd["register"]["signed"], &signed)
	signed.Body = strings.Replace(signed.Body, spacedCard, admittedOnce, 1)
	cmd["register"]["signed"], _ = json.Marshal(signed)
	e.Op, _ = json.Marshal(cmd)
	replica := newHarnessOn(t, storetest.DB(t))
	if _, err := replica.log.Commit(&e); err != nil {
		t.Fatal(err)
	}
	var compact bytes.Buffer
	json.Compact(&compact, []byte(admittedOnce))
	if row, err := replica.dir.Lookup("rules"); err != nil || !bytes.Equal(row.FullCard, compact.Bytes()) {
		t.Fatalf("the row's card: %s, %v", row.FullCard, err)
	}
}
