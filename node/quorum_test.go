package node

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/testkit"
	"github.com/agentmesh/mesh/p2p"
	"github.com/agentmesh/mesh/registryapi"
)

// quorumMesh is a quorum of bootstrap nodes on loopback in this process,
// plus ordinary nodes.
type quorumMesh struct {
	*mesh
	members []*Node
	cfgs    []Config
	addrs   []string // the members' full multiaddrs (the --quorum list)
}

// newQuorumMesh starts size members of a new quorum, tweak (if set)
// editing each one's config, and waits for a leader.
func newQuorumMesh(t *testing.T, size int, tweak func(i int, c *Config)) *quorumMesh {
	t.Helper()
	q := &quorumMesh{mesh: &mesh{t: t, clock: newTestClock()}}
	keys := make([]ed25519.PrivateKey, size)
	for i := range keys {
		keys[i] = identity.GenerateKey()
		id, _ := p2p.PeerID(keys[i].Public().(ed25519.PublicKey))
		q.addrs = append(q.addrs, "/ip4/127.0.0.1/tcp/"+strconv.Itoa(testkit.Port(t))+"/p2p/"+id.String())
	}
	for i := range size {
		cfg := testConfig(t, t.TempDir())
		cfg.Role, cfg.Now, cfg.Key = RoleBootstrap, q.clock.Now, keys[i]
		// Raft's own timings (DefaultRaftTimings): with 250 ms timeouts, a
		// vote's round trip under -race on a loaded machine outlasted the
		// election timeout, and the quorum went seconds without a leader.
		cfg.Quorum = q.addrs
		cfg.Listen = []string{q.addrs[i][:len(q.addrs[i])-len("/p2p/")-len(q.peerID(i))]}
		cfg.ForwardRetry = 20 * time.Millisecond
		if tweak != nil {
			tweak(i, &cfg)
		}
		q.cfgs = append(q.cfgs, cfg)
		q.members = append(q.members, startNode(t, cfg))
	}
	q.boot = q.leader()
	return q
}

func (q *quorumMesh) peerID(i int) string {
	a := q.addrs[i]
	return a[len(a)-len("12D3KooW")-44:]
}

// leader waits for a member to lead, and returns it.
func (q *quorumMesh) leader() *Node {
	q.t.Helper()
	var l *Node
	testkit.Eventually(q.t, 10*time.Second, func() bool {
		for _, m := range q.members {
			if m != nil && m.quorum.IsLeader() {
				l = m
				return true
			}
		}
		return false
	}, "no member leads the quorum")

	return l
}

// follower is a member that does not lead.
func (q *quorumMesh) follower() *Node {
	l := q.leader()
	for _, m := range q.members {
		if m != nil && m != l {
			return m
		}
	}
	q.t.Fatal("no follower")
	return nil
}

// join starts an ordinary node that knows only the given members.
func (q *quorumMesh) join(members ...int) *Node {
	q.t.Helper()
	cfg := testConfig(q.t, q.t.TempDir())
	cfg.Role, cfg.Now, cfg.ForwardRetry = RoleNode, q.clock.Now, 20*time.Millisecond
	cfg.ForwardTimeout = q.cfgs[0].ForwardTimeout
	for _, i := range members {
		cfg.Bootstrap = append(cfg.Bootstrap, q.addrs[i])
	}
	n := startNode(q.t, cfg)
	q.waitSame(n)
	return n
}

// waitSame waits until every node given holds the leader's log.
func (q *quorumMesh) waitSame(nodes ...*Node) {
	q.t.Helper()
	l := q.leader()
	for _, n := range nodes {
		if n == nil {
			continue
		}
		var d map[string]any
		if !testkit.Until(15*time.Second, func() bool {
			_, h := call(q.t, n, "GET", "/health", "")
			d = h["directory"].(map[string]any)
			return d["caught_up"] == true && n.clog.Seq() == l.clog.Seq()
		}) {
			q.t.Fatalf("node %s never caught up with the leader %s (seq %d, leader's %d; its directory: %v)", n.URL(), l.URL(), n.clog.Seq(), l.clog.Seq(), d)
		}

	}
}

func (q *quorumMesh) all(extra ...*Node) []*Node {
	var out []*Node
	for _, m := range q.members {
		if m != nil {
			out = append(out, m)
		}
	}
	return append(out, extra...)
}

// surface reads what a client sees of agents ids and cluster on n: the
// whole registry surface, for comparing nodes.
func surface(t *testing.T, n *Node, ids []string, clusters []string) string {
	t.Helper()
	out := ""
	for _, id := range ids {
		st, a := call(t, n, "GET", "/v1/agents/"+id, "")
		_, rep := call(t, n, "GET", "/v1/agents/"+id+"/reputation", "")
		_, ident := call(t, n, "GET", "/v1/agents/"+id+"/identity", "")
		out += fmt.Sprintf("%s %d %v %v %v\n", id, st, a, rep, ident)
	}
	for _, c := range clusters {
		st, v := call(t, n, "GET", "/v1/clusters/"+c, "")
		out += fmt.Sprintf("%s %d %v\n", c, st, v)
	}
	// Addresses in answers name the node asked.
	host := strings.TrimPrefix(n.URL(), "http://")
	return strings.ReplaceAll(out, host, "NODE")
}

func TestQuorumWritesThroughAnyNodeLandOnAll(t *testing.T) { // not parallel: its Raft elections run in real time, and its members' ports fixed
	q := newQuorumMesh(t, 3, nil)
	leader := q.leader()
	var follower *Node
	for _, m := range q.members {
		if m != leader {
			follower = m
		}
	}
	// An ordinary node that knows one member only, a follower: it finds
	// the leader itself.
	var fi int
	for i, m := range q.members {
		if m == follower {
			fi = i
		}
	}
	ord := q.join(fi)

	keys := map[string]ed25519.PrivateKey{}
	var ids []string
	for i, n := range []*Node{leader, follower, ord} {
		id := "agent-" + strconv.Itoa(i)
		keys[id] = identity.GenerateKey()
		q.register(n, id, keys[id])
		ids = append(ids, id)
	}
	// An unsigned registration, its token and a heartbeat, through the
	// ordinary node; feedback and a delete through the follower.
	st, v := call(t, ord, "POST", "/v1/agents/register", `{"agent_id":"plain","capabilities":["x"],"endpoint":"https://plain.example"}`)
	if st != 201 {
		t.Fatalf("unsigned register through an ordinary node: %d %v", st, v)
	}
	ids = append(ids, "plain")
	if n := metric(t, ord, `mesh_http_requests_total{code="201",route="POST /v1/agents/register"}`); n != 2 {
		t.Fatalf("the ordinary node counted %v registrations it forwarded under their route, want 2", n)
	}
	tok := q.token(ord, "plain", v["api_key"].(string))
	if st, v := call(t, ord, "POST", "/v1/agents/me/heartbeat", "", "Authorization", "Bearer "+tok); st != 200 {
		t.Fatalf("heartbeat through an ordinary node: %d %v", st, v)
	}
	fb := `{"success":true,"latency_ms":12}`
	if st, v := q.signedCall(follower, keys["agent-0"], "POST", "/v1/agents/agent-1/feedback", fb); st != 200 && st != 201 {
		t.Fatalf("feedback through a follower: %d %v", st, v)
	}
	gone := q.register(follower, "gone", identity.GenerateKey())
	q.deleteAgent(follower, "gone", gone)
	ids = append(ids, "gone")
	// A cluster made through the ordinary node and one through the follower.
	var clusters []string
	for _, n := range []*Node{ord, follower} {
		st, v := call(t, n, "POST", "/v1/clusters", `{"visibility":"public","name":"room"}`)
		if st != 201 {
			t.Fatalf("cluster through %s: %d %v", n.URL(), st, v)
		}
		clusters = append(clusters, v["cluster_id"].(string))
	}

	// A stale view (the node believes the follower leads): the follower
	// answers not_leader without applying anything, and the write goes
	// on to the leader.
	ord.view.mu.Lock()
	ord.view.leader = follower.PeerID()
	ord.view.mu.Unlock()
	q.register(ord, "after-stale-view", identity.GenerateKey())
	ids = append(ids, "after-stale-view")
	// The leader now, which a loaded machine may have changed meanwhile.
	if d, now := ord.view.directory(), q.leader().PeerID(); d != now {
		t.Fatalf("after not_leader the node forwards to %s, not the leader %s", d, now)
	}

	nodes := q.all(ord)
	q.waitSame(nodes...)
	// The heartbeat shows on every node (presence travels apart from the
	// log); the token verifies everywhere.
	for _, n := range nodes {
		testkit.Eventually(t, 15*time.Second, func() bool {
			_, a := call(t, n, "GET", "/v1/agents/plain", "")
			return a["online"] == true
		}, "%s never showed the heartbeat", n.URL())

	}
	want := surface(t, leader, ids, clusters)
	for _, n := range nodes {
		if got := surface(t, n, ids, clusters); got != want {
			t.Fatalf("%s differs from the leader:\n%s\nleader:\n%s", n.URL(), got, want)
		}
	}
	// /health names the same leader and members everywhere: the leader
	// now, which a loaded machine may have changed since the start.
	for _, n := range nodes {
		testkit.Eventually(t, 5*time.Second, func() bool {
			_, h := call(t, n, "GET", "/health", "")
			qv, _ := h["quorum"].(map[string]any)
			ms, _ := qv["members"].([]any)
			return qv != nil && qv["leader"] == q.leader().PeerID().String() && len(ms) == 3 && qv["lag"] == float64(0) &&
				ms[0].(map[string]any)["voter"] == true && h["status"] == "ok"
		}, "health of %s does not show the quorum", n.URL())

	}
	leader = q.leader()
	_, h := call(t, leader, "GET", "/health", "")
	if qv := h["quorum"].(map[string]any); qv["term"].(float64) < 1 || qv["commit_index"].(float64) < float64(leader.clog.Seq()) {
		t.Fatalf("leader's health: %v", qv)
	}
	if qv := h["quorum"].(map[string]any); qv["state"] != "Leader" {
		t.Fatalf("leader's state: %v", qv)
	}
}

// TestLateJoinersInstallASnapshot: a node that joins after the change log
// was compacted installs a snapshot of the directory and follows from its
// seq, through an ordinary node's change feed as through Raft.
func TestLateJoinersInstallASnapshot(t *testing.T) { // not parallel: its Raft elections run in real time, and its members' ports fixed
	q := newQuorumMesh(t, 3, func(_ int, c *Config) { c.Raft.TrailingLogs = 5 })
	leader := q.leader()
	var ids []string
	for i := range 30 {
		id := "early-" + strconv.Itoa(i)
		q.register(leader, id, identity.GenerateKey())
		ids = append(ids, id)
	}
	st, v := call(t, leader, "POST", "/v1/clusters", `{"visibility":"public","name":"early"}`)
	if st != 201 {
		t.Fatalf("cluster: %d %v", st, v)
	}
	clusters := []string{v["cluster_id"].(string)}
	q.waitSame(q.all()...)
	for _, m := range q.members {
		if err := m.quorum.Snapshot(); err != nil {
			t.Fatal(err)
		}
		if err := m.clog.Compact(3); err != nil {
			t.Fatal(err)
		}
	}
	ord := q.join(1)
	if ord.clog.First() <= 2 {
		t.Fatalf("the late node replayed the log from %d instead of installing a snapshot", ord.clog.First())
	}
	q.register(ord, "late", identity.GenerateKey())
	ids = append(ids, "late")
	q.waitSame(q.all(ord)...)
	want := surface(t, leader, ids, clusters)
	for _, n := range q.all(ord) {
		if got := surface(t, n, ids, clusters); got != want {
			t.Fatalf("%s differs from the leader:\n%s\nleader:\n%s", n.URL(), got, want)
		}
	}
}

// reissue re-signs a token's claims with key, issued at iat: what a member
// removed from the quorum could still sign.
func reissue(t *testing.T, tok string, key ed25519.PrivateKey, iat time.Time) string {
	t.Helper()
	parts := strings.Split(tok, ".")
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var c registryapi.TokenClaims
	json.Unmarshal(raw, &c)
	c.Iat, c.Exp = iat.Unix(), iat.Add(time.Hour).Unix()
	c.Iss = identity.DIDFromPublicKey(key.Public().(ed25519.PublicKey))
	b, _ := json.Marshal(c)
	signed := "mt1." + base64.RawURLEncoding.EncodeToString(b)
	return signed + "." + base64.RawURLEncoding.EncodeToString(ed25519.Sign(key, []byte(signed)))
}

// TestQuorumKeysOutliveAMember: tokens and DHT attestations signed by a
// member verify on every node whichever member signed them, also after
// that member was removed from the quorum; what its key signs after the
// removal does not. A catalog import may be signed by any member's key.
func TestQuorumKeysOutliveAMember(t *testing.T) { // not parallel: its Raft elections run in real time, and its members' ports fixed
	q := newQuorumMesh(t, 3, nil)
	leader := q.leader()
	ord := q.join(0, 1, 2)
	apiKey := q.register(ord, "keeper", identity.GenerateKey())
	tok := q.token(ord, "keeper", apiKey) // signed by the leader
	for _, n := range q.all(ord) {
		testkit.Eventually(t, 5*time.Second, func() bool { return len(n.signers.Current()) == 3 }, "%s does not know the 3 signers", n.URL())
	}
	// A catalog import signed by a member that does not lead.
	follower := q.follower()
	body := `{"listings":[{"agent_id":"listed","name":"L","description":"d","url":"https://l.example","capabilities":["x"]}]}`
	if st, v := q.signedCall(ord, follower.key, "POST", "/v1/admin/catalog", body); st != 200 {
		t.Fatalf("catalog import signed by a follower: %d %v", st, v)
	}
	if st, v := q.signedCall(ord, identity.GenerateKey(), "POST", "/v1/admin/catalog", body); st != 403 {
		t.Fatalf("catalog import signed by a stranger: %d %v", st, v)
	}
	attested := q.clock.Now()
	_, tomb, err := registryapi.NewTombstone(identity.DIDFromPublicKey(identity.GenerateKey().Public().(ed25519.PublicKey)), "ghost", 1, leader.key, attested)
	if err != nil {
		t.Fatal(err)
	}

	// The leader leaves the quorum for good: stopped, then removed.
	oldKey := leader.key
	leader.Close()
	for i, m := range q.members {
		if m == leader {
			q.members[i] = nil
		}
	}
	// The leader may change again under a loaded machine: remove through
	// whichever leads.
	testkit.Eventually(t, 10*time.Second, func() bool {
		return q.leader().quorum.RemoveServer(context.Background(), leader.PeerID()) == nil
	}, "the member was not removed")

	oldDID := identity.DIDFromPublicKey(oldKey.Public().(ed25519.PublicKey))
	for _, n := range q.all(ord) {
		testkit.Eventually(t, 5*time.Second, func() bool { return n.signers.Removed(oldDID) && len(n.signers.Current()) == 2 },
			"%s does not know the member was removed", n.URL())

	}
	q.clock.Advance(time.Minute)
	for _, n := range q.all(ord) {
		// Its token still works everywhere, and its record still verifies.
		if st, v := call(t, n, "POST", "/v1/agents/me/heartbeat", "", "Authorization", "Bearer "+tok); st != 200 {
			t.Fatalf("a token of the removed member on %s: %d %v", n.URL(), st, v)
		}
		if _, err := n.validator.Parse(registryapi.IDRecordKey("ghost"), tomb); err != nil {
			t.Fatalf("a record the removed member attested on %s: %v", n.URL(), err)
		}
		// What its key signs after the removal counts nowhere.
		late := reissue(t, tok, oldKey, q.clock.Now())
		if st, v := call(t, n, "POST", "/v1/agents/me/heartbeat", "", "Authorization", "Bearer "+late); st != 401 {
			t.Fatalf("a token signed after the removal on %s: %d %v", n.URL(), st, v)
		}
		_, lateTomb, _ := registryapi.NewTombstone(identity.DIDFromPublicKey(identity.GenerateKey().Public().(ed25519.PublicKey)), "ghost", 2, oldKey, q.clock.Now())
		if _, err := n.validator.Parse(registryapi.IDRecordKey("ghost"), lateTomb); err == nil {
			t.Fatalf("%s accepts a record attested after the removal", n.URL())
		}
		if st, _ := q.signedCall(n, oldKey, "POST", "/v1/admin/catalog", body); st != 403 {
			t.Fatalf("a catalog import signed by the removed member on %s: %d", n.URL(), st)
		}
	}
}

// TestDirectoryMovesIntoAQuorum: a lone directory with data becomes a
// quorum of one, takes in two members through the admin API (Mesh-Sig by
// its key) and loses nothing; a member is removed the same way.
func TestDirectoryMovesIntoAQuorum(t *testing.T) { // not parallel: its Raft elections run in real time, and its members' ports fixed
	m := &mesh{t: t, clock: newTestClock()}
	keyA := identity.GenerateKey()
	idA, _ := p2p.PeerID(keyA.Public().(ed25519.PublicKey))
	listenA := "/ip4/127.0.0.1/tcp/" + strconv.Itoa(testkit.Port(t))
	addrA := listenA + "/p2p/" + idA.String()
	cfgA := testConfig(t, t.TempDir())
	cfgA.Role, cfgA.Key, cfgA.Listen, cfgA.Now = RoleBootstrap, keyA, []string{listenA}, m.clock.Now
	m.boot = startNode(t, cfgA)
	var ids []string
	for i := range 5 {
		id := "old-" + strconv.Itoa(i)
		m.register(m.boot, id, identity.GenerateKey())
		ids = append(ids, id)
	}
	want := surface(t, m.boot, ids, nil)
	m.boot.Close()

	// The same node, same data, now a quorum of one.
	cfgA.Quorum = []string{addrA}
	a := startNode(t, cfgA)
	testkit.Eventually(t, 10*time.Second, a.quorum.IsLeader, "the quorum of one does not lead")
	if got := surface(t, a, ids, nil); got != want {
		t.Fatalf("the directory changed moving into a quorum:\n%s\nbefore:\n%s", got, want)
	}
	// Two members start to join it, and are added.
	var joiners []*Node
	for range 2 {
		cfg := testConfig(t, t.TempDir())
		cfg.Role, cfg.Quorum, cfg.Now = RoleBootstrap, []string{addrA}, m.clock.Now
		j := startNode(t, cfg)
		joiners = append(joiners, j)
		body := `{"addr":"` + j.P2PAddrs()[0] + `"}`
		if st, v := m.signedCall(a, identity.GenerateKey(), "POST", "/v1/admin/quorum/members", body); st != 403 {
			t.Fatalf("a stranger added a member: %d %v", st, v)
		}
		sig := identity.Sign(keyA, "POST", "/v1/admin/quorum/members", []byte(body), m.clock.Now())
		if st, v := call(t, a, "POST", "/v1/admin/quorum/members", body, identity.SigHeaderName, sig); st != 200 {
			t.Fatalf("adding a member: %d %v", st, v)
		}
		if st, v := call(t, a, "POST", "/v1/admin/quorum/members", body, identity.SigHeaderName, sig); st != 401 || v["code"] != "nonce_reused" {
			t.Fatalf("the same signed request again: %d %v", st, v)
		}
	}
	_, list := call(t, a, "GET", "/v1/admin/quorum", "")
	if ms := list["members"].([]any); len(ms) != 3 {
		t.Fatalf("members after two adds: %v", list)
	}
	for _, j := range joiners {
		testkit.Eventually(t, 10*time.Second, func() bool { return j.clog.Seq() == a.clog.Seq() }, "a new member did not catch up")
		if got := surface(t, j, ids, nil); got != want {
			t.Fatalf("a new member's directory:\n%s\nwant:\n%s", got, want)
		}
		if o, _ := j.clog.Origin(); o != a.DID() {
			t.Fatalf("a new member's origin %q, want %q", o, a.DID())
		}
	}
	// Writes through a new member; then it is removed (through the other).
	m.boot = a
	m.register(joiners[0], "new", identity.GenerateKey())
	st, v := m.signedCall(joiners[1], keyA, "DELETE", "/v1/admin/quorum/members/"+joiners[0].PeerID().String(), "")
	if st != 200 || len(v["members"].([]any)) != 2 {
		t.Fatalf("removing a member: %d %v", st, v)
	}
	if st, _ := m.signedCall(a, keyA, "DELETE", "/v1/admin/quorum/members/"+joiners[0].PeerID().String(), ""); st != 404 {
		t.Fatalf("removing a member twice: %d", st)
	}
	m.register(joiners[1], "after-removal", identity.GenerateKey())
}
