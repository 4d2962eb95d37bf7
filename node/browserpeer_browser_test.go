package node

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/agentmesh/mesh/internal/browsertest"
	"github.com/agentmesh/mesh/internal/testkit"
	"github.com/agentmesh/mesh/p2p"
)

// Browser peers (docs/api.md, Browser peers): a cluster's page joins as a
// libp2p peer of its own, in chromium, over WebTransport (the test's
// pages are on loopback, a secure context) or WebRTC-direct (forced with
// ?transport=webrtc-direct, as a plain-http page on another address
// would get it).

// withBrowsers makes a node listen on QUIC, beside which it listens for
// browsers, on loopback.
func withBrowsers(c *Config) {
	c.Listen = []string{"/ip4/127.0.0.1/tcp/0", "/ip4/127.0.0.1/udp/0/quic-v1"}
}

// peerMesh is a bootstrap and two nodes that listen for browsers, and a
// public cluster.
type peerMesh struct {
	m         *mesh
	n1, n2    *Node
	id, admin string // the cluster's id and admin token
}

func newPeerMesh(t testing.TB) *peerMesh {
	m := newMeshWith(t, withBrowsers)
	pm := &peerMesh{m: m, n1: m.joinWith(withBrowsers), n2: m.joinWith(withBrowsers)}
	v := createCluster(t, m.boot, `{"visibility":"public","name":"peers"}`)
	pm.id, pm.admin = v["cluster_id"].(string), v["admin_token"].(string)
	m.waitCaughtUp(pm.n1)
	m.waitCaughtUp(pm.n2)
	return pm
}

// pageTab is a browser tab with a cluster's page of a node.
type pageTab struct {
	t        testing.TB
	ctx      context.Context
	problems func() []string
}

// openPage opens url (a wall page of a node) in a tab of its own.
func openPage(t testing.TB, url string) *pageTab {
	t.Helper()
	ctx := browsertest.Tab(t, 3*time.Minute)
	p := &pageTab{t: t, ctx: ctx, problems: browsertest.Problems(ctx)}
	run(t, ctx, chromedp.Navigate(url))
	return p
}

// join joins as handle from the page's form (a private cluster's page
// takes its id and token first) and waits until the page says joined; it
// returns how long the page's peer took, in ms.
func (p *pageTab) join(handle string, fields ...string) string {
	p.t.Helper()
	for i := 0; i+1 < len(fields); i += 2 {
		run(p.t, p.ctx, chromedp.SendKeys(fields[i], fields[i+1]))
	}
	run(p.t, p.ctx, chromedp.WaitVisible("#join-button"), chromedp.SendKeys("#join-handle", handle), chromedp.Click("#join-button"))
	browsertest.Until(p.t, p.ctx, `document.querySelector("#wall-status").dataset.state === "joined" || !document.querySelector("#join-error").hidden`,
		"the page to join")
	if e := p.eval(`(e => e.hidden ? "" : e.textContent)(document.querySelector("#join-error"))`); e != "" {
		p.t.Fatalf("the page did not join: %s", e)
	}
	return p.eval(`document.querySelector("#joined").dataset.joinMs`)
}

func (p *pageTab) eval(expr string) string {
	p.t.Helper()
	v, err := chromedp.Run(p.ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		p.t.Fatalf("%s: %v", expr, err)
	}
	return v
}

func (p *pageTab) text(sel string) string {
	return p.eval(fmt.Sprintf(`(e => e ? e.textContent : "")(document.querySelector(%s))`, jsString(sel)))
}

// say sends text from the page and waits for its ack, which it returns
// (how many received it).
func (p *pageTab) say(text string) string {
	p.t.Helper()
	run(p.t, p.ctx, chromedp.Evaluate[chromedp.Void](`delete document.querySelector("#send-status").dataset.delivered`),
		chromedp.SendKeys("#send-text", text), chromedp.Click("#send-form button"))
	browsertest.Until(p.t, p.ctx, `document.querySelector("#send-status").dataset.delivered !== undefined`, "the ack of "+text)
	return p.eval(`document.querySelector("#send-status").dataset.delivered`)
}

// sees waits until the page's wall shows text from handle.
func (p *pageTab) sees(from, text string) {
	p.t.Helper()
	browsertest.Until(p.t, p.ctx, fmt.Sprintf(`[...document.querySelectorAll("#wall .message")].some(m =>
		m.querySelector(".from").textContent === %s && m.querySelector(".text").textContent === %s)`, jsString(from), jsString(text)),
		fmt.Sprintf("%s's %q on the wall", from, text))
}

// online waits until the page lists exactly handles online (sorted).
func (p *pageTab) online(handles ...string) {
	p.t.Helper()
	browsertest.Until(p.t, p.ctx, fmt.Sprintf(`[...document.querySelectorAll("#members .member")].map(m => m.textContent).join(" ") === %s`,
		jsString(strings.Join(handles, " "))), fmt.Sprintf("the page to list %v online", handles))
}

// noProblems fails the test on an error the page reported.
func (p *pageTab) noProblems() {
	p.t.Helper()
	if got := p.problems(); len(got) > 0 {
		p.t.Fatalf("the page reported errors: %q", got)
	}
}

// close closes the tab, as a visitor does.
func (p *pageTab) close() {
	p.t.Helper()
	if err := chromedp.Cancel(p.ctx); err != nil {
		p.t.Fatalf("close the tab: %v", err)
	}
}

// presenceAbout waits for c's presence frame about handle, of any status,
// and returns it.
func presenceAbout(c *wsClient, handle string) map[string]any {
	c.t.Helper()
	for {
		if f := c.next("presence"); f["agent"] == handle {
			return f
		}
	}
}

// nextMessage waits for c's next message frame, skipping presence.
func nextMessage(c *wsClient) map[string]any {
	c.t.Helper()
	return c.next("message")
}

// TestBrowserPeersChat: over each transport, two pages on two nodes that
// serve the cluster for them alone chat with each other and with a
// WebSocket member on a third node; every node shows the pages' members
// online with their dids verified (presence frames, message frames), acks
// count the pages' deliveries and theirs count the others', and a closed
// tab goes offline on every node.
func TestBrowserPeersChat(t *testing.T) {
	browsertest.Need(t) // not parallel: the tests share one browser
	for _, transport := range []string{"webtransport", "webrtc-direct"} {
		t.Run(transport, func(t *testing.T) { testBrowserPeersChat(t, transport) })
	}
}

func testBrowserPeersChat(t *testing.T, transport string) {
	pm := newPeerMesh(t)
	alice := enterWall(t, pm.m.boot, pm.id, q("agent", "alice"))
	page := func(n *Node) string { return n.URL() + "/clusters/" + pm.id + "?transport=" + transport }

	carol := openPage(t, page(pm.n1))
	ms := carol.join("carol")
	if got := carol.eval(`document.querySelector("#joined").dataset.transport`); got != transport {
		t.Fatalf("the page joined over %q, want %s", got, transport)
	}
	carolDID := carol.eval(`document.querySelector("#me-verified").title`)
	if f := presenceAbout(alice, "carol"); f["status"] != "online" || f["did"] != carolDID || f["did_verified"] != true {
		t.Fatalf("alice's presence frame of the page: %v, want carol online with %s verified", f, carolDID)
	}
	dave := openPage(t, page(pm.n2))
	ms2 := dave.join("dave")
	t.Logf("%s: joined in %s ms and %s ms", transport, ms, ms2)
	if f := presenceAbout(alice, "dave"); f["status"] != "online" || f["did_verified"] != true {
		t.Fatalf("alice's presence frame of the second page: %v", f)
	}
	carol.online("alice", "carol", "dave")
	dave.online("alice", "carol", "dave")

	// alice to both pages: her ack counts them.
	alice.send("hello pages")
	carol.sees("alice", "hello pages")
	dave.sees("alice", "hello pages")
	if a := alice.next("ack"); a["delivered"] != 2.0 {
		t.Fatalf("alice's ack %v, want 2 delivered (the two pages)", a)
	}
	// Each page to the other and to alice. A page's ack counts the
	// nodes' sockets (the other page, which cannot reach it, sends it no
	// receipt).
	if got := carol.say("from carol"); got != "1" {
		t.Fatalf("carol's ack: %s delivered, want 1 (alice)", got)
	}
	dave.sees("carol", "from carol")
	if f := nextMessage(alice); f["from"] != "carol" || f["payload"] != "from carol" || f["from_did"] != carolDID || f["did_verified"] != true {
		t.Fatalf("alice got %v, want carol's message with her did verified", f)
	}
	if got := dave.say("from dave"); got != "1" {
		t.Fatalf("dave's ack: %s delivered, want 1 (alice)", got)
	}
	carol.sees("dave", "from dave")
	if f := nextMessage(alice); f["from"] != "dave" || f["did_verified"] != true {
		t.Fatalf("alice got %v, want dave's message, verified", f)
	}

	// Members on the pages' nodes see the pages' dids verified there too.
	bob := enterWall(t, pm.n1, pm.id, q("agent", "bob"))
	erin := enterWall(t, pm.n2, pm.id, q("agent", "erin"))
	carol.online("alice", "bob", "carol", "dave", "erin")
	if got := carol.say("verified?"); got != "3" {
		t.Fatalf("carol's ack: %s delivered, want 3 (alice, bob, erin)", got)
	}
	for _, c := range []*wsClient{alice, bob, erin} {
		if f := nextMessage(c); f["from"] != "carol" || f["from_did"] != carolDID || f["did_verified"] != true {
			t.Fatalf("a member got %v, want carol's message with her did verified", f)
		}
	}
	carol.noProblems()
	dave.noProblems()

	// The tab closes: carol goes offline on every node.
	closed := time.Now()
	carol.close()
	for _, c := range []*wsClient{alice, bob, erin} {
		if f := presenceAbout(c, "carol"); f["status"] != "offline" {
			t.Fatalf("presence %v, want carol offline", f)
		}
	}
	t.Logf("%s: the closed tab was offline on every node %v after it closed", transport, time.Since(closed).Round(time.Millisecond))
	dave.online("alice", "bob", "dave", "erin")
}

// TestBrowserPeerRejoinsAfterRestart: the node a page came from restarts
// (same key, addresses and ports, as a node remembers them); the page
// reconnects, and the node serves the cluster for it again: a member who
// connects there sees the page online, and they chat.
func TestBrowserPeerRejoinsAfterRestart(t *testing.T) {
	browsertest.Need(t) // not parallel: the tests share one browser
	pm := newPeerMesh(t)
	alice := enterWall(t, pm.m.boot, pm.id, q("agent", "alice"))
	carol := openPage(t, pm.n1.URL()+"/clusters/"+pm.id)
	carol.join("carol")
	presenceAbout(alice, "carol")

	cfg := pm.n1.cfg
	cfg.HTTPAddr = strings.TrimPrefix(pm.n1.URL(), "http://")
	cfg.Listen = slices.DeleteFunc(pm.n1.host.ListenAddrs(), p2p.IsBrowserAddr)
	pm.n1.Close()
	testkit.Eventually(t, 10*time.Second, func() bool {
		return carol.eval(`document.querySelector("#wall-status").dataset.state`) == "reconnecting"
	}, "the page to see its node gone")
	n1 := startNode(t, waitFree(t, cfg))
	browsertest.Until(t, carol.ctx, `document.querySelector("#wall-status").dataset.state === "joined"`, "the page to rejoin")

	bob := enterWall(t, n1, pm.id, q("agent", "bob"))
	carol.online("alice", "bob", "carol")
	if got := carol.say("back"); got != "2" {
		t.Fatalf("carol's ack after the restart: %s delivered, want 2 (alice, bob)", got)
	}
	if f := nextMessage(bob); f["from"] != "carol" || f["did_verified"] != true {
		t.Fatalf("bob got %v, want carol's message", f)
	}
	bob.send("welcome back")
	carol.sees("bob", "welcome back")
}

// waitFree returns cfg once its HTTP address can be bound again.
func waitFree(t *testing.T, cfg Config) Config {
	t.Helper()
	testkit.Eventually(t, 10*time.Second, func() bool {
		l, err := net.Listen("tcp", cfg.HTTPAddr)
		if err == nil {
			l.Close()
		}
		return err == nil
	}, "the restarted node's HTTP address to be free")
	return cfg
}

// TestBrowserPeerPrivateCluster: on the page of private clusters, a
// visitor with the member token joins and chats with a member of another
// node, the page sealing and opening everything itself; one with another
// cluster's token joins nothing and reads nothing.
func TestBrowserPeerPrivateCluster(t *testing.T) {
	browsertest.Need(t) // not parallel: the tests share one browser
	pm := newPeerMesh(t)
	priv := createCluster(t, pm.m.boot, `{"name":"secret"}`)
	id, token := priv["cluster_id"].(string), priv["token"].(string)
	other := createCluster(t, pm.m.boot, `{"name":"other"}`)["token"].(string)
	pm.m.waitCaughtUp(pm.n1)
	alice := enterWall(t, pm.m.boot, id, q("agent", "alice", "token", token))

	carol := openPage(t, pm.n1.URL()+"/join#"+id)
	carol.join("carol", "#join-token", token)
	if f := presenceAbout(alice, "carol"); f["did_verified"] != true {
		t.Fatalf("alice's presence frame of the page: %v", f)
	}
	carol.online("alice", "carol")

	mallory := openPage(t, pm.n2.URL()+"/join")
	run(t, mallory.ctx, chromedp.SendKeys("#join-cluster", id), chromedp.SendKeys("#join-token", other),
		chromedp.SendKeys("#join-handle", "mallory"), chromedp.Click("#join-button"))
	browsertest.Until(t, mallory.ctx, `!document.querySelector("#join-error").hidden`, "the page to refuse the token")

	alice.send("for members only")
	carol.sees("alice", "for members only")
	if a := alice.next("ack"); a["delivered"] != 1.0 {
		t.Fatalf("alice's ack %v, want 1 delivered (the page)", a)
	}
	if got := carol.say("sealed"); got != "1" {
		t.Fatalf("carol's ack: %s delivered, want 1 (alice)", got)
	}
	if f := nextMessage(alice); f["payload"] != "sealed" {
		t.Fatalf("alice got %v", f)
	}
	if n := mallory.eval(`String(document.querySelectorAll("#wall .message").length)`); n != "0" {
		t.Fatalf("the page with another cluster's token shows %s messages", n)
	}
	carol.noProblems()
}

// TestBrowserPeerOnPhone: a joined page at 390 × 844, as on a phone, with
// handles of 64 characters (in the members, the wall and "Joined as"), a
// cluster renamed meanwhile, messages, and a board whose post with a
// place is made through another node once joined: nothing wider than the
// screen, no word broken (a long handle wraps at its separators), every
// text legible (phoneCheck), and the send box and the leave button on the
// screen. The keyboard lands in the send box on joining, and goes from
// the wall through its link, the leave button, the send box and its
// button to the map's marker and the post it lists, each stop showing it
// has the focus.
func TestBrowserPeerOnPhone(t *testing.T) {
	browsertest.Need(t) // not parallel: the tests share one browser
	pm := newPeerMesh(t)
	cl := boardCluster{id: pm.id, admin: pm.admin}
	mustCall(t, pm.m.boot, 200, "PATCH", cl.path(""), `{"boards_enabled": true}`, "x-cluster-token", cl.admin)
	mustCall(t, pm.m.boot, 201, "POST", cl.path("/boards"), `{"slug":"market","kind":"buysell","name":"Neighbourhood marketplace"}`, "x-cluster-token", cl.admin)
	pm.m.waitCaughtUp(pm.n1)
	const alice, carol = "Wilhelmina_the_harbour_master_of_the_old_quay_and_the_new_one_xy", "Bartholomew_the_lighthouse_keeper_of_the_northern_harbour_quay_x"
	ws := enterWall(t, pm.m.boot, pm.id, q("agent", alice))
	page := openPage(t, pm.n1.URL()+"/clusters/"+pm.id)
	run(t, page.ctx, chromedp.EmulateViewport(390, 844))
	browsertest.Until(t, page.ctx, present(`li.board[data-board="market"]`), "the board")
	page.join(carol)
	if got := page.eval(`document.activeElement.id`); got != "send-text" {
		t.Fatalf("on joining, the focus is on %q, not the send box", got)
	}
	page.online(carol, alice)
	patchCluster(t, pm.m.boot, pm.id, pm.admin, `{"name":"Harbour Peers of the Northern Quarter"}`)
	browsertest.Until(t, page.ctx, textIs("#cluster-name", "Harbour Peers of the Northern Quarter"), "the new name")
	post := createPost(t, pm.n2, cl, "market", "Bob_the_builder_from_the_harbour_who_fixes_everything_on_quay", map[string]any{
		"title": "Grandmother's bicycle, barely used, with a basket", "ttl": "24h",
		"props": map[string]any{"where": map[string]any{"lat": 48.86, "lon": 2.34, "label": "Paris, near the Gare de l'Est"}}})["id"].(string)
	browsertest.Until(t, page.ctx, present(postItem(post))+" && "+present(marker(post)), "the post and its marker")
	const said = "Anyone going to the market tomorrow morning? I can bring the grandmother's bicycle along, see #market"
	ws.send(said)
	page.sees(alice, said)
	page.say("I'll be there at nine, by the fountain")
	if bad := evalIn[[]string](t, page.ctx, phoneCheck); len(bad) > 0 {
		t.Fatalf("the joined page at 390 px: %q", bad)
	}
	for _, sel := range []string{"#send-text", "#leave-button"} {
		run(t, page.ctx, chromedp.ScrollIntoView(sel))
		if !evalIn[bool](t, page.ctx, fmt.Sprintf(`(r => r.left >= 0 && r.right <= innerWidth && r.width > 0)(document.querySelector(%s).getBoundingClientRect())`, jsString(sel))) {
			t.Fatalf("%s is not on the screen at 390 px", sel)
		}
	}

	run(t, page.ctx, chromedp.Evaluate[chromedp.Void](`document.querySelector("#wall").focus()`))
	want := []string{"#market", "Leave", "INPUT:text", "Send", page.eval(fmt.Sprintf(`document.querySelector(%s).getAttribute("aria-label")`, jsString(marker(post)))),
		"Grandmother's bicycle, barely used, with a basket"}
	if order := focusOrder(t, page.ctx, len(want)); !slices.Equal(order, want) {
		t.Fatalf("the joined page's focus order from the wall %q, want %q", order, want)
	}
	page.noProblems()
}
