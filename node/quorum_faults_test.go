package node

import (
	"context"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/connmgr"
	"github.com/libp2p/go-libp2p/core/control"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/testkit"
	"github.com/agentmesh/mesh/store"
)

// cut is a connection gater that refuses every connection, direct or
// relayed, with the peers it cuts off: a network partition.
type cut struct {
	mu  sync.Mutex
	off map[peer.ID]bool
}

var _ connmgr.ConnectionGater = (*cut)(nil)

func (c *cut) set(off ...peer.ID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.off = map[peer.ID]bool{}
	for _, p := range off {
		c.off[p] = true
	}
}

func (c *cut) refuses(p peer.ID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.off[p]
}

func (c *cut) InterceptPeerDial(p peer.ID) bool                                { return !c.refuses(p) }
func (c *cut) InterceptAddrDial(p peer.ID, _ ma.Multiaddr) bool                { return !c.refuses(p) }
func (c *cut) InterceptAccept(network.ConnMultiaddrs) bool                     { return true }
func (c *cut) InterceptUpgraded(network.Conn) (bool, control.DisconnectReason) { return true, 0 }
func (c *cut) InterceptSecured(_ network.Direction, p peer.ID, _ network.ConnMultiaddrs) bool {
	return !c.refuses(p)
}

// isolate cuts n off from peers, both ways, and drops their connections.
func isolate(gaters map[*Node]*cut, n *Node, peers ...*Node) {
	var ids []peer.ID
	for _, p := range peers {
		ids = append(ids, p.PeerID())
		if g := gaters[p]; g != nil {
			g.set(n.PeerID())
		}
	}
	gaters[n].set(ids...)
	for _, p := range peers {
		n.host.Libp2p().Network().ClosePeer(p.PeerID())
		p.host.Libp2p().Network().ClosePeer(n.PeerID())
	}
}

// TestQuorumPartitionedLeader: a partition isolates the leader. The
// minority accepts no write; the majority elects and goes on; after
// healing every node holds the same state, the writes made on the majority
// side included and none of the minority's.
func TestQuorumPartitionedLeader(t *testing.T) { // not parallel: its Raft elections run in real time, and its members' ports fixed
	gaters := map[*Node]*cut{}
	var gs []*cut
	q := newQuorumMesh(t, 3, func(_ int, c *Config) {
		g := &cut{}
		gs = append(gs, g)
		c.Gater = g
		c.ForwardTimeout = 2 * time.Second
	})
	for i, m := range q.members {
		gaters[m] = gs[i]
	}
	old := q.leader()
	var rest []*Node
	var restIdx []int
	for i, m := range q.members {
		if m != old {
			rest, restIdx = append(rest, m), append(restIdx, i)
		}
	}
	ord := q.join(restIdx...)
	gaters[ord] = &cut{}
	q.register(ord, "before", identity.GenerateKey())
	q.waitSame(q.all(ord)...)

	// The ordinary node is on the majority's side.
	ord.host.Libp2p().Network().ClosePeer(old.PeerID())
	isolate(gaters, old, append(rest, ord)...)

	// The minority never acknowledges a write.
	for i := range 5 {
		st, _ := call(t, old, "POST", "/v1/agents/register", `{"agent_id":"minority-`+strconv.Itoa(i)+`","capabilities":[],"endpoint":"https://m.example"}`)
		if st < 500 {
			t.Fatalf("the isolated former leader answered a write %d", st)
		}
	}
	// The majority elects a leader and takes writes, through the ordinary
	// node too.
	var newLeader *Node
	testkit.Eventually(t, 10*time.Second, func() bool {
		for _, m := range rest {
			if m.quorum.IsLeader() {
				newLeader = m
				return true
			}
		}
		return false
	}, "the majority elected no leader")

	q.register(ord, "during", identity.GenerateKey())
	q.register(rest[0], "during-2", identity.GenerateKey())

	// Heal: the former leader rejoins as a follower and catches up.
	for _, g := range gaters {
		g.set()
	}
	for _, p := range append(rest, ord) { // not waiting for the redial's backoff
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		old.host.Connect(ctx, peer.AddrInfo{ID: p.PeerID(), Addrs: p.host.Libp2p().Addrs()})
		cancel()
	}
	// Raft retries the appends to a member it could not reach after a
	// backoff that doubles with each failure up to 10.24 s (hashicorp/raft's
	// replication), and a retry just before the redial connects fails and
	// waits that again: a partition long on a loaded machine takes up to
	// two of them to heal.
	testkit.Eventually(t, 30*time.Second, func() bool {
		return old.clog.Seq() == newLeader.clog.Seq() && !old.quorum.IsLeader() && old.quorum.Leader() == q.leader().PeerID()
	}, "the former leader did not catch up after healing")

	q.boot = q.leader()
	q.waitSame(q.all(ord)...)
	ids := []string{"before", "during", "during-2", "minority-0", "minority-4"}
	want := surface(t, q.boot, ids, nil)
	for _, n := range q.all(ord) {
		if got := surface(t, n, ids, nil); got != want {
			t.Fatalf("%s differs after healing:\n%s\nleader:\n%s", n.URL(), got, want)
		}
	}
	if st, _ := call(t, q.boot, "GET", "/v1/agents/minority-0", ""); st != 404 {
		t.Fatalf("a write refused by the minority exists: %d", st)
	}
}

// TestQuorumWithoutMajority: with 2 of 3 members down, writes answer 503
// directory_unavailable (once the forward timeout is past), reads are
// served, and /health says why.
func TestQuorumWithoutMajority(t *testing.T) { // not parallel: its Raft elections run in real time, and its members' ports fixed
	q := newQuorumMesh(t, 3, func(_ int, c *Config) { c.ForwardTimeout = time.Second })
	survivor := q.follower()
	var si int
	for i, m := range q.members {
		if m == survivor {
			si = i
		}
	}
	ord := q.join(si)
	q.register(ord, "kept", identity.GenerateKey())
	q.waitSame(q.all(ord)...)
	for i, m := range q.members {
		if m != survivor {
			m.Close()
			q.members[i] = nil
		}
	}
	for _, n := range []*Node{survivor, ord} {
		st, v := call(t, n, "POST", "/v1/agents/register", `{"agent_id":"lost","capabilities":[],"endpoint":"https://l.example"}`)
		if st != 503 || v["code"] != "directory_unavailable" {
			t.Fatalf("write on %s without a majority: %d %v", n.URL(), st, v)
		}
		if st, _ := call(t, n, "GET", "/v1/agents/kept", ""); st != 200 {
			t.Fatalf("read on %s without a majority: %d", n.URL(), st)
		}
	}
	testkit.Eventually(t, 5*time.Second, func() bool {
		_, h := call(t, survivor, "GET", "/health", "")
		qv := h["quorum"].(map[string]any)
		return qv["leader"] == "" && qv["error"] != nil && h["status"] == "degraded"
	}, "the survivor's health does not say there is no leader")

}

// TestQuorumHistorySurvivesTheLeader: a cluster's history is kept by every
// member, so the member that leads after the leader is lost serves it.
func TestQuorumHistorySurvivesTheLeader(t *testing.T) { // not parallel: its Raft elections run in real time, and its members' ports fixed
	testkit.Slow(t, "a leader stopped and an election on real Raft timeouts")
	q := newQuorumMesh(t, 3, nil)
	ord := q.join(0, 1, 2)
	cl := createCluster(t, ord, `{"visibility":"public","name":"kept"}`)
	id, tok := cl["cluster_id"].(string), cl["token"].(string)
	history := func(n *Node) int {
		st, v := call(t, n, "GET", "/v1/clusters/"+id+"/history?limit=100", "", "X-Cluster-Token", tok)
		if st != 200 {
			return -1
		}
		return len(v["events"].([]any))
	}
	ws := enterWall(t, ord, id, url.Values{"agent": {"ann"}})
	ws.conn.CloseNow()
	kept := func(m *Node) int {
		n := 0
		m.db.View(func(tx *store.Txn) error {
			return tx.Scan([]byte("w/h/"+id+"/"), nil, func(_, _ []byte) (bool, error) { n++; return true, nil })
		})
		return n
	}
	for _, m := range q.members {
		testkit.Eventually(t, 10*time.Second, func() bool { return kept(m) == 2 },
			"member %s does not keep the join and the leave (leader: %v)", m.URL(), m.quorum.IsLeader())
	}
	if got := history(ord); got != 2 {
		t.Fatalf("history through the ordinary node: %d events", got)
	}
	old := q.leader()
	old.Close()
	for i, m := range q.members {
		if m == old {
			q.members[i] = nil
		}
	}
	q.leader()
	testkit.Eventually(t, 10*time.Second, func() bool { return history(ord) == 2 }, "the new leader does not serve the history")
}
