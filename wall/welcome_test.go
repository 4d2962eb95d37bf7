package wall

import (
	"fmt"
	"strings"
	"testing"
)

// TestWelcomeOfALargeRoomFitsAFrame: in a room of 1,000 members with
// 64-byte handles, a newcomer's welcome is at most
// MaxFrame bytes, says how many handles it left out, and those follow it
// at once as presence frames (online, with their did): welcome and
// presence together name everyone online.
func TestWelcomeOfALargeRoomFitsAFrame(t *testing.T) {
	h := newHarness(t, nil)
	id := h.create(`{"visibility":"public"}`)["cluster_id"].(string)
	h.dial(id, vals("agent", "alice")).listen().next(KindWelcome)
	const n = 1000
	room := h.svc.room(id)
	room.mu.Lock()
	for i := range n { // members as a roster from another node would make them
		m := member{Agent: fmt.Sprintf("%s-%04d", strings.Repeat("h", maxHandleLen-5), i), Vis: VisPublic}
		if i%2 == 0 {
			m.DID = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK"
		}
		room.local[m.Agent] = &localMember{n: 1, m: m}
	}
	room.mu.Unlock()

	c := h.dial(id, vals("agent", "bob")).listen()
	w := c.next(KindWelcome)
	if size := w["_bytes"].(int); size > MaxFrame {
		t.Fatalf("the welcome is %d bytes, over %d", size, MaxFrame)
	}
	online := map[string]bool{}
	for _, h := range toStrings(w["online"]) {
		online[h] = true
	}
	more, _ := w["more"].(float64)
	if len(online)+int(more) != n+2 || more == 0 {
		t.Fatalf("the welcome lists %d handles and %v more; %d are online", len(online), w["more"], n+2)
	}
	for range int(more) {
		f := <-c.frames
		agent, _ := f["agent"].(string)
		if f["kind"] != KindPresence || f["status"] != "online" || online[agent] {
			t.Fatalf("after the welcome: %v", f)
		}
		if wantDID := agent[len(agent)-1]%2 == 0; (f["did"] != nil) != wantDID {
			t.Fatalf("presence of %s: did %v", agent, f["did"])
		}
		online[agent] = true
	}
	if !online["alice"] || !online["bob"] || len(online) != n+2 {
		t.Fatalf("welcome and presence named %d handles", len(online))
	}
}
