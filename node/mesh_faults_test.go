package node

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	dht "github.com/libp2p/go-libp2p-kad-dht"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/cmdlog"
	"github.com/agentmesh/mesh/internal/testkit"
	"github.com/agentmesh/mesh/p2p"
	"github.com/agentmesh/mesh/registryapi"
)

// restart restarts a node on the same data directory and, for a
// bootstrap, the same libp2p address, so that peers find it again.
func (m *mesh) restart(n *Node) *Node {
	m.t.Helper()
	return m.start(m.stop(n))
}

// stop closes n and returns the config that starts it again, on its
// address and with its data.
func (m *mesh) stop(n *Node) Config {
	m.t.Helper()
	cfg := n.cfg
	cfg.PublicURL = ""
	cfg.Listen = []string{strings.Split(n.P2PAddrs()[0], "/p2p/")[0]}
	if err := n.Close(); err != nil {
		m.t.Fatal(err)
	}
	return cfg
}

func TestMeshNodeRestartCatchesUp(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	b := m.join()
	m.register(b, "before", identity.GenerateKey())
	cfg := b.cfg
	cfg.PublicURL = ""
	b.Close()
	// Changes made while b is down.
	m.register(m.boot, "while-down", identity.GenerateKey())
	b2 := m.start(cfg)
	m.waitCaughtUp(b2)
	for _, id := range []string{"before", "while-down"} {
		if st, v := call(t, b2, "GET", "/v1/agents/"+id, ""); st != 200 {
			t.Fatalf("%s after restart: %d %v", id, st, v)
		}
	}
}

func TestMeshWithoutDirectory(t *testing.T) {
	t.Parallel()
	testkit.Slow(t, "a directory stopped and restarted, waiting out the replica's catch-up")
	m := newMesh(t)
	b := m.join()
	key := identity.GenerateKey()
	apiKey := m.register(b, "survivor", key)
	tok := m.token(b, "survivor", apiKey)
	bootCfg := m.boot.cfg
	bootAddr := strings.Split(m.boot.P2PAddrs()[0], "/p2p/")[0]
	m.boot.Close()
	testkit.Eventually(t, 10*time.Second, func() bool { return !b.host.Connected(b.view.directory()) }, "b still sees the directory")

	// Reads are served from the local index.
	if st, v := call(t, b, "GET", "/v1/agents/survivor", ""); st != 200 {
		t.Fatalf("read without directory: %d %v", st, v)
	}
	// Writes get a clear 503 (at once: BenchmarkWriteWithoutDirectory).
	st, v := call(t, b, "POST", "/v1/agents/me/heartbeat", "", "Authorization", "Bearer "+tok)
	if st != 503 || v["code"] != "directory_unavailable" {
		t.Fatalf("write without directory: %d %v", st, v)
	}
	if st, h := call(t, b, "GET", "/health", ""); st != 200 || h["status"] != "degraded" || h["directory"].(map[string]any)["connected"] != false {
		t.Fatalf("health does not show the lost directory: %d %v", st, h)
	}
	// Once the replica knows it cannot catch up, an agent it lacks is not
	// waited for: no DHT server is left to ask, nor the directory.
	testkit.Eventually(t, 15*time.Second, func() bool {
		_, h := call(t, b, "GET", "/health", "")
		return h["directory"].(map[string]any)["caught_up"] == false
	}, "b still believes it is caught up")

	if st, _ := call(t, b, "GET", "/v1/agents/unknown", ""); st != 404 {
		t.Fatalf("unknown agent without directory: %d", st)
	}

	// The directory restarts with its data: nothing acknowledged is lost,
	// and b reconnects by itself.
	bootCfg.PublicURL = ""
	bootCfg.Listen = []string{bootAddr}
	m.boot = m.start(bootCfg)
	if st, _ := call(t, m.boot, "GET", "/v1/agents/survivor", ""); st != 200 {
		t.Fatal("the directory lost an acknowledged registration")
	}
	if _, h := call(t, m.boot, "GET", "/health", ""); h["status"] != "ok" {
		t.Fatalf("the directory's health: %v", h)
	}
	testkit.Eventually(t, 20*time.Second, func() bool {
		st, _ := call(t, b, "POST", "/v1/agents/me/heartbeat", "", "Authorization", "Bearer "+tok)
		return st == 200
	}, "writes through b did not recover after the directory restarted")

}

// TestMeshDHTFallback: a node that cannot reach the directory finds
// agents in the DHT, as the directory published them: live agents with
// their records, deleted agents not at all, and an id registered again by
// another key with the new key, whatever the old key's clock said. A DHT
// server that missed a tombstone under a did still holds the former
// owner's record there: the did:mesh alias of that did names nobody, and
// never the id's new owner.
func TestMeshDHTFallback(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	// A DHT server node besides the bootstrap keeps records when it is gone.
	cfg := m.config(t.TempDir(), RoleNode)
	cfg.DHTServer = true
	server := m.start(cfg)
	m.waitCaughtUp(server)
	key := identity.GenerateKey()
	m.register(server, "in-dht", key)
	did := identity.DIDFromPublicKey(key.Public().(ed25519.PublicKey))
	m.deleteAgent(server, "deleted", m.register(server, "deleted", identity.GenerateKey()))
	// The first owner of "reused" signed with a clock a minute ahead: its
	// signing time is later than the second owner's.
	first, second := identity.GenerateKey(), identity.GenerateKey()
	firstDID := identity.DIDFromPublicKey(first.Public().(ed25519.PublicKey))
	firstAPIKey := m.registerAt(server, "reused", first, m.clock.Now().Add(time.Minute))
	testkit.Eventually(t, 10*time.Second, func() bool {
		live, err1 := localRecord(server, "in-dht")
		gone, err2 := localRecord(server, "deleted")
		reused, err3 := localRecord(server, "reused")
		byDID, err4 := localRecordAt(server, registryapi.DIDRecordKey(did))
		byFirst, err5 := localRecordAt(server, registryapi.DIDRecordKey(firstDID))
		return errors.Join(err1, err2, err3, err4, err5) == nil && live.DID == did && gone.Deleted && reused.DID == firstDID &&
			byDID.AgentID == "in-dht" && byFirst.AgentID == "reused" && !byFirst.Deleted
	}, "the DHT server never got the directory's records")

	// The server is away while the first owner deletes "reused" and the
	// second registers it: of the values put meanwhile, it is given the
	// id's and the second owner's did's, not the tombstone under the first
	// owner's did.
	serverCfg := m.stop(server)
	m.deleteAgent(m.boot, "reused", firstAPIKey)
	m.register(m.boot, "reused", second)
	secondDID := identity.DIDFromPublicKey(second.Public().(ed25519.PublicKey))
	missed := map[string][]byte{registryapi.IDRecordKey("reused"): nil, registryapi.DIDRecordKey(secondDID): nil}
	testkit.Eventually(t, 10*time.Second, func() bool {
		for k := range missed {
			rec, err := localRecordAt(m.boot, k)
			if err != nil || rec.DID != secondDID {
				return false
			}
			missed[k], _ = m.boot.host.LocalValue(context.Background(), k)
		}
		return true
	}, "the directory never published the second owner's record")
	bootAddrs := m.boot.P2PAddrs()
	m.boot.Close()
	server = m.start(serverCfg)
	for k, v := range missed {
		if err := server.host.PutValue(context.Background(), k, v); err != nil && !errors.Is(err, p2p.ErrNoPeer) {
			t.Fatalf("put %s on the DHT server: %v", k, err)
		}
	}
	if rec, err := localRecordAt(server, registryapi.DIDRecordKey(firstDID)); err != nil || rec.Deleted {
		t.Fatalf("the DHT server's record under the first owner's did: %+v %v, want the first owner's", rec, err)
	}

	// A newcomer that can reach only the DHT server: its replica is empty
	// and cannot catch up, so reads fall back to the DHT.
	late := testConfig(t, t.TempDir())
	late.Role = RoleNode
	late.Now = m.clock.Now
	late.Bootstrap = append(bootAddrs, server.P2PAddrs()...)
	n := m.start(late)
	var v map[string]any
	testkit.Eventually(t, 10*time.Second, func() bool {
		var st int
		st, v = call(t, n, "GET", "/v1/agents/in-dht", "")
		return st == 200
	}, "agent not found through the DHT")

	if v["did"] != did || v["endpoint"] != "https://in-dht.example" {
		t.Fatalf("agent from the DHT: %v", v)
	}
	if st, v := call(t, n, "GET", "/v1/agents/in-dht/identity", ""); st != 200 || v["did"] != did {
		t.Fatalf("identity from the DHT: %d %v", st, v)
	}
	for _, path := range []string{"/v1/agents/deleted", "/v1/agents/deleted/identity", "/v1/agents/never-registered"} {
		if st, v := call(t, n, "GET", path, ""); st != 404 {
			t.Fatalf("%s: %d %v", path, st, v)
		}
	}
	if st, v := call(t, n, "GET", "/v1/agents/reused", ""); st != 200 || v["did"] != secondDID {
		t.Fatalf("an id registered again: %d %v, want the second owner %s", st, v, secondDID)
	}
	// did:mesh aliases resolve through the records under the dids, and
	// answer only with the record of that did: the first owner's record
	// names "reused", which is the second owner's now.
	firstAlias := registryapi.AliasOf(firstDID)
	for alias, want := range map[string]string{registryapi.AliasOf(did): "in-dht", registryapi.AliasOf(secondDID): "reused",
		firstAlias: "", aliasOf(identity.GenerateKey()): ""} {
		for _, path := range []string{"/v1/agents/" + alias, "/v1/agents/" + alias + "/identity", "/agent/" + alias} {
			st, v := call(t, n, "GET", path, "", "Accept", "application/json")
			if want == "" && (st != 404 || v["code"] != "agent_not_found") || want != "" && (st != 200 || v["agent_id"] != want) {
				t.Fatalf("%s through the DHT: %d %v, want %q", path, st, v, want)
			}
		}
	}
}

// TestMeshDHTRecordsSurviveBootstrapRestart: in the default mesh the
// bootstrap is the DHT's only server; its records are there after it
// restarts (kept in DATA/dht, and published again when it starts).
func TestMeshDHTRecordsSurviveBootstrapRestart(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	b := m.join()
	m.register(b, "durable", identity.GenerateKey())
	inDHT := func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		a, err := b.LookupDHT(ctx, "durable")
		return err == nil && a.ID == "durable"
	}
	testkit.Eventually(t, 10*time.Second, inDHT, "record never in the DHT")
	m.boot = m.restart(m.boot)
	testkit.Eventually(t, 30*time.Second, inDHT, "record lost when the bootstrap restarted")
}

// TestMeshNewDHTServerGetsRecords: a DHT server that joins a small DHT
// is handed the records published before it came.
func TestMeshNewDHTServerGetsRecords(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	m.register(m.boot, "early", identity.GenerateKey())
	waitPuts(t, m.boot, 2) // stored by the bootstrap alone
	cfg := m.config(t.TempDir(), RoleNode)
	cfg.DHTServer = true
	server := m.start(cfg)
	testkit.Eventually(t, 20*time.Second, func() bool { _, err := localRecord(server, "early"); return err == nil },
		"the new DHT server never got the record published before it joined")

}

// TestMeshRejectsForgedGossip: a peer that is not the directory publishes
// on the directory's topics; its messages are dropped and counted.
func TestMeshRejectsForgedGossip(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	b := m.join()
	m.register(b, "applied", identity.GenerateKey())
	rogue := bareHost(t, b)
	forged := `{"seq":` + "1" + `,"at":1,"kind":"agents","op":{"register":{"agent_id":"forged","capabilities":[],"api_key_hash":"x"}}}`
	for name, msgs := range map[string][]string{
		// Three: a fourth invalid message would find the rogue graylisted.
		legacyDirectoryTopic: {forged, strings.Repeat("x", 300<<10)},
		directoryTopic:       {`{"entries":[` + forged + `]}`},
	} {
		topic, err := rogue.Join(name, p2p.TopicConfig{})
		if err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, 10*time.Second, func() bool { return len(topic.Peers()) > 0 }, "rogue never saw subscribers of %s", name)
		for _, msg := range msgs {
			topic.Publish(context.Background(), []byte(msg))
		}
	}
	testkit.Eventually(t, 10*time.Second, func() bool {
		return metric(t, b, `mesh_p2p_dropped_total{reason="invalid",surface="topic"}`) >= 2 &&
			metric(t, b, `mesh_p2p_dropped_total{reason="too_large",surface="topic"}`) >= 1
	}, "forged messages not counted: invalid %d, too large %d", b.dirTopics.Dropped(p2p.DropInvalid), b.dirTopics.Dropped(p2p.DropTooLarge))

	if st, _ := call(t, b, "GET", "/v1/agents/forged", ""); st != 404 {
		t.Fatal("a forged directory change was applied")
	}
	// A change from the directory that the node already applied (a replay,
	// or gossip late behind the catch-up) is ignored and counted.
	applied, _ := json.Marshal(cmdlog.Entry{Seq: b.clog.Seq(), Kind: registryapi.Kind, Op: json.RawMessage(`{}`)})
	for data, decode := range map[string]decoder{string(applied): decodeEntry, `{"entries":[` + string(applied) + `]}`: decodeBatch} {
		if _, err := b.validateChanges(b.view.isDirectoryPeer, decode, true)(b.view.directory(), []byte(data)); !errors.Is(err, p2p.ErrReplay) {
			t.Fatalf("an applied change %s: %v, want ErrReplay", data, err)
		}
	}
}

// TestMeshBlamesNoRelayBeforeItKnowsTheDirectory: a node that has not
// heard yet who runs the directory (it joined through a peer that is not
// the directory, as a node joining a quorum through a follower is until
// its first catch-up answers) gets the directory's changes relayed; it
// drops them as ignored, not invalid, and scores the relaying peer no
// lower: gossipsub graylists a peer that relays three invalid messages,
// for minutes after ten.
func TestMeshBlamesNoRelayBeforeItKnowsTheDirectory(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	relay := bareHost(t, m.boot)
	topic, err := relay.Join(directoryTopic, p2p.TopicConfig{}) // relays what the directory publishes
	if err != nil {
		t.Fatal(err)
	}
	cfg := m.config(t.TempDir(), RoleNode)
	cfg.Bootstrap = relay.Addrs() // serves no change feed: the node never hears who runs the directory
	n := m.start(cfg)
	testkit.Eventually(t, 10*time.Second, func() bool { return len(topic.Peers()) == 2 }, "the relay is not between the directory and the node")
	dropped := func() float64 {
		return metric(t, n, `mesh_p2p_dropped_total{reason="ignored",surface="topic"}`) +
			metric(t, n, `mesh_p2p_dropped_total{reason="invalid",surface="topic"}`)
	}
	for i := 0; dropped() < 3; i++ {
		if i == 100 {
			t.Fatalf("the node got %v of the directory's changes", dropped())
		}
		m.register(m.boot, "relayed-"+strconv.Itoa(i), identity.GenerateKey())
	}
	if v := metric(t, n, `mesh_p2p_dropped_total{reason="invalid",surface="topic"}`); v != 0 {
		t.Fatalf("%v directory changes counted invalid (their relay scored down) before the node knew who runs the directory", v)
	}
}

// permissive is a DHT validator that accepts anything: what a malicious
// peer runs to put forged records.
type permissive struct{}

func (permissive) Validate(string, []byte) error        { return nil }
func (permissive) Select(string, [][]byte) (int, error) { return 0, nil }

// TestMeshRefusesForgedDHTRecords: a raw libp2p peer whose DHT validates
// nothing puts forged and mutated records straight to a mesh DHT server;
// the server refuses each one, counts it, and keeps the genuine record.
func TestMeshRefusesForgedDHTRecords(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	key := identity.GenerateKey()
	m.register(m.boot, "victim", key)
	var genuine []byte
	testkit.Eventually(t, 10*time.Second, func() bool {
		var err error
		genuine, err = m.boot.host.LocalValue(context.Background(), registryapi.IDRecordKey("victim"))
		return err == nil
	}, "the directory never stored the record")

	raw, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	d, err := dht.New(raw, dht.ProtocolPrefix(p2p.ProtocolPrefix), dht.Mode(dht.ModeClient),
		dht.Validator(permissive{}), dht.DisableProviders())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	infos, _ := p2p.ParseAddrs(m.boot.P2PAddrs())
	if err := raw.Connect(context.Background(), infos[0]); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return d.RoutingTable().Size() > 0 }, "the raw peer never saw the DHT server")

	mutate := func(f func(r map[string]any)) []byte {
		var r map[string]any
		json.Unmarshal(genuine, &r)
		f(r)
		b, _ := json.Marshal(r)
		return b
	}
	// Signed correctly by the agent, attested by another directory.
	_, otherDirectory, err := registryapi.NewRecord(signedRegistration(key, "victim", "https://evil.example"), 1000, identity.GenerateKey(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	forged := map[string][]byte{
		"another directory": otherDirectory,
		// Attested by our directory, then changed.
		"mutated endpoint": mutate(func(r map[string]any) {
			q := r["request"].(map[string]any)
			q["body"] = strings.Replace(q["body"].(string), "victim.example", "evil.example", 1)
		}),
		"mutated seq":      mutate(func(r map[string]any) { r["seq"] = 1000.0 }),
		"made a tombstone": mutate(func(r map[string]any) { r["deleted"] = true; delete(r, "request") }),
		"not a record":     []byte("junk"),
	}
	const dropped = `mesh_p2p_dropped_total{reason="invalid",surface="dht"}`
	for name, val := range forged {
		before := metric(t, m.boot, dropped)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := d.PutValue(ctx, registryapi.IDRecordKey("victim"), val); err != nil {
			t.Fatalf("%s: the raw peer's put: %v", name, err)
		}
		cancel()
		testkit.Eventually(t, 10*time.Second, func() bool { return metric(t, m.boot, dropped) > before }, "%s: not counted", name)
		if got, err := m.boot.host.LocalValue(context.Background(), registryapi.IDRecordKey("victim")); err != nil || string(got) != string(genuine) {
			t.Fatalf("%s: the server's record changed: %s %v", name, got, err)
		}
	}
	if st, v := call(t, m.boot, "GET", "/v1/agents/victim", ""); st != 200 || v["endpoint"] != "https://victim.example" {
		t.Fatalf("after the forgeries: %d %v", st, v)
	}
}

// signedRegistration is a register request for id signed by key.
func signedRegistration(key ed25519.PrivateKey, id, endpoint string) registryapi.Signed {
	body, _ := json.Marshal(map[string]any{"agent_id": id, "capabilities": []string{"echo"}, "endpoint": endpoint,
		"pubkey": identity.EncodePublicKey(key.Public().(ed25519.PublicKey))})
	return registryapi.Signed{Method: "POST", Path: "/v1/agents/register", Body: string(body),
		MeshSig: identity.Sign(key, "POST", "/v1/agents/register", body, time.Now())}
}
