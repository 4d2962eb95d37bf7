package registryapi

import (
	"crypto/ed25519"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/mesh/identity"
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
	rec, val, err := NewRecord(signedRegister(agent, "a1", "https://a1.example", now.Add(-time.Hour)), dirKey, now)
	if err != nil {
		t.Fatal(err)
	}
	keys := RecordKeys(rec.DID, "a1")
	for _, k := range keys {
		if err := v.Validate(k, val); err != nil {
			t.Fatalf("valid record under %s refused: %v", k, err)
		}
	}
	got, _ := v.Parse(keys[0], val)
	if a := got.Agent(); a.Endpoint != "https://a1.example" || a.DID != rec.DID || a.ID != "a1" {
		t.Fatalf("agent from record: %+v", a)
	}

	mutate := func(f func(r map[string]any)) []byte {
		var m map[string]any
		json.Unmarshal(val, &m)
		f(m)
		b, _ := json.Marshal(m)
		return b
	}
	forgedByRogue, _ := json.Marshal(func() *AgentRecord {
		r, _, _ := NewRecord(signedRegister(rogue, "a1", "https://evil.example", now), dirKey, now)
		r.DID = rec.DID // claims the victim's did
		return r
	}())
	_, untrusted, _ := NewRecord(signedRegister(agent, "a1", "https://a1.example", now), rogue, now)
	_, expired, _ := NewRecord(signedRegister(agent, "a1", "https://a1.example", now), dirKey, now.Add(-RecordTTL-time.Second))
	cases := map[string]struct {
		key string
		val []byte
	}{
		"mutated endpoint": {keys[0], mutate(func(r map[string]any) {
			q := r["request"].(map[string]any)
			q["body"] = strings.Replace(q["body"].(string), "a1.example", "evil.example", 1)
		})},
		"extended expiry":       {keys[0], mutate(func(r map[string]any) { r["expires"] = r["expires"].(float64) + 3600 })},
		"other did":             {keys[0], mutate(func(r map[string]any) { r["did"] = dirDID })},
		"other agent id":        {keys[1], mutate(func(r map[string]any) { r["agent_id"] = "a2" })},
		"signed by another key": {"/" + RecordNS + "/" + rec.DID, forgedByRogue},
		"untrusted directory":   {keys[0], untrusted},
		"expired":               {keys[0], expired},
		"wrong key":             {IDRecordKey("someone-else"), val},
		"garbage":               {keys[0], []byte("{")},
		"oversized":             {keys[0], make([]byte, maxRecordSize+1)},
	}
	for name, c := range cases {
		if err := v.Validate(c.key, c.val); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestRecordSelectHighestSeq(t *testing.T) {
	now := time.Now()
	agent, dirKey := identity.GenerateKey(), identity.GenerateKey()
	dirDID := identity.DIDFromPublicKey(dirKey.Public().(ed25519.PublicKey))
	v := RecordValidator{Trusted: func(did string) bool { return did == dirDID }}
	_, older, _ := NewRecord(signedRegister(agent, "a1", "https://old.example", now.Add(-time.Minute)), dirKey, now)
	_, newer, _ := NewRecord(signedRegister(agent, "a1", "https://new.example", now), dirKey, now.Add(-time.Hour))
	_, later, _ := NewRecord(signedRegister(agent, "a1", "https://old.example", now.Add(-time.Minute)), dirKey, now.Add(time.Minute))
	key := IDRecordKey("a1")
	if i, err := v.Select(key, [][]byte{older, []byte("junk"), newer}); err != nil || i != 2 {
		t.Fatalf("Select = %d, %v; want the newest signature (2)", i, err)
	}
	// Same signature: the later attestation wins.
	if i, _ := v.Select(key, [][]byte{older, later}); i != 1 {
		t.Fatalf("Select = %d, want the later expiry (1)", i)
	}
	if _, err := v.Select(key, [][]byte{[]byte("junk")}); err == nil {
		t.Fatal("Select without a valid record succeeded")
	}
}

func FuzzRecordParse(f *testing.F) {
	now := time.Now()
	agent, dirKey := identity.GenerateKey(), identity.GenerateKey()
	_, val, _ := NewRecord(signedRegister(agent, "a1", "https://a1.example", now), dirKey, now)
	f.Add("/mesh-aid/a1", val)
	f.Add("/mesh-agent/x", []byte(`{"v":1}`))
	dirDID := identity.DIDFromPublicKey(dirKey.Public().(ed25519.PublicKey))
	v := RecordValidator{Trusted: func(did string) bool { return did == dirDID }}
	f.Fuzz(func(t *testing.T, key string, val []byte) {
		r, err := v.Parse(key, val)
		if err != nil {
			return
		}
		if r.Agent().DID != r.DID || (key != IDRecordKey(r.AgentID) && key != "/"+RecordNS+"/"+r.DID) {
			t.Fatalf("accepted an inconsistent record under %q", key)
		}
	})
}
