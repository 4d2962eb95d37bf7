package wall

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/agentmesh/mesh/identity"
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
	h := newHarness(t, nil)
	pub := h.create(`{"visibility":"public"}`)
	priv := h.create(`{}`)
	pubID, pubTok := pub["cluster_id"].(string), pub["token"].(string)
	privID, privTok := priv["cluster_id"].(string), priv["token"].(string)
	for _, cl := range []struct{ id, tok string }{{pubID, pubTok}, {privID, privTok}} {
		c := h.dial(cl.id, vals("agent", "ann", "vis", VisPrivate, "token", cl.tok)).listen()
		c.next(KindWelcome)
		eventually(t, func() bool { return len(h.historyOf(cl.id, cl.tok)) == 1 }, "ann's join never recorded")
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
	// Registered at the rendezvous, the peer plausibly serves the public
	// cluster; the private one wants the member key's signature.
	if _, err := raw.Rendezvous(ctx, topicName(pubID), true); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Rendezvous(ctx, topicName(privID), true); err != nil {
		t.Fatal(err)
	}
	if appendN(privID, 1, "") == nil {
		t.Fatal("an unsigned append to a private cluster was taken")
	}
	if err := appendN(privID, 1, privTok); err != nil {
		t.Fatalf("a signed append to a private cluster: %v", err)
	}
	for range 5 {
		if err := appendN(pubID, historyBatch, ""); err != nil {
			t.Fatalf("append from a registered peer: %v", err)
		}
	}
	events := h.historyOf(pubID, pubTok)
	if n := len(events) - 1; n < historyBurst || n > historyBurst+historyRate*5 {
		t.Fatalf("%d forged events taken from one peer, want about %d (the burst)", n, historyBurst)
	}
	if last := events[len(events)-1]; last["agent"] != "ann" {
		t.Fatalf("the real event was pushed out: %v", last)
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

// eventually polls cond until it holds, for up to 10 s.
func eventually(t *testing.T, cond func() bool, msg string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal(msg)
		}
	}
}

// TestLobbyKeepsNoHistory: the lobby has no owner to read a history, so
// its joins and leaves are not recorded.
func TestLobbyKeepsNoHistory(t *testing.T) {
	h := newHarness(t, nil)
	cl := h.create(`{"visibility":"public"}`)
	lobby := h.dial(LobbyID, vals("agent", "visitor")).listen()
	lobby.next(KindWelcome)
	lobby.conn.Close(websocket.StatusNormalClosure, "")
	// Events are reported in order: once a later one is in, the lobby's
	// would be too.
	h.dial(cl["cluster_id"].(string), vals("agent", "later")).listen().next(KindWelcome)
	eventually(t, func() bool { return len(h.historyOf(cl["cluster_id"].(string), cl["token"].(string))) == 1 }, "the later join never recorded")
	if events, err := h.svc.readEvents(LobbyID, historyKeep); err != nil || len(events) != 0 {
		t.Fatalf("the lobby's history: %v, %v", events, err)
	}
}
