package registryapi

import (
	"crypto/ed25519"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/agentmesh/mesh/identity"
)

// published decodes what the directory publishes about id, by DHT key:
// "record <seq>" or "tombstone <seq>".
func (h *harness) published(id string, now time.Time) map[string]string {
	h.t.Helper()
	dirKey := identity.GenerateKey()
	dirDID := identity.DIDFromPublicKey(dirKey.Public().(ed25519.PublicKey))
	v := RecordValidator{Trusted: func(did string) bool { return did == dirDID }, Now: func() time.Time { return now }}
	pubs, err := h.dir.Publications(id, dirKey, now)
	if err != nil {
		h.t.Fatal(err)
	}
	out := map[string]string{}
	for _, p := range pubs {
		r, err := v.Parse(p.Key, p.Value)
		if err != nil {
			h.t.Fatalf("published an invalid value under %s: %v", p.Key, err)
		}
		kind := "record"
		if r.Deleted {
			kind = "tombstone"
		}
		out[p.Key] = fmt.Sprintf("%s %d", kind, r.Seq)
	}
	return out
}

func didOf(key ed25519.PrivateKey) string {
	return identity.DIDFromPublicKey(key.Public().(ed25519.PublicKey))
}

func TestPublications(t *testing.T) {
	h := newHarness(t)
	k1, k2, k3 := identity.GenerateKey(), identity.GenerateKey(), identity.GenerateKey()
	want := func(id string, w map[string]string) {
		t.Helper()
		if got := h.published(id, h.clock.Now()); !maps.Equal(got, w) {
			t.Fatalf("published about %s:\n got %v\nwant %v", id, got, w)
		}
	}

	_, tok := h.registerKeyed("a1", k1) // seq 1
	want("a1", map[string]string{DIDRecordKey(didOf(k1)): "record 1", IDRecordKey("a1"): "record 1"})

	// The owner moves to another key: the first key's record is stale.
	body := jsonBody(map[string]any{"agent_id": "a1", "capabilities": []string{"echo"}, "pubkey": identity.EncodePublicKey(k2.Public().(ed25519.PublicKey))})
	h.want(h.signed(k2, "POST", "/v1/agents/register", body, bearer(tok)...), 200, "") // seq 2
	want("a1", map[string]string{
		DIDRecordKey(didOf(k1)): "tombstone 2",
		DIDRecordKey(didOf(k2)): "record 2", IDRecordKey("a1"): "record 2",
	})

	// Deleted: tombstones under every key that held one of its records.
	h.want(h.do("DELETE", "/v1/agents/me", "", bearer(tok)...), 200, "") // seq 3
	want("a1", map[string]string{
		DIDRecordKey(didOf(k1)): "tombstone 2",
		DIDRecordKey(didOf(k2)): "tombstone 3", IDRecordKey("a1"): "tombstone 3",
	})

	// Registered again by another key: its record replaces the id's
	// tombstone; the former keys keep theirs.
	h.registerKeyed("a1", k3) // seq 4
	want("a1", map[string]string{
		DIDRecordKey(didOf(k1)): "tombstone 2", DIDRecordKey(didOf(k2)): "tombstone 3",
		DIDRecordKey(didOf(k3)): "record 4", IDRecordKey("a1"): "record 4",
	})

	// A deleted agent whose key comes back under another id: that id's
	// record covers the key.
	_, tok = h.registerKeyed("b1", k1)                                   // seq 5
	h.want(h.do("DELETE", "/v1/agents/me", "", bearer(tok)...), 200, "") // seq 6
	h.registerKeyed("b2", k1)                                            // seq 7
	want("b1", map[string]string{IDRecordKey("b1"): "tombstone 6"})
	want("a1", map[string]string{
		DIDRecordKey(didOf(k2)): "tombstone 3", DIDRecordKey(didOf(k3)): "record 4", IDRecordKey("a1"): "record 4",
	})

	// An agent without a key has nothing in the DHT, and tombstones end
	// once every record they cover has expired.
	h.registerPlain("plain")
	want("plain", map[string]string{})
	if got := h.published("b1", h.clock.Now().Add(RecordTTL)); len(got) != 0 {
		t.Fatalf("tombstones after RecordTTL: %v", got)
	}
}

func TestPublishedIDsPages(t *testing.T) {
	h := newHarness(t)
	var want []string
	for i := range 7 {
		id := fmt.Sprintf("k%d", i)
		_, tok := h.registerKeyed(id, identity.GenerateKey())
		if i%3 == 0 { // deleted: only a tombstone is left
			h.want(h.do("DELETE", "/v1/agents/me", "", bearer(tok)...), 200, "")
		}
		want = append(want, id)
		h.registerPlain(fmt.Sprintf("p%d", i)) // nothing to publish
	}
	h.registerKeyed("k1.x", identity.GenerateKey()) // sorts between k1 and k2
	want = append(want, "k1.x")
	slices.Sort(want)
	var got []string
	for after := ""; ; {
		page, err := h.dir.PublishedIDs(after, 3)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		got = append(got, page...)
		after = page[len(page)-1]
	}
	if !slices.Equal(got, want) {
		t.Fatalf("paged ids %v, want %v", got, want)
	}
}
