package registryapi

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
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
				e := rowOf(ag)
				for range 2 { // the parts kept are not changed by a read
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

// TestConcurrentReadsEachGetTheirOwnAnswer: reads of agents whose answers
// differ in length (one past the pool's buffer), on every core at once,
// while heartbeats move their presence, each get their own agent's answer
// whole: the pooled buffer a read puts its answer together in is never
// shared with another read (run it with -race).
func TestConcurrentReadsEachGetTheirOwnAnswer(t *testing.T) {
	h := newHarness(t)
	ids := []string{"a", "agent-with-a-longer-id", strings.Repeat("x", maxIDLen), "carded"}
	tokens := map[string]string{}
	for _, id := range ids[:3] {
		_, tokens[id] = h.registerPlain(id)
	}
	skills := make([]map[string]any, 8)
	for i := range skills {
		skills[i] = map[string]any{"id": fmt.Sprint("s", i), "description": strings.Repeat("long words ", 100)}
	}
	r := h.want(h.do("POST", "/v1/agents/register", jsonBody(map[string]any{"agent_id": "carded", "card": map[string]any{"skills": skills}})), 201, "")
	tokens["carded"] = h.token("carded", r.str("api_key"))
	// An answer but its presence: live, online and last_seen change with
	// each heartbeat, the rest is the agent's.
	presence := regexp.MustCompile(`"live":(true|false),"online":(true|false),"last_seen":"[^"]+",`)
	want := map[string]string{}
	for _, id := range ids {
		want[id] = presence.ReplaceAllString(h.do("GET", "/v1/agents/"+id, "").raw, "")
	}
	if len(want["carded"]) <= len(answerBuf{}) {
		t.Fatalf("the carded answer (%d bytes) fits the pool's buffer", len(want["carded"]))
	}
	var wg sync.WaitGroup
	errs := make(chan error, 9)
	wg.Go(func() {
		for i := range 100 {
			h.clock.Advance(time.Second)
			if err := heartbeat(h, tokens[ids[i%len(ids)]]); err != nil {
				errs <- err
				return
			}
		}
	})
	for w := range 8 {
		wg.Go(func() {
			for i := range 200 {
				id := ids[(w+i)%len(ids)]
				got, err := getBody(h, "/v1/agents/"+id)
				if err != nil {
					errs <- err
					return
				}
				if !json.Valid([]byte(got)) || presence.ReplaceAllString(got, "") != want[id] {
					errs <- fmt.Errorf("GET %s answered\n%s\nwant (but its presence)\n%s", id, got, want[id])
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// getBody is the body of a 200 answer to GET path, from any goroutine.
func getBody(h *harness, path string) (string, error) {
	resp, err := h.srv.Client().Get(h.srv.URL + path)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %d %s", path, resp.StatusCode, b)
	}
	return string(b), err
}

// heartbeat sends a heartbeat with token, from any goroutine.
func heartbeat(h *harness, token string) error {
	req, _ := http.NewRequest("POST", h.srv.URL+"/v1/agents/me/heartbeat", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := h.srv.Client().Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("heartbeat: %d %s", resp.StatusCode, b)
	}
	return nil
}
