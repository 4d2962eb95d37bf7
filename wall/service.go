package wall

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/clock"
	"github.com/agentmesh/mesh/internal/nonces"
	"github.com/agentmesh/mesh/p2p"
)

// Stream protocols between nodes serving a cluster.
const (
	rosterProto  = p2p.ProtocolPrefix + "/wall/roster/1.0.0"
	receiptProto = p2p.ProtocolPrefix + "/wall/receipt/2.0.0"
	// receiptProtoV1 carries one receipt per stream, from nodes of the
	// release before receipts were batched.
	receiptProtoV1 = p2p.ProtocolPrefix + "/wall/receipt/1.0.0"
)

// Service is the wall on one node.
type Service struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	rooms  map[string]*room
	closed bool

	epoch        atomic.Uint64     // the last room's (nextEpoch)
	lookups      atomic.Uint64     // rendezvous lookups begun by the rooms (vouch.go)
	receipts     receiptQueues     // receipts waiting for other nodes
	events       chan pendingEvent // history events for the directory
	appendLimits *peerLimits       // on the directory: events taken from other nodes
	served       servedViews       // on the directory: rosters of nodes that append
	joins        pendingJoins      // joins queued for the directory, not answered yet
	sendMemory   sendMemory        // frames waiting for the sockets
	proofNonces  *nonces.Memory    // of connect proofs (proof.go)
	proofs       *proofMemory      // proofs of key that verified (proof.go)
	replays      replayMemory      // sealed topic messages taken (replay.go)
	challenges   challenger        // for connect proofs (challenge.go)

	joiningMu sync.Mutex
	joining   map[string]bool // on the directory: clusters being logged as joined
}

// now is the time by the wall's clock (Config.Clock).
func (s *Service) now() time.Time { return s.cfg.Clock.Now() }

// waited is the time that what waits on the clock's timers is measured
// by (the ordering window): a node's clock may stand still (its tests
// hold it) while the timers run in real time, and every message that
// came ahead of a missing one would then look as old as the first.
func (s *Service) waited() time.Time { return clock.TimerNow(s.cfg.Clock) }

// nextEpoch returns the epoch of a new room: the real time in
// microseconds, and past the epoch of every room before on this node, so
// that other nodes tell a node's current room from one it replaced by the
// larger epoch. Real, whatever Config.Clock says: the epoch must grow
// across restarts of the node, also of one whose clock a test holds still.
func (s *Service) nextEpoch() uint64 {
	for {
		last := s.epoch.Load()
		e := max(last+1, uint64(time.Now().UnixMicro()))
		if s.epoch.CompareAndSwap(last, e) {
			return e
		}
	}
}

// New checks cfg and returns the wall; it starts nothing.
func New(cfg Config) (*Service, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	s := &Service{cfg: cfg, log: cfg.Logger, rooms: map[string]*room{}, receipts: receiptQueues{q: map[peer.ID][]receipt{}}, events: make(chan pendingEvent, historyQueue),
		appendLimits: newPeerLimits(historyRate, historyBurst), sendMemory: sendMemory{max: cfg.SendMemory}, joining: map[string]bool{},
		proofNonces: nonces.New(identity.NonceMemory, cfg.ProofNonces).LimitScope(proofNoncesPerClient(cfg.ProofNonces)),
		proofs:      newProofMemory(), challenges: newChallenger()}
	cfg.Catalog.setClock(cfg.Clock.Now)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.metrics = newMetrics(s, cfg.Registerer)
	return s, nil
}

// Start serves the wall's stream protocols and watches for deletions.
func (s *Service) Start(context.Context) error {
	h := s.cfg.Host
	h.HandleRequests(rosterProto, maxRosterReq, s.serveRoster)
	h.HandleRequests(receiptProto, maxReceiptReq, s.serveReceipts)
	h.HandleRequests(receiptProtoV1, 4096, s.serveReceipt)
	if s.cfg.Directory == nil || s.cfg.KeepsHistory {
		h.HandleRequests(historyProto, maxHistoryReq, s.serveHistory)
		h.OnRendezvousRegister(s.registeredAt)
	}
	s.cfg.Catalog.OnDelete(func(id string) {
		s.goroutine(func() {
			s.closeRoom(id, causeDeleted)
			s.dropHistory(id)
		})
	})
	s.cfg.Catalog.OnBoard(s.boardEvent)
	s.cfg.Catalog.OnUpdate(func(u ClusterUpdate) { s.goroutine(func() { s.clusterUpdated(u) }) })
	s.cfg.Catalog.OnRestore(func() { s.goroutine(s.recheckRooms) })
	h.OnRendezvousNode(s.rendezvousBack)
	h.OnBrowserGone(s.browserGone)
	s.goroutine(s.keepalive)
	s.goroutine(s.reportEvents)
	return nil
}

// rendezvousBack has every room register again with rendezvous node p,
// which has just connected: if p restarted, it forgot the registrations,
// so that a room starting there would find none of this node's clusters
// served (its welcome would miss their members, its acks their sockets)
// until the rooms here renew, 30 s later.
func (s *Service) rendezvousBack(p peer.ID) {
	s.mu.Lock()
	rooms := slices.Collect(maps.Values(s.rooms))
	s.mu.Unlock()
	for _, r := range rooms {
		r.goroutine(func() {
			select {
			case <-r.ready:
				r.renew(p)
			case <-r.ctx.Done():
			}
		})
	}
}

// Close disconnects every socket (closed frame, reason "node shutting
// down") and leaves every topic. It is safe to call twice.
func (s *Service) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	ids := make([]string, 0, len(s.rooms))
	for id := range s.rooms {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	for _, id := range ids {
		s.closeRoom(id, causeNodeEnd)
	}
	s.cancel()
	s.wg.Wait()
	return nil
}

// track counts one more connection handler Close must wait for, unless
// the service is closing.
func (s *Service) track() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.wg.Add(1)
	return true
}

// goroutine runs fn in a goroutine Close waits for; once the service is
// closing it runs nothing and returns false.
func (s *Service) goroutine(fn func()) bool {
	if !s.track() {
		return false
	}
	go func() {
		defer s.wg.Done()
		fn()
	}()
	return true
}

// enter puts socket sk into the room of cluster cl, starting the room if
// sk is its first socket here. token is the credential sk presented (the
// key of a private cluster's traffic).
func (s *Service) enter(cl *Cluster, token string, sk *socket) (*room, error) {
	var first *member
	if !sk.ghost() {
		first = new(sk.member())
	}
	return s.openRoom(cl, token, first, func(r *room) error { return r.admit(sk) })
}

// openRoom runs admit in the room of cluster cl, starting the room (with
// member first, nil for none) if there is none. A room that is shutting
// down (its last socket just left) stays in s.rooms until it has left the
// topic and withdrawn its rendezvous registration: an admission arriving
// meanwhile waits for that, then starts the room anew.
//
// A room starts only if the catalog still holds the cluster, checked under
// s.mu: a deletion committed before that check fails with
// ErrClusterNotFound; one committed after it finds the room in s.rooms
// (the delete hook takes s.mu too) and closes it with its sockets.
// Likewise for a change of visibility (cluster_update.go): admit runs
// under cl's terms, and only in a room of the same terms that the catalog
// still holds; a room of earlier terms is closed (its sockets would be, by
// the update's hook), and an admission of earlier terms refused
// (errTermsChanged).
func (s *Service) openRoom(cl *Cluster, token string, first *member, admit func(*room) error) (*room, error) {
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil, errors.New("wall: node shutting down")
		}
		r := s.rooms[cl.ID]
		creating := r == nil
		if creating {
			cur, err := s.cfg.Catalog.Get(cl.ID)
			if err == nil && !sameTerms(cur, cl) {
				err = errTermsChanged
			}
			if err != nil {
				s.mu.Unlock()
				return nil, err
			}
			r = newRoom(s, cl, token)
			s.rooms[cl.ID] = r
		}
		s.mu.Unlock()
		if creating {
			if err := r.start(first); err != nil {
				s.retire(r, func() { r.cancel() })
				return nil, err
			}
		} else {
			<-r.ready
			if !sameTerms(r.cl, cl) {
				if err := s.closeStale(r, cl); err != nil {
					return nil, err
				}
				continue
			}
		}
		if err := admit(r); !errors.Is(err, errRoomClosed) {
			return r, err
		}
		<-r.done
	}
}

// leave takes sk out of its room, closing the room when it was the last.
func (s *Service) leave(r *room, sk *socket) {
	if r.dismiss(sk) {
		s.retire(r, func() { r.shutdown(true) })
	}
}

// retire stops room r, which was marked closed, with stop and forgets it.
func (s *Service) retire(r *room, stop func()) {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	stop()
	s.mu.Lock()
	if s.rooms[r.cl.ID] == r {
		delete(s.rooms, r.cl.ID)
	}
	s.mu.Unlock()
	close(r.done)
}

// closeRoom disconnects every socket of cluster id with a closed frame
// that gives the reason of c, then a close frame.
func (s *Service) closeRoom(id string, c *closeCause) {
	s.mu.Lock()
	r := s.rooms[id]
	s.mu.Unlock()
	if r != nil {
		s.shut(r, c)
	}
}

// shut is closeRoom of room r.
func (s *Service) shut(r *room, c *closeCause) {
	<-r.ready
	r.mu.Lock()
	first := !r.closed
	r.closed = true
	socks := make([]*socket, 0, len(r.sockets))
	for sk := range r.sockets {
		socks = append(socks, sk)
	}
	r.mu.Unlock()
	f := encodeFrame(closedFrame{Kind: KindClosed, Reason: c.reason})
	for _, sk := range socks {
		sk.closeAfter(f, c)
	}
	if !first {
		<-r.done // another caller retires it
		return
	}
	s.retire(r, func() { r.shutdown(c != causeDeleted) })
}

// refreshTimeout bounds Refresh.
const refreshTimeout = 2 * time.Second

// cluster finds a cluster by id or a public one by slug (with publicOnly,
// only a public one, so that a private id cannot be probed), asking the
// directory before concluding it does not exist.
func (s *Service) cluster(ctx context.Context, id string, publicOnly bool) (*Cluster, error) {
	find := s.cfg.Catalog.Resolve
	if publicOnly {
		find = s.cfg.Catalog.Lookup
	}
	cl, err := find(id)
	if errors.Is(err, ErrClusterNotFound) && s.cfg.Refresh != nil {
		ctx, cancel := context.WithTimeout(ctx, refreshTimeout)
		defer cancel()
		if s.cfg.Refresh(ctx) == nil {
			cl, err = find(id)
		}
	}
	return cl, err
}

// checkRoom fails with ErrRoomFull when the running room of cluster id
// (if any) has no room for a socket of j; admit checks again.
func (s *Service) checkRoom(id string, j joinQuery) error {
	r := s.room(id)
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.roomForLocked(j.agent, j.vis)
}

// room returns the running room of cluster id, if any: not one still
// syncing (its roster is not ready to share) nor one shutting down.
func (s *Service) room(id string) *room {
	s.mu.Lock()
	r := s.rooms[id]
	s.mu.Unlock()
	if r == nil {
		return nil
	}
	select {
	case <-r.ready:
	default:
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	return r
}

// awaitStart waits while the room of cluster id is starting, at most half
// of SyncTimeout, so that the asker (who gives the exchange SyncTimeout)
// still gets the answer. A node asking to exchange rosters then registered
// at the rendezvous after the room looked there: unless the room answers,
// neither learns of the other before the next beat. Two starting rooms do
// not wait for each other: the one that registered first did not find the
// other (a rendezvous node answers in request order); with several
// rendezvous nodes they might, and each answers the other after the wait.
func (s *Service) awaitStart(ctx context.Context, id string) {
	s.mu.Lock()
	r := s.rooms[id]
	s.mu.Unlock()
	if r == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.SyncTimeout/2)
	defer cancel()
	select {
	case <-r.ready:
	case <-ctx.Done():
	}
}

// serveRoster answers a node that joins a cluster this node serves: it
// learns the asker's roster and returns its own. An empty answer means
// this node does not serve the cluster (any more). An exchange with a node
// the rendezvous does not vouch for (vouch.go) is refused, not answered
// without learning the asker's roster: the asker would then count on this
// node's receipts, which go only to known nodes, and its acks would wait
// for them.
func (s *Service) serveRoster(ctx context.Context, from peer.ID, raw []byte) ([]byte, error) {
	asked := s.asked()
	var q rosterRequest
	if err := json.Unmarshal(raw, &q); err != nil {
		return nil, err
	}
	if !q.Peek {
		s.awaitStart(ctx, q.Cluster)
	}
	r := s.room(q.Cluster)
	if !q.Peek && s.cfg.Host.IsBrowser(from) {
		if held := s.hold(q.Cluster, from); held != nil {
			r = held // browser.go
		}
	}
	if r == nil {
		if ms := s.joins.members(q.Cluster); q.Peek && len(ms) > 0 {
			// The room closed before the directory, checking the joins it
			// is sent, peeked (historyscreen.go). Only public clusters'.
			return encodeWire(nil, sealRosterResp, roster{Members: ms}), nil
		}
		return []byte{}, nil
	}
	if r.seal != nil {
		if err := checkRosterChallenge(q.Challenge); err != nil {
			return nil, err
		}
	}
	self := s.cfg.Host.ID()
	var theirs roster
	if err := decodeWire(r.seal, rosterReqAD(from, self, q.Challenge), q.Body, &theirs); err != nil {
		return nil, err // a private cluster's roster goes only to token holders, each asking for itself
	}
	if !q.Peek { // a peek's roster is not read: its proofs are not checked
		if !r.vouched(ctx, from, asked) {
			return nil, fmt.Errorf("%w: roster exchange from %s for %s refused", errUnvouched, from, q.Cluster)
		}
		if err := theirs.check(q.Cluster, s.proofs); err != nil { // a vouched node's only: up to maxRoster verifications
			return nil, err
		}
		r.setRoster(from, theirs)
		wctx, cancel := context.WithTimeout(ctx, s.cfg.SyncTimeout)
		r.topic.AwaitPeer(wctx, from)
		cancel()
	}
	return encodeWire(r.seal, rosterRespAD(self, from, q.Challenge), r.localRoster()), nil
}

// online returns who is online in cluster cl across the mesh: from the
// room here, if this node serves it, else from the rosters of the nodes
// that do (a private cluster's asked with seal, its wire key).
func (s *Service) online(ctx context.Context, cl *Cluster, seal *sealer) []member {
	if r := s.room(cl.ID); r != nil {
		return r.members()
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.SyncTimeout)
	defer cancel()
	peers, err := s.cfg.Host.Rendezvous(ctx, topicOf(cl), false)
	if err != nil {
		return nil
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	byHandle := map[string]member{}
	for _, p := range peers {
		wg.Go(func() {
			theirs, err := s.askRoster(ctx, p.ID, cl.ID, seal, roster{}, true)
			if err != nil {
				return
			}
			mu.Lock()
			for _, m := range theirs.Members {
				byHandle[m.Agent] = m
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	return sortedMembers(byHandle)
}

// errNotServing: the asked node does not serve the cluster (any more).
var errNotServing = errors.New("wall: the node does not serve the cluster")

// askRoster asks node p for its roster of cluster id, telling it mine;
// with peek, the asker only looks (it does not serve the cluster, or
// checks a roster it holds).
func (s *Service) askRoster(ctx context.Context, p peer.ID, id string, seal *sealer, mine roster, peek bool) (roster, error) {
	self := s.cfg.Host.ID()
	q, req := newRosterRequest(self, p, id, seal, mine, peek)
	raw, err := s.cfg.Host.Request(ctx, p, rosterProto, req, maxRosterResp)
	if err != nil {
		return roster{}, err
	}
	if len(raw) == 0 {
		return roster{}, errNotServing
	}
	var theirs roster
	if err := decodeWire(seal, rosterRespAD(p, self, q.Challenge), raw, &theirs); err != nil {
		return roster{}, err
	}
	return theirs, theirs.check(id, s.proofs)
}

// keepalive pings every socket every PingInterval; one that has not
// answered the previous ping is closed.
func (s *Service) keepalive() {
	tick := s.cfg.Clock.NewTicker(s.cfg.PingInterval)
	defer tick.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-tick.C():
		}
		for _, sk := range s.allSockets() {
			sk.ping()
		}
	}
}

func (s *Service) allSockets() []*socket {
	s.mu.Lock()
	rooms := make([]*room, 0, len(s.rooms))
	for _, r := range s.rooms {
		rooms = append(rooms, r)
	}
	s.mu.Unlock()
	var out []*socket
	for _, r := range rooms {
		r.mu.Lock()
		for sk := range r.sockets {
			out = append(out, sk)
		}
		r.mu.Unlock()
	}
	return out
}
