package wall

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/agentmesh/mesh/internal/cmdlog"
	"github.com/agentmesh/mesh/store"
)

// What the directory takes from another node for a public cluster's
// history (a private cluster's events are sealed: the directory takes them
// from a holder of the member key, history.go). A registration at the
// rendezvous proves nothing, since anyone may register under any topic;
// so the directory asks the node itself for its roster (a roster peek,
// the roster exchange's read): a node that runs no room for the cluster
// has none, and its appends are refused. Then each event must be about a
// socket of that node: a join names a member of the roster the node
// answered (or one that left again within the same batch: a visit
// shorter than the batch's way here), a leave a member whose join from
// that node the directory holds and whose leave it has not. A node that
// answered lately (servedFor) is not asked again while its joins name
// members of the roster it answered: its room may have closed meanwhile
// with its last socket, whose leave is on its way.
//
// A node that runs a room may still make members up, as any client may
// open sockets under handles it picks; what it adds is bounded by
// historyRate and, in the window, by its share (storeEvents).

// pendingJoins are the joins of a public cluster's members that this node
// queued for the directory and the directory has not answered yet. The
// directory, checking that the node serves the cluster, peeks at its
// roster; the member may have left meanwhile and the room closed with it
// (a visit of a few milliseconds), so a peek at a cluster without a room
// here answers these members (serveRoster).
type pendingJoins struct {
	mu sync.Mutex
	m  map[string]map[string]pendingJoin // cluster -> handle
}

type pendingJoin struct {
	m member
	n int
}

func (p *pendingJoins) add(id string, m member, d int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[string]map[string]pendingJoin{}
	}
	if p.m[id] == nil {
		p.m[id] = map[string]pendingJoin{}
	}
	j := p.m[id][m.Agent]
	if j.m, j.n = m, j.n+d; j.n > 0 {
		p.m[id][m.Agent] = j
		return
	}
	if delete(p.m[id], m.Agent); len(p.m[id]) == 0 {
		delete(p.m, id)
	}
}

// done notes that event e was answered (or dropped).
func (p *pendingJoins) done(e pendingEvent) {
	if e.join != nil {
		p.add(e.cluster, *e.join, -1)
	}
}

// members lists the members of cluster id whose joins are pending.
func (p *pendingJoins) members(id string) []member {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []member
	for _, j := range p.m[id] {
		out = append(out, j.m)
	}
	return out
}

// servedFor is how long a node's roster answer vouches for its appends.
const servedFor = time.Minute

// maxServed bounds the nodes whose rosters the directory remembers.
const maxServed = 4096

// served is what a node answered the directory of its roster lately.
type served struct {
	at      time.Time
	members map[string]bool
}

// servedViews are the rosters the directory asked of appending nodes.
type servedViews struct {
	mu    sync.Mutex
	views map[peerCluster]served
}

// get returns the view of k, and whether it is fresh at now.
func (v *servedViews) get(k peerCluster, now time.Time) (served, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	s, ok := v.views[k]
	return s, ok && now.Sub(s.at) < servedFor
}

// put remembers s as the view of k, forgetting those stale at now if it
// has to.
func (v *servedViews) put(k peerCluster, s served, now time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.views == nil {
		v.views = map[peerCluster]served{}
	}
	if len(v.views) >= maxServed {
		for k, s := range v.views {
			if now.Sub(s.at) >= servedFor {
				delete(v.views, k)
			}
		}
		for k := range v.views { // still full: forget one, to be asked again
			if len(v.views) < maxServed {
				break
			}
			delete(v.views, k)
		}
	}
	v.views[k] = s
}

// servingMembers returns the members of public cluster id that node from
// runs sockets for, as it answers, or as it answered lately if that names
// every member in need. It fails when the node runs no room for id and did
// not lately. A batch of leaves alone needs no roster (nil): a leave is
// taken only after the node's join, which needed one.
func (s *Service) servingMembers(ctx context.Context, id string, from peer.ID, need []string, joins bool) (map[string]bool, error) {
	if !joins {
		return nil, nil
	}
	k := peerCluster{from, id}
	now := s.now()
	last, fresh := s.served.get(k, now)
	if fresh && hasAll(last.members, need) {
		return last.members, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.SyncTimeout)
	defer cancel()
	ro, err := s.askRoster(ctx, from, id, nil, roster{}, true)
	if err != nil {
		if fresh {
			return last.members, nil // its room closed meanwhile
		}
		return nil, fmt.Errorf("%w: append from %s, which runs no room for %s: %v", errHistoryRefused, from, id, err)
	}
	members := make(map[string]bool, len(ro.Members))
	for _, m := range ro.Members {
		members[m.Agent] = true
	}
	at := now
	if fresh { // a member may have left since the last answer, its leave on the way
		for h := range last.members {
			members[h] = true
		}
		at = last.at // so that what was merged in expires: asked every minute, a node's gone members would vouch for ever
	}
	s.served.put(k, served{at: at, members: members}, now)
	return members, nil
}

func hasAll(set map[string]bool, hs []string) bool {
	for _, h := range hs {
		if !set[h] {
			return false
		}
	}
	return true
}

// screened is an append from a node for a public cluster, decoded.
type screened struct {
	events []eventBody
	bodies [][]byte
}

// decodeAppend decodes a public cluster's events, dropping what is not an
// event, and lists the members its joins need in the roster: those not
// leaving again later in the batch.
func decodeAppend(bodies [][]byte) (sc screened, need []string, joins bool) {
	for _, b := range bodies {
		var e eventBody
		if len(b) <= maxHistoryBody && decodeWire(nil, sealHistory, b, &e) == nil &&
			(e.Event == "join" || e.Event == "leave") && validHandle(e.Agent) == nil {
			sc.events, sc.bodies = append(sc.events, e), append(sc.bodies, b)
		}
	}
	for i, e := range sc.events {
		joins = joins || e.Event == "join"
		if e.Event == "join" && !leavesLater(sc.events[i+1:], e.Agent) {
			need = append(need, e.Agent)
		}
	}
	return sc, need, joins
}

func leavesLater(rest []eventBody, h string) bool {
	for _, e := range rest {
		if e.Event == "leave" && e.Agent == h {
			return true
		}
	}
	return false
}

// openJoinKey counts the joins of handle h that node n reported for
// cluster id and has not reported the leave of yet (on the directory).
func openJoinKey(id string, n peer.ID, h string) []byte {
	return store.Key("w", "hj", id, n.String(), h)
}

// keep returns the bodies of sc that are about sockets of node from, whose
// roster is members, and counts their joins and leaves in tx.
func (sc screened) keep(tx *store.Txn, id string, from peer.ID, members map[string]bool) ([][]byte, error) {
	var out [][]byte
	for i, e := range sc.events {
		key := openJoinKey(id, from, e.Agent)
		open, err := cmdlog.GetU64(tx, key)
		if err != nil {
			return nil, err
		}
		switch {
		case e.Event == "join" && (members[e.Agent] || leavesLater(sc.events[i+1:], e.Agent)):
			open++
		case e.Event == "leave" && open > 0:
			open--
		default:
			continue // not a socket of that node
		}
		if open == 0 {
			err = tx.Delete(key)
		} else {
			err = tx.SetTTL(key, []byte(store.U64(open)), historyRetention)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, sc.bodies[i])
	}
	return out, nil
}
