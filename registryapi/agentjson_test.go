package registryapi

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/agentmesh/mesh/internal/httpx"
)

// TestAgentViewSplicedAsEncoded: the answer put together from a row's
// parts is, byte for byte, the agentView WriteJSON encodes, for rows with
// and without their optional fields, with and without reports, and
// whatever their text holds.
func TestAgentViewSplicedAsEncoded(t *testing.T) {
	at := time.Date(2026, 11, 28, 3, 4, 5, 6, time.UTC)
	score := 0.75
	rows := []*Agent{
		{ID: "bare", Reg: 1, Capabilities: []string{}, RegisteredAt: at, UpdatedAt: at, LastSeen: at},
		{ID: "full-1", Reg: 9, Capabilities: []string{"echo", "<b>&"}, Endpoint: "https://user:pw@a.example/x?<y>",
			Pubkey: "cHVi", DID: "did:key:z6Mk", RegisteredAt: at, UpdatedAt: at.Add(time.Hour), LastSeen: at.Add(time.Hour),
			Card: &DiscoveryCard{Name: `Say "hi" <script>`, Description: "línea\u2028", Tags: []string{"t"}}},
		{ID: `né"\`, Reg: 3, Capabilities: []string{}, RegisteredAt: at, UpdatedAt: at, LastSeen: at}, // no valid id, yet encoded alike
	}
	rolls := []Rollup{{}, {N: 2, Score: &score, Weighted: Weighted{N: 2, Paid: 1, Weight: 1.5, Score: &score}}}
	for _, ag := range rows {
		for _, roll := range rolls {
			for _, online := range []bool{false, true} {
				base, seen := "http://h.example:7777", at.Add(-time.Minute)
				if online {
					base, seen = `http://h"é\.example`, ag.LastSeen // escaped as the encoder does; no heartbeat
				}
				handle := base + "/agent/" + ag.ID
				want := httptest.NewRecorder()
				httpx.WriteJSON(want, 200, agentView{viewHead: headOf(ag), Handle: handle, Registered: true, Live: online,
					Online: online, LastSeen: seen, viewTail: tailOf(ag), Reputation: specOf(roll), WeightedReputation: roll.Weighted})
				e := &cachedAgent{a: ag}
				for range 2 { // encoding the parts, then from the kept parts
					got := httptest.NewRecorder()
					writeAgentView(got, partsOf(e), base, online, seen, roll)
					if got.Body.String() != want.Body.String() || got.Header().Get("Content-Type") != "application/json" {
						t.Fatalf("%s, %d reports, online %v:\n%s\nwant\n%s", ag.ID, roll.N, online, got.Body, want.Body)
					}
				}
			}
		}
	}
}
