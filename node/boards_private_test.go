package node

import (
	"bytes"
	"encoding/base64"
	"testing"

	"github.com/agentmesh/mesh/store"
)

// TestBoardsHashtags: #<slug> naming a board of the cluster adds board,
// p_<id> naming a live post adds ref, to the message frame every node
// delivers; unmatched ones stay text, and nothing is resolved on a
// cluster without boards.
func TestBoardsHashtags(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	b, c := m.join(), m.join()
	cl := newBoardCluster(t, b, `{"visibility":"public"}`)
	mustCall(t, b, 201, "POST", cl.path("/boards"), `{"slug":"market"}`, "x-cluster-token", cl.admin)
	pid := createPost(t, b, cl, "market", "alice", map[string]any{"title": "Bike", "ttl": "7d"})["id"].(string)
	m.waitCaughtUp(c)
	alice := enterWall(t, b, cl.id, q("agent", "alice"))
	bob := enterWall(t, c, cl.id, q("agent", "bob"))
	alice.next("presence")

	for _, tc := range []struct {
		send       any
		board, ref any
	}{
		{"see #market for " + pid + ", thanks", "market", pid},
		{map[string]any{"payload": map[string]any{"text": "(#market)", "media": []any{}}}, "market", nil},
		{"#nope and p_aaaaaaaaaaaaaaaaaaaaaaaa", nil, nil},
		{"#Market x" + pid, nil, nil},
		{pid + "a and " + pid + "_2", nil, nil},
		{map[string]any{"to": "bob", "payload": pid}, nil, pid},
	} {
		alice.send(tc.send)
		f := bob.next("message")
		if f["board"] != tc.board || f["ref"] != tc.ref {
			t.Fatalf("%v: frame %v, want board %v ref %v", tc.send, f, tc.board, tc.ref)
		}
		alice.next("ack")
	}

	plain := createCluster(t, b, `{"visibility":"public"}`)["cluster_id"].(string)
	carol := enterWall(t, b, plain, q("agent", "carol"))
	dave := enterWall(t, c, plain, q("agent", "dave"))
	carol.next("presence")
	carol.send("#market " + pid)
	if f := dave.next("message"); f["board"] != nil || f["ref"] != nil {
		t.Fatalf("resolved on a cluster without boards: %v", f)
	}
}

// TestBoardsPrivateCluster: a private cluster's boards need its member
// token (or admin token) for every read and post, and are 404 without
// (a private id cannot be probed); their contents are sealed: the
// directory, which never saw a token, holds no plaintext of them in its
// store, while members on other nodes read them and get their frames.
func TestBoardsPrivateCluster(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	b, c := m.join(), m.join()
	cl := newBoardCluster(t, b, `{"name":"Secret society"}`)
	member := []string{"x-cluster-token", cl.token}
	admin := []string{"x-cluster-token", cl.admin}
	watch := enterWall(t, c, cl.id, q("agent", "watcher", "token", cl.token))

	mustCall(t, b, 201, "POST", cl.path("/boards"), `{"slug":"hidden-board","about":"Sekrit charter"}`, admin...)
	watch.boardFrame("board_created", "hidden-board")
	wantError(t, c, 401, "admin_token_required", "POST", cl.path("/boards"), `{"slug":"x"}`, member...)
	post := createPost(t, c, cl, "hidden-board", "author-zq", map[string]any{"title": "Plaintext title", "body": "the body", "ttl": "forever",
		"props": map[string]any{"where": map[string]any{"lat": 1, "lon": 2, "label": "Hidden place"}}}, member...)
	id := post["id"].(string)
	if f := watch.boardFrame("post_created", "hidden-board"); f["title"] != "Plaintext title" || f["post"] != id {
		t.Fatalf("frame %v", f)
	}

	for _, hdr := range [][]string{nil, {"x-cluster-token", "ck_wrong"}, {"x-cluster-token", "ak_wrong"}} {
		wantError(t, m.boot, 404, "cluster_not_found", "GET", cl.path("/boards"), "", hdr...)
		wantError(t, m.boot, 404, "cluster_not_found", "GET", cl.path("/boards/hidden-board/posts/"+id), "", hdr...)
		wantError(t, m.boot, 404, "cluster_not_found", "POST", cl.path("/boards/hidden-board/posts?agent=a"), `{"title":"t","ttl":"7d"}`, hdr...)
	}
	got := waitStatus(t, m.boot, 200, cl.path("/boards/hidden-board/posts/"+id+"?token="+cl.token))["post"].(map[string]any)
	if got["title"] != "Plaintext title" || got["author"] != "author-zq" {
		t.Fatalf("post read with the token %v", got)
	}
	waitStatus(t, b, 200, cl.path("/boards/hidden-board/posts/"+id), admin...)
	near := mustCall(t, b, 200, "GET", cl.path("/boards/hidden-board/posts?near=1,2&km=1"), "", admin...)
	if ids := postIDs(near); len(ids) != 1 || ids[0] != id {
		t.Fatalf("near on a private board %v", near)
	}
	if v := mustCall(t, b, 200, "GET", cl.path("/boards"), "", admin...); v["boards"].([]any)[0].(map[string]any)["about"] != "Sekrit charter" {
		t.Fatalf("private list %v", v)
	}

	m.waitCaughtUp(c)
	if storeHolds(t, m.boot, cl.id) == "" || storeHolds(t, m.boot, id) == "" {
		t.Fatal("the store scan finds nothing, not even the ids it keys by")
	}
	for _, secret := range []string{"Plaintext title", "Sekrit charter", "hidden-board", "Hidden place", "the body"} {
		if where := storeHolds(t, m.boot, secret); where != "" {
			t.Fatalf("the directory's store holds %q in plaintext at %q", secret, where)
		}
	}

	wantError(t, c, 403, "not_author", "DELETE", cl.path("/boards/hidden-board/posts/"+id+"?agent=bob"), "", member...)
	wantError(t, c, 404, "cluster_not_found", "DELETE", cl.path("/boards/hidden-board/posts/"+id+"?agent=author-zq"), "")
	mustCall(t, c, 200, "DELETE", cl.path("/boards/hidden-board/posts/"+id+"?agent=author-zq"), "", member...)
	watch.boardFrame("post_deleted", "hidden-board")
	waitStatus(t, b, 404, cl.path("/boards/hidden-board/posts/"+id+"?token="+cl.token))
	m.waitCaughtUp(b)
	if where := storeHolds(t, m.boot, "author-zq"); where != "" {
		t.Fatalf("the directory's store holds the author's handle at %q", where)
	}
	// b's index of the board, built by the reads above with the token,
	// follows the log: the deletion, then a new post.
	next := createPost(t, c, cl, "hidden-board", "carol", map[string]any{"title": "later", "ttl": "7d"}, member...)["id"].(string)
	waitFor(t, func() bool {
		ids := postIDs(mustCall(t, b, 200, "GET", cl.path("/boards/hidden-board/posts"), "", member...))
		return len(ids) == 1 && ids[0] == next
	}, "the private board's new post on b")
}

// storeHolds returns the key of n's store under which secret shows, as
// it is or in base64, or "" when it does not.
func storeHolds(t *testing.T, n *Node, secret string) string {
	t.Helper()
	var where string
	needles := [][]byte{[]byte(secret), []byte(base64.StdEncoding.EncodeToString([]byte(secret))[:len(secret)])}
	err := n.clog.DB().View(func(tx *store.Txn) error {
		return tx.Scan(nil, nil, func(k, v []byte) (bool, error) {
			for _, needle := range needles {
				if bytes.Contains(k, needle) || bytes.Contains(v, needle) {
					where = string(k)
					return false, nil
				}
			}
			return true, nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return where
}
