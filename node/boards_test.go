package node

import (
	"slices"
	"strings"
	"testing"
)

// TestBoardsLifecycleAcrossNodes: a board and a post made on one node are
// read on the others within a second, every create and delete reaches the
// sockets of the cluster on every node as a board frame, and bad input is
// refused with a code.
func TestBoardsLifecycleAcrossNodes(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	b, c := m.join(), m.join()
	v := createCluster(t, b, `{"visibility":"public","name":"Market town"}`)
	cl := boardCluster{id: v["cluster_id"].(string), token: v["token"].(string), admin: v["admin_token"].(string)}
	admin := []string{"x-cluster-token", cl.admin}

	wantError(t, c, 409, "boards_disabled", "POST", cl.path("/boards"), `{"slug":"market"}`, admin...)
	wantError(t, c, 401, "token_required", "PATCH", cl.path(""), `{"boards_enabled":true}`)
	wantError(t, c, 401, "admin_token_required", "PATCH", cl.path(""), `{"boards_enabled":true}`, "x-cluster-token", cl.token)
	got := mustCall(t, c, 200, "PATCH", cl.path(""), `{"boards_enabled":true}`, "Authorization", "Bearer "+cl.admin)
	if got["boards_enabled"] != true || got["cluster_id"] != cl.id {
		t.Fatalf("patch answered %v", got)
	}
	watchC := enterWall(t, c, cl.id, q("agent", "watcher-c"))
	watchBoot := enterWall(t, m.boot, cl.id, q("agent", "watcher-boot"))

	board := mustCall(t, b, 201, "POST", cl.path("/boards"),
		`{"slug":"market","name":"Market","kind":"buysell","about":"Buy and sell."}`, admin...)["board"].(map[string]any)
	if board["slug"] != "market" || board["kind"] != "buysell" || board["about"] != "Buy and sell." {
		t.Fatalf("board %v", board)
	}
	watchC.boardFrame("board_created", "market")
	watchBoot.boardFrame("board_created", "market")
	list := waitStatus(t, c, 200, cl.path("/boards"))
	if list["count"] != float64(1) || list["cluster_props"] == nil {
		t.Fatalf("list %v", list)
	}
	if bv := list["boards"].([]any)[0].(map[string]any); bv["about"] != "Buy and sell." || bv["props"] == nil {
		t.Fatalf("listed board %v", bv)
	}

	post := createPost(t, c, cl, "market", "alice", map[string]any{"title": "Bike for sale", "body": "Red, 3 gears.", "ttl": "7d",
		"file": map[string]any{"url": "https://example.org/bike.jpg", "mime": "image/jpeg"}})
	id := post["id"].(string)
	if !strings.HasPrefix(id, "p_") || post["author"] != "alice" || post["expires_at"] == nil {
		t.Fatalf("post %v", post)
	}
	for _, w := range []*wsClient{watchC, watchBoot} {
		if f := w.boardFrame("post_created", "market"); f["post"] != id || f["title"] != "Bike for sale" {
			t.Fatalf("post frame %v", f)
		}
	}
	got = waitStatus(t, m.boot, 200, cl.path("/boards/market/posts/"+id))["post"].(map[string]any)
	if got["title"] != "Bike for sale" || got["file"].(map[string]any)["mime"] != "image/jpeg" {
		t.Fatalf("post on boot %v", got)
	}
	waitStatus(t, b, 200, cl.path("/boards/market/posts/"+id))
	if ids := postIDs(mustCall(t, b, 200, "GET", cl.path("/boards/market"), "")); !slices.Equal(ids, []string{id}) {
		t.Fatalf("board's posts %v", ids)
	}

	wantError(t, b, 403, "not_author", "DELETE", cl.path("/boards/market/posts/"+id+"?agent=mallory"), "")
	wantError(t, b, 403, "not_author", "DELETE", cl.path("/boards/market/posts/"+id), "")
	mustCall(t, b, 200, "DELETE", cl.path("/boards/market/posts/"+id+"?agent=alice"), "")
	watchC.boardFrame("post_deleted", "market")
	waitStatus(t, c, 404, cl.path("/boards/market/posts/"+id))

	other := createPost(t, b, cl, "market", "bob", map[string]any{"title": "Lamp", "ttl": "24h"})
	watchC.boardFrame("post_created", "market")
	mustCall(t, c, 200, "DELETE", cl.path("/boards/market/posts/"+other["id"].(string)), "", admin...)
	watchBoot.boardFrame("post_deleted", "market")
	watchC.boardFrame("post_deleted", "market")

	mustCall(t, m.boot, 200, "DELETE", cl.path("/boards/market"), "", admin...)
	watchC.boardFrame("board_deleted", "market")
	waitStatus(t, b, 404, cl.path("/boards/market"))
}

// TestBoardsBadInput: every bad board or post request is a 4xx with a
// code, on whichever node.
func TestBoardsBadInput(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	b := m.join()
	cl := newBoardCluster(t, b, `{"visibility":"public"}`)
	admin := []string{"x-cluster-token", cl.admin}
	mustCall(t, b, 201, "POST", cl.path("/boards"), `{"slug":"news","kind":"generic"}`, admin...)
	for _, tc := range []struct {
		status       int
		code, method string
		path, body   string
	}{
		{409, "board_exists", "POST", "/boards", `{"slug":"news"}`},
		{400, "bad_slug", "POST", "/boards", `{"slug":"Not A Slug"}`},
		{400, "bad_slug", "POST", "/boards", `{"slug":"-dash"}`},
		{400, "bad_kind", "POST", "/boards", `{"slug":"x","kind":"chat"}`},
		{400, "invalid_request", "POST", "/boards", `{"slug":"x","about":"` + strings.Repeat("a", 401) + `"}`},
		{400, "invalid_request", "POST", "/boards", `{"slug":"x","colour":"red"}`},
		{400, "bad_props", "POST", "/boards", `{"slug":"x","props":{"colour":1}}`},
		{400, "invalid_json", "POST", "/boards", `{"slug":`},
		{400, "invalid_request", "PATCH", "", `{}`},
		{400, "invalid_request", "PATCH", "", `{"boards_enabled":"yes"}`},
		{404, "board_not_found", "GET", "/boards/nope", ``},
		{404, "board_not_found", "POST", "/boards/nope/posts?agent=a", `{"title":"t","ttl":"7d"}`},
		{400, "bad_ttl", "POST", "/boards/news/posts?agent=a", `{"title":"t","ttl":"2d"}`},
		{400, "bad_agent", "POST", "/boards/news/posts", `{"title":"t","ttl":"7d"}`},
		{400, "invalid_request", "POST", "/boards/news/posts?agent=a", `{"title":"","ttl":"7d"}`},
		{400, "bad_file", "POST", "/boards/news/posts?agent=a", `{"title":"t","ttl":"7d","file":{"url":"ftp://x/y","mime":"text/plain"}}`},
		{400, "bad_file", "POST", "/boards/news/posts?agent=a", `{"title":"t","ttl":"7d","file":{"url":"https://x/y","mime":"text"}}`},
		{400, "bad_props", "POST", "/boards/news/posts?agent=a", `{"title":"t","ttl":"7d","props":{"entry":{"age_min":3}}}`},
		{400, "bad_coordinates", "POST", "/boards/news/posts?agent=a", `{"title":"t","ttl":"7d","props":{"where":{"lat":91,"lon":0}}}`},
		{413, "post_too_long", "POST", "/boards/news/posts?agent=a", `{"title":"t","ttl":"7d","body":"` + strings.Repeat("é", 4001) + `"}`},
		{404, "post_not_found", "GET", "/boards/news/posts/p_nope", ``},
		{400, "bad_page", "GET", "/boards/news/posts?limit=0", ``},
		{400, "bad_page", "GET", "/boards/news/posts?cursor=zzz", ``},
		{400, "bad_coordinates", "GET", "/boards/news/posts?near=1&km=3", ``},
		{400, "bad_radius", "GET", "/boards/news/posts?near=1,2&km=0", ``},
		{400, "bad_filter", "GET", "/boards/news/posts?near=1,2", ``},
	} {
		wantError(t, b, tc.status, tc.code, tc.method, cl.path(tc.path), tc.body, admin...)
	}
	wantError(t, b, 404, "cluster_not_found", "GET", "/v1/clusters/c_unknown/boards", "")
}
