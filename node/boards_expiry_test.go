package node

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/mesh/store"
	"github.com/agentmesh/mesh/wall"
)

// boardKeys counts n's keys of the boards' state under prefix w/<p>/
// holding sub.
func boardKeys(t *testing.T, n *Node, p, sub string) int {
	t.Helper()
	count := 0
	err := n.clog.DB().View(func(tx *store.Txn) error {
		return tx.Scan([]byte("w/"+p+"/"), nil, func(k, _ []byte) (bool, error) {
			if strings.Contains(string(k), sub) {
				count++
			}
			return true, nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return count
}

// TestBoardsTTLExpiry: a post whose TTL elapsed (on the mesh's injected
// clock) is never read again on any node, and the directory's sweep drops
// its rows everywhere; a deleted post's tombstone goes too, and so do a
// deleted board's posts.
func TestBoardsTTLExpiry(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	b, c := m.join(), m.join()
	cl := newBoardCluster(t, b, `{"visibility":"public"}`)
	admin := []string{"x-cluster-token", cl.admin}
	mustCall(t, b, 201, "POST", cl.path("/boards"), `{"slug":"daily"}`, admin...)
	mustCall(t, b, 201, "POST", cl.path("/boards"), `{"slug":"doomed"}`, admin...)
	short := createPost(t, b, cl, "daily", "alice", map[string]any{"title": "today only", "ttl": "24h"})["id"].(string)
	long := createPost(t, b, cl, "daily", "alice", map[string]any{"title": "this week", "ttl": "7d"})["id"].(string)
	gone := createPost(t, b, cl, "daily", "alice", map[string]any{"title": "deleted", "ttl": "forever"})["id"].(string)
	createPost(t, b, cl, "doomed", "alice", map[string]any{"title": "on a doomed board", "ttl": "forever"})
	mustCall(t, b, 200, "DELETE", cl.path("/boards/daily/posts/"+gone+"?agent=alice"), "")
	mustCall(t, b, 200, "DELETE", cl.path("/boards/doomed"), "", admin...)
	waitStatus(t, c, 200, cl.path("/boards/daily/posts/"+short))
	m.waitCaughtUp(c)
	if n := boardKeys(t, c, "bp", cl.id); n != 3 { // short, long, and the doomed board's post, not purged yet
		t.Fatalf("%d post rows on c, want 3", n)
	}

	m.clock.Advance(25 * time.Hour)
	for _, n := range []*Node{m.boot, b, c} {
		wantError(t, n, 404, "post_not_found", "GET", cl.path("/boards/daily/posts/"+short), "")
		if ids := postIDs(mustCall(t, n, 200, "GET", cl.path("/boards/daily/posts"), "")); len(ids) != 1 || ids[0] != long {
			t.Fatalf("live posts on %s: %v, want only %s", n.URL(), ids, long)
		}
	}
	m.boot.sweepOnce(context.Background())
	m.waitCaughtUp(b)
	m.waitCaughtUp(c)
	for _, n := range []*Node{m.boot, b, c} {
		if got := boardKeys(t, n, "bp", cl.id); got != 1 {
			t.Fatalf("%d post rows on %s after the sweep, want 1 (%s)", got, n.URL(), long)
		}
		if got := boardKeys(t, n, "bt", cl.id) + boardKeys(t, n, "bd", cl.id) + boardKeys(t, n, "bx", short); got != 0 {
			t.Fatalf("%d tombstones, dead boards or expiries left on %s", got, n.URL())
		}
	}
	if v := mustCall(t, c, 200, "GET", cl.path("/boards"), ""); v["boards"].([]any)[0].(map[string]any)["posts"] != float64(1) {
		t.Fatalf("the board still counts its expired posts: %v", v)
	}
}

// TestBoardsQuotas: the directory's quotas hold for writes made on any
// node (whatever that node's own settings): boards per cluster, posts per
// board and per cluster (429), bytes (413); an expired or deleted post
// frees its place.
func TestBoardsQuotas(t *testing.T) {
	t.Parallel()
	m := newMeshWith(t, func(c *Config) {
		c.BoardQuota = wall.Quota{Boards: 2, BoardPosts: 2, ClusterPosts: 3, BoardBytes: 4000}
	})
	b := m.join()
	cl := newBoardCluster(t, b, `{"visibility":"public"}`)
	admin := []string{"x-cluster-token", cl.admin}
	mustCall(t, b, 201, "POST", cl.path("/boards"), `{"slug":"one"}`, admin...)
	mustCall(t, b, 201, "POST", cl.path("/boards"), `{"slug":"two"}`, admin...)
	wantError(t, b, 429, "quota_boards", "POST", cl.path("/boards"), `{"slug":"three"}`, admin...)

	post := map[string]any{"title": "t", "ttl": "24h"}
	first := createPost(t, b, cl, "one", "a", post)["id"].(string)
	createPost(t, b, cl, "one", "a", post)
	wantError(t, b, 429, "quota_posts", "POST", cl.path("/boards/one/posts?agent=a"), `{"title":"t","ttl":"24h"}`)
	createPost(t, b, cl, "two", "a", post)
	wantError(t, b, 429, "quota_posts", "POST", cl.path("/boards/two/posts?agent=a"), `{"title":"t","ttl":"24h"}`)
	mustCall(t, b, 200, "DELETE", cl.path("/boards/one/posts/"+first+"?agent=a"), "")
	big := `{"title":"t","ttl":"24h","body":"` + strings.Repeat("x", 3990) + `"}`
	wantError(t, b, 413, "quota_bytes", "POST", cl.path("/boards/two/posts?agent=a"), big)
	createPost(t, b, cl, "two", "a", post)

	m.clock.Advance(25 * time.Hour)
	m.boot.sweepOnce(context.Background())
	createPost(t, b, cl, "one", "a", post)
}

// TestBoardsQuotaHoldsDeletedBoardsUntilPurged: a deleted board's posts
// keep counting in its cluster's quotas until the sweep purges them from
// disk, so that deleting a full board and filling another never holds
// more than the quotas; once purged, their places are free.
func TestBoardsQuotaHoldsDeletedBoardsUntilPurged(t *testing.T) {
	t.Parallel()
	m := newMeshWith(t, func(c *Config) { c.BoardQuota = wall.Quota{ClusterPosts: 2} })
	b := m.join()
	cl := newBoardCluster(t, b, `{"visibility":"public"}`)
	admin := []string{"x-cluster-token", cl.admin}
	mustCall(t, b, 201, "POST", cl.path("/boards"), `{"slug":"full"}`, admin...)
	post := map[string]any{"title": "t", "ttl": "forever"}
	createPost(t, b, cl, "full", "a", post)
	createPost(t, b, cl, "full", "a", post)
	mustCall(t, b, 200, "DELETE", cl.path("/boards/full"), "", admin...)
	mustCall(t, b, 201, "POST", cl.path("/boards"), `{"slug":"fresh"}`, admin...)
	wantError(t, b, 429, "quota_posts", "POST", cl.path("/boards/fresh/posts?agent=a"), `{"title":"t","ttl":"forever"}`)

	m.boot.sweepOnce(context.Background())
	m.waitCaughtUp(b)
	if n := boardKeys(t, b, "bp", cl.id); n != 0 {
		t.Fatalf("%d post rows of the deleted board left after the purge", n)
	}
	createPost(t, b, cl, "fresh", "a", post)
	createPost(t, b, cl, "fresh", "a", post)
	wantError(t, b, 429, "quota_posts", "POST", cl.path("/boards/fresh/posts?agent=a"), `{"title":"t","ttl":"forever"}`)
}
