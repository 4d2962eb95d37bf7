package node

import (
	"slices"
	"testing"
)

// TestWallAcrossNodes: clients on different nodes of one mesh see each
// other online, broadcast and message each other directly, and acks count
// the sockets that received each frame.
func TestWallAcrossNodes(t *testing.T) {
	m := newMesh(t)
	b, c := m.join(), m.join()
	cl := createCluster(t, b, `{"name":"Night Market","visibility":"public","topic":"#food"}`)
	id := cl["cluster_id"].(string)
	if cl["slug"] != "night-market" || cl["protocol"] != "mesh-wall/1" {
		t.Fatalf("create: %v", cl)
	}

	alice := dialWall(t, b, id, q("agent", "alice"))
	if w := alice.next("welcome"); w["you"] != "alice" || w["public"] != true || len(w["online"].([]any)) != 1 {
		t.Fatalf("alice's welcome: %v", w)
	}
	bob := dialWall(t, c, id, q("agent", "bob", "did", "did:key:z6MkBob"))
	w := bob.next("welcome")
	online := w["online"].([]any)
	if !slices.Contains(online, any("alice")) || !slices.Contains(online, any("bob")) {
		t.Fatalf("bob's welcome does not list alice on the other node: %v", w)
	}
	if p := alice.next("presence"); p["agent"] != "bob" || p["status"] != "online" || p["did"] != "did:key:z6MkBob" {
		t.Fatalf("alice saw %v", p)
	}

	alice.send("hello from b")
	if f := bob.next("message"); f["from"] != "alice" || f["payload"] != "hello from b" || f["to"] != nil {
		t.Fatalf("bob got %v", f)
	}
	if a := alice.next("ack"); a["delivered"] != 1.0 || a["to"] != nil {
		t.Fatalf("alice's ack: %v", a)
	}

	bob.send(map[string]any{"to": "alice", "payload": map[string]any{"text": "psst"}})
	if f := alice.next("message"); f["to"] != "alice" || f["from"] != "bob" {
		t.Fatalf("alice got %v", f)
	}
	if a := bob.next("ack"); a["delivered"] != 1.0 || a["to"] != "alice" {
		t.Fatalf("bob's ack: %v", a)
	}
	bob.send(map[string]any{"to": "nobody", "payload": "anyone?"})
	if a := bob.next("ack"); a["delivered"] != 0.0 {
		t.Fatalf("ack to an absent handle: %v", a)
	}
	alice.quiet(300 * 1e6)
}
