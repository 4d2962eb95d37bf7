package node

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/agentmesh/mesh/internal/browsertest"
	"github.com/agentmesh/mesh/wall"
)

// TestClusterPageFollowsUpdates: a cluster's page read by a spectator on
// one node and one joined as a browser peer on another follow what the
// admin does through a third: a rename shows the new name in the heading,
// the title, the command to chat and the address; turning the cluster
// private ends both pages' live view, saying so, with no way left to join
// or send (the keyboard's focus, that was in the send box, goes to what
// says so). Before, a join that fails leaves the page reading the wall as
// before.
func TestClusterPageFollowsUpdates(t *testing.T) {
	browsertest.Need(t) // not parallel: the tests share one browser
	pm := newPeerMesh(t)
	alice := enterWall(t, pm.m.boot, pm.id, q("agent", "alice"))
	spectator := openPage(t, pm.n1.URL()+"/clusters/peers")
	carol := openPage(t, pm.n2.URL()+"/clusters/"+pm.id)
	for _, p := range []*pageTab{spectator, carol} {
		browsertest.Until(t, p.ctx, `document.querySelector("#wall-status").dataset.state === "live"`, "the live wall")
	}
	// 64 characters the form takes, 128 bytes the wire does not.
	run(t, carol.ctx, chromedp.SendKeys("#join-handle", strings.Repeat("é", 64)), chromedp.Click("#join-button"))
	browsertest.Until(t, carol.ctx, `!document.querySelector("#join-error").hidden`, "the join refused")
	browsertest.Until(t, carol.ctx, `document.querySelector("#wall-status").dataset.state === "live"`, "the wall live again")
	alice.send("still reading?")
	carol.sees("alice", "still reading?")
	alice.next("ack")
	run(t, carol.ctx, chromedp.Evaluate[chromedp.Void](`document.querySelector("#join-handle").value = ""`))
	carol.join("carol")
	carol.online("alice", "carol")

	patchCluster(t, pm.m.boot, pm.id, pm.admin, `{"name":"Harbour Peers"}`)
	alice.next(wall.KindClusterUpdated)
	for _, p := range []*pageTab{spectator, carol} {
		browsertest.Until(t, p.ctx, textIs("#cluster-name", "Harbour Peers"), "the new name in the heading")
		browsertest.Until(t, p.ctx, `document.title === "Harbour Peers · mesh" && document.querySelector("#cluster").dataset.slug === "harbour-peers"`,
			"the new name in the title")
		if got := p.text("#chat-slug"); got != "harbour-peers" {
			t.Fatalf("the command to chat names %q, want the new slug", got)
		}
	}
	if path := spectator.eval(`location.pathname`); path != "/clusters/harbour-peers" {
		t.Fatalf("the spectator's address is %s, want the new slug's", path)
	}
	if path := carol.eval(`location.pathname`); path != "/clusters/"+pm.id {
		t.Fatalf("the joined page's address by id became %s", path)
	}
	// Before the cluster is private: a look-up of it then answers 404,
	// which the browser reports as a failed load.
	spectator.noProblems()
	carol.noProblems()

	patchCluster(t, pm.m.boot, pm.id, pm.admin, `{"visibility":"private"}`)
	for _, p := range []*pageTab{spectator, carol} {
		browsertest.Until(t, p.ctx, `(s => s.dataset.state === "closed" && s.textContent.includes("made private"))(document.querySelector("#wall-status"))`,
			"the page saying the cluster was made private")
		browsertest.Until(t, p.ctx, `document.querySelector("#join").hidden && document.querySelector("#joined").hidden`, "no way to join or send left")
	}
	if got := carol.eval(`document.activeElement.id`); got != "wall-status" {
		t.Fatalf("the keyboard's focus, in the send box, went to %q, not to the status saying why it went", got)
	}
	closedBy(t, alice, "private")
}

// TestJoinedPageKeepsBoardsLive: once its visitor joined as a browser
// peer, a cluster's page still shows the posts and boards made through
// another node as they come (the node's board frames, on its socket of
// events), and shows each message once, as its peer heard it.
func TestJoinedPageKeepsBoardsLive(t *testing.T) {
	browsertest.Need(t) // not parallel: the tests share one browser
	pm := newPeerMesh(t)
	cl := boardCluster{id: pm.id, admin: pm.admin}
	mustCall(t, pm.m.boot, 200, "PATCH", cl.path(""), `{"boards_enabled": true}`, "x-cluster-token", cl.admin)
	mustCall(t, pm.m.boot, 201, "POST", cl.path("/boards"), `{"slug":"market","kind":"buysell"}`, "x-cluster-token", cl.admin)
	for _, n := range []*Node{pm.n1, pm.n2} {
		pm.m.waitCaughtUp(n)
	}
	carol := openPage(t, pm.n1.URL()+"/clusters/"+pm.id)
	browsertest.Until(t, carol.ctx, present(`li.board[data-board="market"]`), "the board")
	carol.join("carol")

	post := createPost(t, pm.n2, cl, "market", "bob", map[string]any{"title": "Bike", "ttl": "24h"})["id"].(string)
	browsertest.Until(t, carol.ctx, textIs(postItem(post)+" .post-title", "Bike"), "the post made through another node")
	mustCall(t, pm.n2, 201, "POST", cl.path("/boards"), `{"slug":"events","kind":"events"}`, "x-cluster-token", cl.admin)
	browsertest.Until(t, carol.ctx, present(`li.board[data-board="events"]`), "the board made through another node")

	alice := enterWall(t, pm.m.boot, pm.id, q("agent", "alice"))
	carol.online("alice", "carol")
	alice.send("once")
	carol.sees("alice", "once")
	alice.next("ack")
	alice.send("twice?")
	carol.sees("alice", "twice?")
	if n := carol.eval(`String([...document.querySelectorAll("#wall .message .text")].filter(m => m.textContent === "once").length)`); n != "1" {
		t.Fatalf("the joined page shows alice's message %s times", n)
	}
	carol.noProblems()
}
