package node

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/admission"
	"github.com/agentmesh/mesh/internal/testkit"
	"github.com/agentmesh/mesh/registryapi"
	"github.com/agentmesh/mesh/wall"
)

// TestWhatIsNeverUsedExpires: registrations whose agent never takes a
// token expire after the activation window, public clusters nobody joins
// after the join window, each by a log entry every node applies alike
// (a node joining later replays them to the same state), on the
// directory's clock. A catalog listing under an expired registration
// stays; used registrations, joined and private clusters stay; an expired
// id and slug are free again.
func TestWhatIsNeverUsedExpires(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	b := m.join()
	ctx := context.Background()

	m.register(b, "abandoned", identity.GenerateKey())
	if st, v := call(t, b, "POST", "/v1/agents/register", anonymous("anonymous")); st != 201 {
		t.Fatalf("anonymous registration: %d %v", st, v)
	}
	m.token(b, "used", m.register(b, "used", identity.GenerateKey()))
	listing := `{"listings":[{"agent_id":"listed","name":"Listed","url":"https://listed.example"}]}`
	if st, v := m.signedCall(b, m.boot.key, "POST", "/v1/admin/catalog", listing); st != 200 {
		t.Fatalf("catalog import: %d %v", st, v)
	}
	m.register(b, "listed", identity.GenerateKey())

	ghost := createCluster(t, b, `{"name":"Ghost Town","visibility":"public"}`)
	busy := createCluster(t, b, `{"name":"Busy","visibility":"public"}`)
	private := createCluster(t, b, `{"name":"Quiet","visibility":"private"}`)
	if ghost["slug"] != "ghost-town" {
		t.Fatalf("slug: %v", ghost["slug"])
	}
	// A ghost socket on b is a member enough: b serves the cluster.
	sock := enterWall(t, b, busy["cluster_id"].(string), url.Values{"agent": {"watcher"}, "vis": {"ghost"}})
	testkit.Eventually(t, 10*time.Second, func() bool {
		cl, err := m.boot.catalog.Get(busy["cluster_id"].(string))
		return err == nil && cl.JoinBy == 0
	}, "the directory never logged that Busy was joined")

	sock.conn.CloseNow()

	sweep := func() uint64 {
		m.boot.sweepOnce(ctx)
		return m.boot.clog.Seq()
	}
	seq := m.boot.clog.Seq()
	m.clock.Advance(registryapi.DefaultActivationWindow - time.Minute)
	if sweep() != seq {
		t.Fatal("something expired before its window ended")
	}
	m.clock.Advance(2 * time.Minute)
	if sweep() != seq+1 {
		t.Fatalf("expiring the unused registrations took %d entries, want 1", m.boot.clog.Seq()-seq)
	}
	m.clock.Advance(wall.DefaultJoinWindow)
	if sweep() != seq+2 {
		t.Fatalf("expiring the unjoined cluster took %d entries in all, want 2", m.boot.clog.Seq()-seq)
	}
	if sweep() != seq+2 {
		t.Fatal("a sweep with nothing due logged an entry")
	}

	late := m.join()
	m.waitCaughtUp(b)
	for _, n := range []*Node{m.boot, b, late} {
		for id, want := range map[string]int{"abandoned": 404, "anonymous": 404, "listed": 404, "used": 200} {
			if st, _ := call(t, n, "GET", "/v1/agents/"+id, ""); st != want {
				t.Errorf("%s on %s: %d, want %d", id, n.URL(), st, want)
			}
		}
		if a, err := n.dir.Lookup("listed"); err != nil || a.Listing == nil || a.Listing.Name != "Listed" || a.Registered() {
			t.Errorf("the catalog listing under an expired registration, on %s: %+v, %v", n.URL(), a, err)
		}
		for id, want := range map[any]int{ghost["cluster_id"]: 404, busy["cluster_id"]: 200} {
			if st, _ := call(t, n, "GET", "/v1/clusters/"+id.(string), ""); st != want {
				t.Errorf("cluster %s on %s: %d, want %d", id, n.URL(), st, want)
			}
		}
		if _, err := n.catalog.Get(private["cluster_id"].(string)); err != nil {
			t.Errorf("the private cluster on %s: %v", n.URL(), err)
		}
		if got, want := n.dir.AgentCount(), int64(1); got != want {
			t.Errorf("%s counts %d agents, want %d", n.URL(), got, want)
		}
	}
	// The expired id and slug are free; the expired cluster's id is not.
	m.register(b, "abandoned", identity.GenerateKey())
	if again := createCluster(t, b, `{"name":"Ghost Town","visibility":"public"}`); again["slug"] != "ghost-town" {
		t.Errorf("the slug of the expired cluster was not released: %v", again["slug"])
	}
	if _, err := m.boot.wall.Proposed(json.RawMessage(`{"expire":["`+busy["cluster_id"].(string)+`"]}`), m.clock.Now()); err == nil {
		t.Error("the directory takes an expiry proposed by another node")
	}
}

// TestQuorumExpiresOnTheLeader: on a quorum, the leader sweeps and every
// member and node applies the same expiries; a follower's sweep logs
// nothing; the log's budget refuses, on the leader, a write that came
// through an ordinary node, with 503 directory_busy passed on unchanged.
func TestQuorumExpiresOnTheLeader(t *testing.T) { // not parallel: its Raft elections run in real time, and its members' ports fixed
	q := newQuorumMesh(t, 3, func(_ int, c *Config) {
		c.Budgets.Directory = admission.Budget{Rate: 0.001, Burst: 6}
	})
	n := q.join(0, 1, 2)
	q.register(n, "idle", identity.GenerateKey())
	q.token(n, "used", q.register(n, "used", identity.GenerateKey())) // 3 entries: register, register, activate
	seq := q.leader().clog.Seq()
	q.clock.Advance(registryapi.DefaultActivationWindow + time.Minute)
	q.follower().sweepOnce(context.Background())
	if got := q.leader().clog.Seq(); got != seq {
		t.Fatalf("a follower's sweep logged %d entries", got-seq)
	}
	q.leader().sweepOnce(context.Background())
	if got := q.leader().clog.Seq(); got != seq+1 {
		t.Fatalf("the leader's sweep logged %d entries, want 1", got-seq)
	}
	q.waitSame(q.all(n)...)
	for _, node := range q.all(n) {
		for id, want := range map[string]int{"idle": 404, "used": 200} {
			if st, _ := call(t, node, "GET", "/v1/agents/"+id, ""); st != want {
				t.Errorf("%s on %s: %d, want %d", id, node.URL(), st, want)
			}
		}
	}
	// Three writes and the unmetered sweep so far: three more fit.
	for i := range 3 {
		if st, v := call(t, n, "POST", "/v1/agents/register", anonymous(fmt.Sprint("fill-", i))); st != 201 {
			t.Fatalf("write %d within the log's budget: %d %v", i, st, v)
		}
	}
	st, hdr, v := callFull(t, n, "POST", "/v1/agents/register", anonymous("one-too-many"))
	if st != 503 || v["code"] != "directory_busy" || hdr.Get("Retry-After") == "" {
		t.Fatalf("a write past the log's budget, through an ordinary node: %d %v %v", st, hdr, v)
	}
	if a := healthAdmission(t, q.leader()); a["directory_shedding"] != true {
		t.Errorf("the leader's health: %v", a)
	}
}
