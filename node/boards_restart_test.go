package node

import (
	"slices"
	"testing"
	"time"
)

// TestBoardsRestartAndLateJoiner: boards and posts outlive a restart of
// every node (bootstrap included), and a node that joins after the log
// was compacted (it installs a snapshot) serves every live post, public
// and private, and none that expired.
func TestBoardsRestartAndLateJoiner(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	b := m.join()
	pub := newBoardCluster(t, b, `{"visibility":"public"}`)
	priv := newBoardCluster(t, m.boot, `{}`)
	for _, cl := range []boardCluster{pub, priv} {
		mustCall(t, b, 201, "POST", cl.path("/boards"), `{"slug":"kept","props":{"where":{"lat":5,"lon":5}}}`, "x-cluster-token", cl.admin)
	}
	var want []string
	for i, ttl := range []string{"24h", "7d", "forever"} {
		p := createPost(t, b, pub, "kept", "alice", map[string]any{"title": "public " + ttl, "ttl": ttl,
			"props": map[string]any{"where": map[string]any{"lat": 5, "lon": 5 + float64(i)/100}}})
		if ttl != "24h" {
			want = append(want, p["id"].(string))
		}
	}
	secret := createPost(t, m.boot, priv, "kept", "bob", map[string]any{"title": "private", "ttl": "30d"}, "x-cluster-token", priv.token)["id"].(string)
	slices.Sort(want)

	m.boot = m.restart(m.boot)
	b = m.restart(b)
	m.waitCaughtUp(b)
	m.clock.Advance(25 * time.Hour) // the 24h post expired while nobody swept
	check := func(n *Node) {
		t.Helper()
		ids := postIDs(waitStatus(t, n, 200, pub.path("/boards/kept/posts?near=5,5&km=5")))
		if slices.Sort(ids); !slices.Equal(ids, want) {
			t.Fatalf("public posts on %s: %v, want %v", n.URL(), ids, want)
		}
		if ids := postIDs(waitStatus(t, n, 200, priv.path("/boards/kept/posts?token="+priv.token))); !slices.Equal(ids, []string{secret}) {
			t.Fatalf("private posts on %s: %v", n.URL(), ids)
		}
	}
	check(m.boot)
	check(b)

	if err := m.boot.clog.Compact(1); err != nil {
		t.Fatal(err)
	}
	c := m.join()
	if c.clog.First() <= 2 {
		t.Fatalf("the late joiner replayed the log from %d instead of installing a snapshot", c.clog.First())
	}
	check(c)
	// After the snapshot, the late joiner follows the log as any node.
	p := createPost(t, b, pub, "kept", "carol", map[string]any{"title": "after", "ttl": "7d"})["id"].(string)
	waitStatus(t, c, 200, pub.path("/boards/kept/posts/"+p))
}

// TestBoardsOnAQuorum: on a directory run by a quorum, board writes made
// through a follower and an ordinary node land on every member alike.
func TestBoardsOnAQuorum(t *testing.T) { // not parallel: its Raft elections run in real time, and its members' ports fixed
	q := newQuorumMesh(t, 3, nil)
	follower := q.follower()
	ord := q.join(slices.Index(q.members, follower))
	cl := newBoardCluster(t, ord, `{"visibility":"public"}`)
	mustCall(t, follower, 201, "POST", cl.path("/boards"), `{"slug":"q","about":"on a quorum"}`, "x-cluster-token", cl.admin)
	id := createPost(t, ord, cl, "q", "alice", map[string]any{"title": "replicated", "ttl": "7d"})["id"].(string)
	q.waitSame(q.all(ord)...)
	for _, n := range q.all(ord) {
		v := mustCall(t, n, 200, "GET", cl.path("/boards"), "")
		if b := v["boards"].([]any)[0].(map[string]any); b["posts"] != float64(1) || b["about"] != "on a quorum" {
			t.Fatalf("board on %s: %v", n.URL(), b)
		}
		if ids := postIDs(mustCall(t, n, 200, "GET", cl.path("/boards/q/posts"), "")); !slices.Equal(ids, []string{id}) {
			t.Fatalf("posts on %s: %v", n.URL(), ids)
		}
	}
}
