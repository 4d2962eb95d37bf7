package registryapi

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/loadgen"
)

// signedRegister returns a register request signed by key, as a client sends it.
func signedRegister(key ed25519.PrivateKey, id, endpoint string, at time.Time) Signed {
	body := jsonBody(map[string]any{"agent_id": id, "capabilities": []string{"echo"}, "endpoint": endpoint,
		"pubkey": identity.EncodePublicKey(key.Public().(ed25519.PublicKey))})
	return Signed{Method: "POST", Path: "/v1/agents/register", Body: body,
		MeshSig: identity.Sign(key, "POST", "/v1/agents/register", []byte(body), at)}
}

func TestRecordValidator(t *testing.T) {
	now := time.Now()
	agent, dirKey, rogue := identity.GenerateKey(), identity.GenerateKey(), identity.GenerateKey()
	dirDID := identity.DIDFromPublicKey(dirKey.Public().(ed25519.PublicKey))
	v := RecordValidator{Trusted: func(did string) bool { return did == dirDID }, Now: func() time.Time { return now }}
	rec, val, err := NewRecord(signedRegister(agent, "a1", "https://a1.example", now.Add(-time.Hour)), 7, dirKey, now)
	if err != nil {
		t.Fatal(err)
	}
	_, tomb, err := NewTombstone(rec.DID, "a1", 9, dirKey, now)
	if err != nil {
		t.Fatal(err)
	}
	keys := RecordKeys(rec.DID, "a1")
	for _, k := range keys {
		for _, val := range [][]byte{val, tomb} {
			if err := v.Validate(k, val); err != nil {
				t.Fatalf("valid record under %s refused: %v (%s)", k, err, val)
			}
		}
	}
	got, _ := v.Parse(keys[0], val)
	if a, err := got.Agent(); err != nil || a.Endpoint != "https://a1.example" || a.DID != rec.DID || a.ID != "a1" || got.Seq != 7 {
		t.Fatalf("agent from record: %+v %v", a, err)
	}
	gotTomb, _ := v.Parse(keys[1], tomb)
	if _, err := gotTomb.Agent(); !errors.Is(err, ErrAgentNotFound) {
		t.Fatalf("a tombstone's agent: %v, want not found", err)
	}

	mutate := func(val []byte, f func(r map[string]any)) []byte {
		var m map[string]any
		json.Unmarshal(val, &m)
		f(m)
		b, _ := json.Marshal(m)
		return b
	}
	forgedByRogue, _ := json.Marshal(func() *AgentRecord {
		r, _, _ := NewRecord(signedRegister(rogue, "a1", "https://evil.example", now), 8, dirKey, now)
		r.DID = rec.DID // claims the victim's did
		return r
	}())
	_, untrusted, _ := NewRecord(signedRegister(agent, "a1", "https://a1.example", now), 7, rogue, now)
	_, untrustedTomb, _ := NewTombstone(rec.DID, "a1", 9, rogue, now)
	_, expired, _ := NewRecord(signedRegister(agent, "a1", "https://a1.example", now), 7, dirKey, now.Add(-RecordTTL-time.Second))
	_, noSeq, _ := NewRecord(signedRegister(agent, "a1", "https://a1.example", now), 0, dirKey, now)
	cases := map[string]struct {
		key string
		val []byte
	}{
		"mutated endpoint": {keys[0], mutate(val, func(r map[string]any) {
			q := r["request"].(map[string]any)
			q["body"] = strings.Replace(q["body"].(string), "a1.example", "evil.example", 1)
		})},
		"raised seq":            {keys[0], mutate(val, func(r map[string]any) { r["seq"] = 1e6 })},
		"extended expiry":       {keys[0], mutate(val, func(r map[string]any) { r["expires"] = r["expires"].(float64) + 3600 })},
		"other did":             {keys[0], mutate(val, func(r map[string]any) { r["did"] = dirDID })},
		"other agent id":        {keys[1], mutate(val, func(r map[string]any) { r["agent_id"] = "a2" })},
		"marked deleted":        {keys[0], mutate(val, func(r map[string]any) { r["deleted"] = true })},
		"old version":           {keys[0], mutate(val, func(r map[string]any) { r["v"] = 1 })},
		"signed by another key": {DIDRecordKey(rec.DID), forgedByRogue},
		"untrusted directory":   {keys[0], untrusted},
		"expired":               {keys[0], expired},
		"no seq":                {keys[0], noSeq},
		"wrong key":             {IDRecordKey("someone-else"), val},
		"garbage":               {keys[0], []byte("{")},
		"oversized":             {keys[0], make([]byte, maxRecordSize+1)},
		"tombstone raised seq":  {keys[1], mutate(tomb, func(r map[string]any) { r["seq"] = 1e6 })},
		"tombstone other id":    {IDRecordKey("a2"), mutate(tomb, func(r map[string]any) { r["agent_id"] = "a2" })},
		"tombstone undeleted":   {keys[1], mutate(tomb, func(r map[string]any) { delete(r, "deleted") })},
		"tombstone with request": {keys[1], mutate(tomb, func(r map[string]any) {
			var m map[string]any
			json.Unmarshal(val, &m)
			r["request"] = m["request"]
		})},
		"tombstone bad did":       {IDRecordKey("a1"), mutate(tomb, func(r map[string]any) { r["did"] = "did:key:zjunk" })},
		"tombstone untrusted":     {keys[1], untrustedTomb},
		"tombstone by the victim": {keys[1], mutate(tomb, func(r map[string]any) { r["directory"] = rec.DID })},
	}
	// A validator that remembers verified values refuses them alike, after
	// it has verified the genuine ones.
	cached := NewRecordValidator(v.Trusted)
	cached.Now = v.Now
	for _, k := range keys {
		for _, val := range [][]byte{val, tomb} {
			if err := cached.Validate(k, val); err != nil {
				t.Fatalf("cached: valid record refused: %v", err)
			}
		}
	}
	for name, c := range cases {
		if err := v.Validate(c.key, c.val); err == nil {
			t.Errorf("%s: accepted", name)
		}
		if err := cached.Validate(c.key, c.val); err == nil {
			t.Errorf("%s: accepted by the caching validator", name)
		}
	}
}

func TestVerifiedValuesBounded(t *testing.T) {
	v := newVerifiedValues(2)
	v.add([]byte("a"))
	v.add([]byte("b"))
	v.add([]byte("c")) // a and b move to the older generation
	if !v.has([]byte("a")) || v.has([]byte("x")) {
		t.Fatal("lookup in the older generation")
	}
	v.add([]byte("d")) // c and a (used again) are current; b is dropped
	v.add([]byte("e"))
	if v.has([]byte("b")) || !v.has([]byte("d")) || len(v.cur)+len(v.prev) > 4 {
		t.Fatalf("not bounded: cur %d prev %d", len(v.cur), len(v.prev))
	}
}

// TestCheckingAVerifiedRecordAgainDecodesNoCard: the DHT checks a record
// four times as the directory puts it (kad-dht and its store, under each
// key); once verified, a check reads the record's head, not the request
// and card it carries (some eight times the card's bytes of garbage each
// before).
func TestCheckingAVerifiedRecordAgainDecodesNoCard(t *testing.T) {
	now := time.Now()
	agent, dirKey := identity.GenerateKey(), identity.GenerateKey()
	dirDID := identity.DIDFromPublicKey(dirKey.Public().(ed25519.PublicKey))
	body, sig := loadgen.Registration("a1", agent, loadgen.NewWords(1).Card("a1", 30000), now)
	rec, val, err := NewRecord(Signed{Method: "POST", Path: loadgen.RegisterPath, Body: string(body), MeshSig: sig}, 7, dirKey, now)
	if err != nil {
		t.Fatal(err)
	}
	v := NewRecordValidator(func(did string) bool { return did == dirDID })
	keys := RecordKeys(rec.DID, "a1")
	if err := v.Validate(keys[0], val); err != nil {
		t.Fatal(err)
	}
	const checks = 20
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range checks {
		if err := v.Validate(keys[i%2], val); err != nil {
			t.Fatal(err)
		}
		if i, err := v.Select(keys[i%2], [][]byte{val}); err != nil || i != 0 {
			t.Fatalf("select: %d %v", i, err)
		}
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / (2 * checks); per > uint64(len(val)/16) {
		t.Fatalf("%d bytes allocated a check of a verified record of %d bytes", per, len(val))
	}
	if err := v.Validate(keys[0], val[:len(val)-1]); err == nil {
		t.Fatal("a truncated record accepted")
	}
}

func TestRecordSelect(t *testing.T) {
	now := time.Now()
	agent, other, dirKey := identity.GenerateKey(), identity.GenerateKey(), identity.GenerateKey()
	dirDID := identity.DIDFromPublicKey(dirKey.Public().(ed25519.PublicKey))
	v := RecordValidator{Trusted: func(did string) bool { return did == dirDID }}
	did := identity.DIDFromPublicKey(agent.Public().(ed25519.PublicKey))
	// The agent signs at some time; the directory's seq orders records,
	// whatever the agents' clocks said.
	_, older, _ := NewRecord(signedRegister(agent, "a1", "https://old.example", now.Add(time.Hour)), 3, dirKey, now)
	_, newer, _ := NewRecord(signedRegister(agent, "a1", "https://new.example", now), 5, dirKey, now.Add(-time.Hour))
	_, later, _ := NewRecord(signedRegister(agent, "a1", "https://old.example", now.Add(time.Hour)), 3, dirKey, now.Add(time.Minute))
	_, deleted, _ := NewTombstone(did, "a1", 6, dirKey, now)
	_, deletedAtSame, _ := NewTombstone(did, "a1", 5, dirKey, now.Add(-2*time.Hour))
	_, reRegistered, _ := NewRecord(signedRegister(other, "a1", "https://other.example", now.Add(-time.Hour)), 8, dirKey, now)
	key := IDRecordKey("a1")
	cases := []struct {
		name   string
		values [][]byte
		want   int
	}{
		{"highest seq, not the latest signature", [][]byte{older, []byte("junk"), newer}, 2},
		{"same seq: the later attestation", [][]byte{older, later}, 1},
		{"a tombstone beats the records before it", [][]byte{newer, deleted, older}, 1},
		{"at equal seq the tombstone", [][]byte{newer, deletedAtSame}, 1},
		{"a registration after the deletion beats it", [][]byte{deleted, reRegistered, newer}, 1},
	}
	for _, c := range cases {
		if i, err := v.Select(key, c.values); err != nil || i != c.want {
			t.Errorf("%s: Select = %d, %v; want %d", c.name, i, err, c.want)
		}
	}
	if _, err := v.Select(key, [][]byte{[]byte("junk")}); err == nil {
		t.Fatal("Select without a valid record succeeded")
	}
}

func FuzzRecordParse(f *testing.F) {
	now := time.Now()
	agent, dirKey := identity.GenerateKey(), identity.GenerateKey()
	_, val, _ := NewRecord(signedRegister(agent, "a1", "https://a1.example", now), 4, dirKey, now)
	_, tomb, _ := NewTombstone(identity.DIDFromPublicKey(agent.Public().(ed25519.PublicKey)), "a1", 5, dirKey, now)
	f.Add("/mesh-aid/a1", val)
	f.Add("/mesh-aid/a1", tomb)
	f.Add("/mesh-agent/x", []byte(`{"v":1}`))
	dirDID := identity.DIDFromPublicKey(dirKey.Public().(ed25519.PublicKey))
	v := RecordValidator{Trusted: func(did string) bool { return did == dirDID }}
	f.Fuzz(func(t *testing.T, key string, val []byte) {
		r, err := v.Parse(key, val)
		if err != nil {
			return
		}
		if key != IDRecordKey(r.AgentID) && key != DIDRecordKey(r.DID) {
			t.Fatalf("accepted a record under %q, which it does not name", key)
		}
		if a, err := r.Agent(); err == nil && a.DID != r.DID || err != nil && !r.Deleted {
			t.Fatalf("accepted an inconsistent record under %q", key)
		}
	})
}
