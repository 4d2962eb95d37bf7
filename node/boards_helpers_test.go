package node

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/agentmesh/mesh/internal/testkit"
)

// boardCluster is a cluster with boards enabled, as its creator holds it.
type boardCluster struct {
	id, token, admin string
}

// path is the cluster's path plus rest.
func (c boardCluster) path(rest string) string { return "/v1/clusters/" + c.id + rest }

// newBoardCluster creates a cluster (body as POST /v1/clusters takes it)
// on n and enables its boards there.
func newBoardCluster(t *testing.T, n *Node, body string) boardCluster {
	t.Helper()
	v := createCluster(t, n, body)
	c := boardCluster{id: v["cluster_id"].(string), token: v["token"].(string), admin: v["admin_token"].(string)}
	mustCall(t, n, 200, "PATCH", c.path(""), `{"boards_enabled": true}`, "x-cluster-token", c.admin)
	return c
}

// mustCall sends a request and fails the test unless it answers want.
func mustCall(t testing.TB, n *Node, want int, method, path, body string, hdr ...string) map[string]any {
	t.Helper()
	st, v := call(t, n, method, path, body, hdr...)
	if st != want {
		t.Fatalf("%s %s on %s: %d %v, want %d", method, path, n.URL(), st, v, want)
	}
	return v
}

// wantError fails the test unless the request answers status with code.
func wantError(t *testing.T, n *Node, status int, code, method, path, body string, hdr ...string) {
	t.Helper()
	st, v := call(t, n, method, path, body, hdr...)
	if st != status || v["code"] != code {
		t.Fatalf("%s %s: %d %v, want %d %s", method, path, st, v, status, code)
	}
}

// createPost posts on board slug of c through n and returns the post.
func createPost(t *testing.T, n *Node, c boardCluster, slug, agent string, post any, hdr ...string) map[string]any {
	t.Helper()
	b, _ := json.Marshal(post)
	v := mustCall(t, n, 201, "POST", c.path("/boards/"+slug+"/posts?agent="+agent), string(b), hdr...)
	return v["post"].(map[string]any)
}

// postIDs lists the ids of a posts answer.
func postIDs(v map[string]any) []string {
	ids := []string{}
	posts, _ := v["posts"].([]any)
	for _, p := range posts {
		ids = append(ids, p.(map[string]any)["id"].(string))
	}
	return ids
}

// waitStatus polls a GET until it answers want (a write reaching another
// node, as waitFor), and returns the answer.
func waitStatus(t *testing.T, n *Node, want int, path string, hdr ...string) map[string]any {
	t.Helper()
	var v map[string]any
	if !testkit.Until(10*time.Second, func() bool {
		var st int
		st, v = call(t, n, "GET", path, "", hdr...)
		return st == want
	}) {
		t.Fatalf("GET %s on %s never answered %d (last %v)", path, n.URL(), want, v)
	}
	return v
}

// boardFrameOf waits for c's next board frame and checks its event and
// slug.
func (c *wsClient) boardFrame(event, slug string) map[string]any {
	c.t.Helper()
	f := c.next("board")
	if f["event"] != event || f["slug"] != slug || f["board"] != slug {
		c.t.Fatalf("board frame %v, want %s on %s", f, event, slug)
	}
	return f
}
