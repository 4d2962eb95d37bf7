package node

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/agentmesh/mesh/internal/cmdlog"
	"github.com/agentmesh/mesh/internal/testkit"
	"github.com/agentmesh/mesh/wall"
)

// patchCluster sends PATCH /v1/clusters/<id> with the admin token through n.
func patchCluster(t *testing.T, n *Node, id, admin, body string) map[string]any {
	t.Helper()
	st, v := call(t, n, "PATCH", "/v1/clusters/"+id, body, "X-Cluster-Token", admin)
	if st != 200 {
		t.Fatalf("PATCH %s through %s: %d %v", body, n.URL(), st, v)
	}
	return v
}

// closedBy waits until c is sent a cluster_updated frame of visibility vis
// and a closed frame, and the socket closes; it returns when the closed
// frame came.
func closedBy(t *testing.T, c *wsClient, vis string) time.Time {
	t.Helper()
	if f := c.next(wall.KindClusterUpdated); f["visibility"] != vis || !slices.Contains(f["changed"].([]any), any("visibility")) {
		t.Fatalf("cluster_updated frame: %v", f)
	}
	f := c.next("closed")
	if f["reason"] == "" {
		t.Fatalf("closed frame without a reason: %v", f)
	}
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the socket stayed open after its closed frame")
	}
	return f["_at"].(time.Time)
}

// TestClusterUpdateAcrossNodes: on a mesh of three nodes, a rename keeps
// the old slug leading to the cluster on every node; turning the cluster
// private closes every token-less socket (members and spectators) on
// every node with a closed frame naming the change, after which
// connections need the new token; turning it public again lists it on
// every node, token-less sockets join, and the token stays the owner's; a
// replayed patch is refused.
func TestClusterUpdateAcrossNodes(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	b, c := m.join(), m.join()
	nodes := []*Node{m.boot, b, c}
	cl := createCluster(t, b, `{"name":"Night Market","visibility":"public","topic":"#food"}`)
	id, admin, oldToken := cl["cluster_id"].(string), cl["admin_token"].(string), cl["token"].(string)

	// A member on every node hears of a rename.
	var members []*wsClient
	for i, n := range nodes {
		members = append(members, enterWall(t, n, id, q("agent", "m"+string(rune('0'+i)))))
	}
	v := patchCluster(t, c, id, admin, `{"name":"Day Market"}`)
	if v["slug"] != "day-market" || v["name"] != "Day Market" || v["redirect"].(map[string]any)["from"] != "night-market" || v["token"] != nil {
		t.Fatalf("rename: %v", v)
	}
	for _, s := range members {
		if f := s.next(wall.KindClusterUpdated); f["name"] != "Day Market" || f["slug"] != "day-market" || f["visibility"] != "public" {
			t.Fatalf("rename frame: %v", f)
		}
	}
	for _, n := range nodes {
		m.waitCaughtUp(n)
		if st, v := call(t, n, "GET", "/v1/clusters/night-market", ""); st != 200 || v["cluster"].(map[string]any)["id"] != id ||
			v["cluster"].(map[string]any)["slug"] != "day-market" {
			t.Fatalf("the old slug on %s: %d %v", n.URL(), st, v)
		}
		resp, err := noRedirects.Get(n.URL() + "/clusters/night-market")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "/clusters/day-market" {
			t.Fatalf("the old slug's page on %s: %d %q", n.URL(), resp.StatusCode, resp.Header.Get("Location"))
		}
	}
	// The old slug is not given to another cluster meanwhile.
	if other := createCluster(t, m.boot, `{"name":"Night Market","visibility":"public"}`); other["slug"] != "night-market-2" {
		t.Fatalf("a held slug was given away: %v", other)
	}

	// Public → private: every token-less socket closes, on every node.
	spectator := enterWall(t, c, id, q("spectate", "1"))
	owner := enterWall(t, m.boot, id, q("agent", "owner", "token", oldToken))
	sockets := append(slices.Clone(members), spectator, owner)
	sent := time.Now()
	v = patchCluster(t, b, id, admin, `{"visibility":"private"}`)
	answered := time.Since(sent)
	token, _ := v["token"].(string)
	if v["visibility"] != "private" || v["slug"] != nil || len(token) < 10 || token == oldToken || v["note"] == nil || v["name"] != "Day Market" {
		t.Fatalf("made private: %v", v)
	}
	var last time.Duration
	for _, s := range sockets {
		last = max(last, closedBy(t, s, "private").Sub(sent))
	}
	t.Logf("public → private: answered in %s; the last of %d sockets on 3 nodes got its closed frame %s after the request", answered, len(sockets), last)
	for _, n := range nodes {
		m.waitCaughtUp(n)
		for _, query := range []url.Values{q("agent", "x"), q("spectate", "1"), q("agent", "x", "token", oldToken)} {
			_, resp, err := tryDialWall(t, n, id, query)
			if err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("connect %v to a cluster made private on %s: %v %v", query, n.URL(), err, resp)
			}
		}
		if st, _ := call(t, n, "GET", "/v1/clusters/day-market", ""); st != 404 {
			t.Fatalf("a private cluster by its slug on %s: %d", n.URL(), st)
		}
		if listed(t, n, id) {
			t.Fatalf("a private cluster listed on %s", n.URL())
		}
	}
	// With the new token, members on two nodes talk.
	x := enterWall(t, b, id, q("agent", "x", "token", token))
	y := enterWall(t, c, id, q("agent", "y", "token", token))
	x.say("sealed from now on", y, 1)

	// Private → public: listed on every node, token-less members join,
	// and the token stays the owner's.
	v = patchCluster(t, c, id, admin, `{"visibility":"public"}`)
	if v["visibility"] != "public" || v["slug"] != "day-market" || v["token"] != nil || v["note"] == nil {
		t.Fatalf("made public: %v", v)
	}
	for _, s := range []*wsClient{x, y} {
		closedBy(t, s, "public")
	}
	for _, n := range nodes {
		testkit.Eventually(t, 5*time.Second, func() bool { return listed(t, n, id) }, "the cluster made public is not listed on %s", n.URL())
		enterWall(t, n, id, q("agent", "z"))
		if st, v := call(t, n, "GET", "/v1/clusters/"+id+"/history", "", "X-Cluster-Token", token); st != 200 {
			t.Fatalf("history with the token on %s: %d %v", n.URL(), st, v)
		}
	}

	// The owner's history holds both periods, the sockets a change closed
	// leaving included: the public one in the open, the private one
	// opened with the token it was sealed with.
	testkit.Eventually(t, 10*time.Second, func() bool {
		_, v := call(t, c, "GET", "/v1/clusters/"+id+"/history?limit=1000", "", "X-Cluster-Token", token)
		seen := map[string]bool{}
		for _, e := range v["events"].([]any) {
			seen[e.(map[string]any)["agent"].(string)+" "+e.(map[string]any)["event"].(string)] = true
		}
		return seen["m0 leave"] && seen["x join"] && seen["x leave"] && seen["z join"]
	}, "the history misses events of a period")

	// Replays of the patches are refused, whichever node proposes them.
	for _, op := range clusterPatches(t, m.boot) {
		_, err := b.proposer.Propose(context.Background(), wall.Kind, m.clock.Now().UnixNano(), op)
		if !errors.Is(err, wall.ErrStale) {
			t.Fatalf("a replayed patch: %v", err)
		}
	}
}

// listed reports whether cluster id is in n's public catalog.
func listed(t *testing.T, n *Node, id string) bool {
	t.Helper()
	_, v := call(t, n, "GET", "/v1/clusters", "")
	for _, c := range v["clusters"].([]any) {
		if c.(map[string]any)["id"] == id {
			return true
		}
	}
	return false
}

// clusterPatches are the cluster patches in n's log.
func clusterPatches(t *testing.T, n *Node) []wall.Op {
	t.Helper()
	raw, err := n.clog.Changes(0, 10_000, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	var ops []wall.Op
	for _, r := range raw {
		var e cmdlog.Entry
		var op wall.Op
		if json.Unmarshal(r, &e) != nil || e.Kind != wall.Kind || json.Unmarshal(e.Op, &op) != nil || op.Board == nil {
			continue
		}
		ops = append(ops, op)
	}
	if len(ops) != 3 {
		t.Fatalf("%d cluster patches in the log, want 3", len(ops))
	}
	return ops
}
