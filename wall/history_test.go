package wall

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/testkit"
	"github.com/agentmesh/mesh/p2p"
)

// rawPeer is a libp2p host of no node, connected to h: what any peer of
// the mesh can do.
func rawPeer(t *testing.T, h *harness) *p2p.Host {
	t.Helper()
	at := peer.AddrInfo{ID: h.host.ID(), Addrs: h.host.Libp2p().Addrs()}
	raw, err := p2p.New(p2p.Config{Key: identity.GenerateKey(), Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Bootstrap: []peer.AddrInfo{at}})
	if err != nil {
		t.Fatal(err)
	}
	if err := raw.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := raw.Connect(ctx, at); err != nil {
		t.Fatal(err)
	}
	return raw
}

func (h *harness) historyOf(id, token string) []map[string]any {
	h.t.Helper()
	st, v := h.call("GET", "/v1/clusters/"+id+"/history?limit=1000", "", "X-Cluster-Token", token)
	if st != 200 {
		h.t.Fatalf("history: %d %v", st, v)
	}
	var out []map[string]any
	for _, e := range v["events"].([]any) {
		out = append(out, e.(map[string]any))
	}
	return out
}

// TestHistoryStreamAuth: the directory's history stream serves reads only
// to a node proving it holds the member token, and takes appends only from
// nodes that serve the cluster, at a bounded rate.
func TestHistoryStreamAuth(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	pub := h.create(`{"visibility":"public"}`)
	priv := h.create(`{}`)
	pubID, pubTok := pub["cluster_id"].(string), pub["token"].(string)
	privID, privTok := priv["cluster_id"].(string), priv["token"].(string)
	for _, cl := range []struct{ id, tok string }{{pubID, pubTok}, {privID, privTok}} {
		c := h.dial(cl.id, vals("agent", "ann", "vis", VisPrivate, "token", cl.tok)).listen()
		c.next(KindWelcome)
		testkit.Eventually(t, 10*time.Second, func() bool { return len(h.historyOf(cl.id, cl.tok)) == 1 }, "ann's join never recorded")
	}

	raw := rawPeer(t, h)
	ctx := context.Background()
	ask := func(q historyRequest) ([]byte, error) {
		b, _ := json.Marshal(q)
		return raw.Request(ctx, h.host.ID(), historyProto, b, maxHistoryResp)
	}
	now := time.Now()
	read := func(id string) historyRequest { return historyRequest{Op: historyRead, Cluster: id, Limit: 10} }
	signed := func(q historyRequest, token string, node peer.ID, at time.Time) historyRequest {
		q.sign(memberKey(q.Cluster, token), node, at)
		return q
	}
	for name, q := range map[string]historyRequest{
		"unsigned":                read(pubID),
		"signed by another key":   signed(read(pubID), newSecret(tokenPrefix), raw.ID(), now),
		"signed for another node": signed(read(pubID), pubTok, h.host.ID(), now),
		"signed long ago":         signed(read(pubID), pubTok, raw.ID(), now.Add(-time.Hour)),
		"another cluster's key":   signed(read(privID), pubTok, raw.ID(), now),
		"the lobby":               read(LobbyID),
	} {
		if resp, err := ask(q); err == nil {
			t.Errorf("read %s: answered %q", name, resp)
		}
	}
	if resp, err := ask(signed(read(pubID), pubTok, raw.ID(), now)); err != nil {
		t.Fatalf("a token holder's read: %v", err)
	} else if ev := mustEvents(t, resp); len(ev) != 1 {
		t.Fatalf("a token holder read %d events, want ann's join", len(ev))
	}

	forged := encodeWire(nil, sealHistory, eventBody{Event: "join", Agent: "mallory", Vis: VisPublic})
	appendN := func(id string, n int, token string) error {
		q := historyRequest{Op: historyAppend, Cluster: id}
		for range n {
			q.Events = append(q.Events, forged)
		}
		if token != "" {
			q = signed(q, token, raw.ID(), time.Now())
		}
		_, err := ask(q)
		return err
	}
	if appendN(pubID, 1, "") == nil || appendN(LobbyID, 1, "") == nil {
		t.Fatal("an append from a peer that serves no cluster was taken")
	}
	// Registered at the rendezvous, the peer still serves neither: issue
	// 19's forgery (a fresh identity registered under the public cluster's
	// topic appending invented joins) is refused. The private cluster
	// wants the member key's signature.
	if _, err := raw.Rendezvous(ctx, topicName(pubID), true); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Rendezvous(ctx, topicName(privID), true); err != nil {
		t.Fatal(err)
	}
	if appendN(pubID, 1, "") == nil {
		t.Fatal("an append from a peer registered at the rendezvous, which runs no room, was taken")
	}
	if appendN(privID, 1, "") == nil {
		t.Fatal("an unsigned append to a private cluster was taken")
	}
	if err := appendN(privID, 1, privTok); err != nil {
		t.Fatalf("a signed append to a private cluster: %v", err)
	}
	if events := h.historyOf(pubID, pubTok); len(events) != 1 || events[0]["agent"] != "ann" {
		t.Fatalf("the public history holds %v, want ann's join alone", events)
	}
}

// servingPeer is a raw peer that answers roster peeks of cluster id with
// members: a node that runs a room for the cluster, as far as anyone can
// tell (it may make its members up, as a client picks its handles).
func servingPeer(t *testing.T, h *harness, id string, members ...string) (*p2p.Host, func([]eventBody) error) {
	t.Helper()
	raw := rawPeer(t, h)
	ro := roster{Epoch: 1, Rev: 1}
	for _, m := range members {
		ro.Members = append(ro.Members, member{Agent: m, Vis: VisPublic})
	}
	raw.HandleRequests(rosterProto, maxRosterReq, func(_ context.Context, _ peer.ID, req []byte) ([]byte, error) {
		return encodeWire(nil, sealRosterResp, ro), nil
	})
	send := func(events []eventBody) error {
		q := historyRequest{Op: historyAppend, Cluster: id}
		for _, e := range events {
			q.Events = append(q.Events, encodeWire(nil, sealHistory, e))
		}
		b, _ := json.Marshal(q)
		_, err := raw.Request(context.Background(), h.host.ID(), historyProto, b, 64)
		return err
	}
	return raw, send
}

// TestHistoryTakesOnlyANodesOwnSockets: a node that serves a public
// cluster appends joins of the members its roster lists (or of a visit
// that ended within the batch) and leaves of the joins it appended; events
// about anyone else are dropped.
func TestHistoryTakesOnlyANodesOwnSockets(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	cl := h.create(`{"visibility":"public"}`)
	id, tok := cl["cluster_id"].(string), cl["token"].(string)
	raw, send := servingPeer(t, h, id, "mallory")
	ev := func(event, agent string) eventBody { return eventBody{Event: event, Agent: agent, Vis: VisPublic} }
	for _, batch := range [][]eventBody{
		{ev("join", "mallory"), ev("join", "eve")}, // eve is not its socket
		{ev("leave", "zed")},                       // never joined there
		{ev("join", "visit"), ev("leave", "visit")},
		{ev("leave", "mallory"), ev("leave", "mallory")}, // one join, one leave
	} {
		if err := send(batch); err != nil {
			t.Fatalf("append %v: %v", batch, err)
		}
	}
	var got []string
	for _, e := range h.historyOf(id, tok) {
		if e["node"] != raw.ID().String() {
			t.Fatalf("event %v names node %v", e, e["node"])
		}
		got = append([]string{e["event"].(string) + " " + e["agent"].(string)}, got...)
	}
	if want := []string{"join mallory", "join visit", "leave visit", "leave mallory"}; !slices.Equal(got, want) {
		t.Fatalf("history %v, want %v", got, want)
	}
}

// TestHistoryShares: when the window is full, an append evicts the oldest
// event of the node that holds the most; so a node flooding the history
// evicts its own events, never those of a node holding fewer.
func TestHistoryShares(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	cl := h.create(`{"visibility":"public"}`)
	id, tok := cl["cluster_id"].(string), cl["token"].(string)
	// appendAll appends n joins of node, agents prefix0 on, in batches as
	// nodes send them.
	appendAll := func(node peer.ID, prefix string, n int) {
		for i := 0; i < n; i += historyBatch {
			var bodies [][]byte
			for j := i; j < min(n, i+historyBatch); j++ {
				bodies = append(bodies, encodeWire(nil, sealHistory, eventBody{Event: "join", Agent: fmt.Sprint(prefix, j), Vis: VisPublic}))
			}
			if err := h.svc.storeEvents(id, node, bodies); err != nil {
				t.Fatal(err)
			}
		}
	}
	quiet, loud := peer.ID("quiet-node"), peer.ID("loud-node")
	appendAll(quiet, "q", 30)
	appendAll(loud, "l", 3*historyKeep)
	count := map[string]int{}
	events := h.historyOf(id, tok)
	for _, e := range events {
		count[e["node"].(string)]++
	}
	if len(events) != historyKeep || count[quiet.String()] != 30 || count[loud.String()] != historyKeep-30 {
		t.Fatalf("%d events kept: %v; want the quiet node's 30 and the rest the loud node's newest", len(events), count)
	}
	if events[0]["agent"] != fmt.Sprint("l", 3*historyKeep-1) {
		t.Fatalf("the newest event is %v", events[0])
	}
	// A third node joins the flood: the two loud ones end at half the
	// window each, less what the quiet one holds.
	louder := peer.ID("louder-node")
	appendAll(louder, "m", 2*historyKeep)
	clear(count)
	for _, e := range h.historyOf(id, tok) {
		count[e["node"].(string)]++
	}
	if count[quiet.String()] != 30 || count[loud.String()] != (historyKeep-30)/2 || count[louder.String()] != historyKeep-30-(historyKeep-30)/2 {
		t.Fatalf("shares %v", count)
	}
}

func mustEvents(t *testing.T, raw []byte) []storedEvent {
	t.Helper()
	var resp historyResponse
	if err := json.Unmarshal(raw, &resp); err != nil {
		t.Fatal(err)
	}
	return resp.Events
}

// TestLobbyKeepsNoHistory: the lobby has no owner to read a history, so
// its joins and leaves are not recorded.
func TestLobbyKeepsNoHistory(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	cl := h.create(`{"visibility":"public"}`)
	lobby := h.dial(LobbyID, vals("agent", "visitor")).listen()
	lobby.next(KindWelcome)
	lobby.conn.Close(websocket.StatusNormalClosure, "")
	// Events are reported in order: once a later one is in, the lobby's
	// would be too.
	h.dial(cl["cluster_id"].(string), vals("agent", "later")).listen().next(KindWelcome)
	testkit.Eventually(t, 10*time.Second, func() bool { return len(h.historyOf(cl["cluster_id"].(string), cl["token"].(string))) == 1 }, "the later join never recorded")
	if events, err := h.svc.readEvents(LobbyID, historyKeep); err != nil || len(events) != 0 {
		t.Fatalf("the lobby's history: %v, %v", events, err)
	}
}

// TestPendingJoinsAnswerPeeks: a node whose room closed before the
// directory, checking a join it was sent, peeked at its roster answers
// the member whose join is on its way, and nothing once it is answered.
func TestPendingJoinsAnswerPeeks(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	id := h.create(`{"visibility":"public"}`)["cluster_id"].(string)
	other := newHarness(t, nil)
	at := peer.AddrInfo{ID: h.host.ID(), Addrs: h.host.Libp2p().Addrs()}
	if err := other.host.Connect(context.Background(), at); err != nil {
		t.Fatal(err)
	}
	peek := func() (roster, error) {
		return other.svc.askRoster(context.Background(), h.host.ID(), id, nil, roster{}, true)
	}
	if _, err := peek(); err == nil {
		t.Fatal("a node with no room and no pending join answered a roster")
	}
	e := pendingEvent{cluster: id, join: &member{Agent: "quick", Vis: VisPublic}}
	h.svc.joins.add(id, *e.join, 1)
	if ro, err := peek(); err != nil || len(ro.Members) != 1 || ro.Members[0].Agent != "quick" {
		t.Fatalf("peek with a join pending: %+v %v", ro, err)
	}
	h.svc.joins.done(e)
	if _, err := peek(); err == nil {
		t.Fatal("a join answered by the directory is still answered")
	}
}
