package wall

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/agentmesh/mesh/p2p"
)

// room is one cluster on this node while it has local sockets: the sockets,
// the cluster's other nodes and their rosters, and acks in flight.
type room struct {
	svc   *Service
	cl    *Cluster
	seal  *sealer // nil for a public cluster
	topic *p2p.Topic

	ctx    context.Context // ends when the room closes
	cancel context.CancelFunc
	ready  chan struct{} // closed once the room has synced with its peers

	gmu      sync.Mutex // guards stopping and wg.Add
	stopping bool
	wg       sync.WaitGroup

	mu      sync.Mutex
	sockets map[*socket]struct{}
	local   map[string]*localMember
	remote  map[peer.ID]*remoteNode
	pending map[string]*pendingAck
	closed  bool
}

// remoteNode is another node serving the cluster, as its rosters and
// deltas describe it.
type remoteNode struct {
	members map[string]member
	seen    time.Time
}

// topicName is a cluster's gossipsub topic, also its rendezvous namespace.
func topicName(id string) string { return "mesh/wall/1/" + id }

func newRoom(svc *Service, cl *Cluster, token string) *room {
	r := &room{svc: svc, cl: cl, ready: make(chan struct{}),
		sockets: map[*socket]struct{}{}, local: map[string]*localMember{}, remote: map[peer.ID]*remoteNode{}, pending: map[string]*pendingAck{}}
	if !cl.Public() {
		r.seal = newSealer(cl.ID, token)
	}
	r.ctx, r.cancel = context.WithCancel(svc.ctx)
	return r
}

// goroutine runs fn in a goroutine shutdown waits for; once the room
// stops, fn is not run.
func (r *room) goroutine(fn func()) {
	r.gmu.Lock()
	defer r.gmu.Unlock()
	if !r.stopping {
		r.wg.Go(fn)
	}
}

// start joins the cluster's topic and, before any socket is greeted, learns
// the rosters of the cluster's other nodes: first a member joining from
// here sees everyone online elsewhere. first is the joining member, told to
// the others at once (nil for a ghost).
func (r *room) start(first *member) error {
	defer close(r.ready)
	t, err := r.svc.cfg.Host.Join(topicName(r.cl.ID), p2p.TopicConfig{
		MaxSize:     maxWire + 64,
		RatePerPeer: r.svc.cfg.PeerRate, Burst: 2 * int(r.svc.cfg.PeerRate),
		Validate: r.validate,
		Deliver:  r.deliver,
	})
	if err != nil {
		return err
	}
	r.topic = t
	r.sync(first)
	r.goroutine(r.maintain)
	return nil
}

// sync asks every node that registered the cluster at the rendezvous for
// its roster, telling it ours, and waits (briefly) until gossip flows both
// ways with each.
func (r *room) sync(first *member) {
	ctx, cancel := context.WithTimeout(r.ctx, r.svc.cfg.SyncTimeout)
	defer cancel()
	peers, err := r.svc.cfg.Host.Rendezvous(ctx, topicName(r.cl.ID), true)
	if err != nil {
		r.svc.log.Debug("rendezvous unreachable: the room starts alone", "cluster", r.cl.ID, "err", err)
		return
	}
	var mine []member
	if first != nil {
		mine = []member{*first}
	}
	var wg sync.WaitGroup
	for _, p := range peers {
		wg.Go(func() { r.exchangeRoster(ctx, p, mine) })
	}
	wg.Wait()
}

func (r *room) exchangeRoster(ctx context.Context, p peer.AddrInfo, mine []member) {
	host := r.svc.cfg.Host
	if err := host.Connect(ctx, p); err != nil {
		r.svc.log.Debug("cluster peer unreachable", "cluster", r.cl.ID, "peer", p.ID, "err", err)
		return
	}
	req := encodeWire(nil, "", rosterRequest{Cluster: r.cl.ID, Body: encodeWire(r.seal, sealRosterReq, mine)})
	raw, err := host.Request(ctx, p.ID, rosterProto, req, maxRosterResp)
	if err != nil || len(raw) == 0 {
		return // it no longer serves the cluster
	}
	var theirs []member
	if decodeWire(r.seal, sealRosterResp, raw, &theirs) != nil || checkMembers(theirs) != nil {
		return
	}
	r.setRoster(p.ID, theirs, false)
	r.waitTopicPeer(ctx, p.ID)
}

// waitTopicPeer waits until p is known to subscribe to the topic, so that
// what this node publishes next reaches it.
func (r *room) waitTopicPeer(ctx context.Context, p peer.ID) {
	for !slices.Contains(r.topic.Peers(), p) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// maintain publishes the roster every RosterInterval, expires nodes that
// stopped publishing theirs, and renews the rendezvous registration,
// connecting to nodes that arrived meanwhile.
func (r *room) maintain() {
	tick := time.NewTicker(r.svc.cfg.RosterInterval)
	defer tick.Stop()
	renew := time.NewTicker(p2p.RendezvousTTL / 3)
	defer renew.Stop()
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-tick.C:
			r.publish(wireMsg{T: wireRoster, Members: r.localMembers()})
			r.expire()
		case <-renew.C:
			ctx, cancel := context.WithTimeout(r.ctx, r.svc.cfg.SyncTimeout)
			peers, _ := r.svc.cfg.Host.Rendezvous(ctx, topicName(r.cl.ID), true)
			for _, p := range peers {
				if !r.svc.cfg.Host.Connected(p.ID) {
					r.svc.cfg.Host.Connect(ctx, p)
				}
			}
			cancel()
		}
	}
}

// publish sends w on the cluster's topic.
func (r *room) publish(w wireMsg) {
	if err := r.topic.Publish(r.ctx, encodeWire(r.seal, sealTopic, w)); err != nil && r.ctx.Err() == nil {
		r.svc.log.Debug("publish on cluster topic failed", "cluster", r.cl.ID, "err", err)
	}
}

// validate checks a topic message from another node: it opens (for a
// private cluster, proving the sender holds the token) and is well formed.
func (r *room) validate(origin peer.ID, data []byte) (any, error) {
	var w wireMsg
	if err := decodeWire(r.seal, sealTopic, data, &w); err != nil {
		return nil, err
	}
	if err := w.check(); err != nil {
		return nil, err
	}
	return &w, nil
}

// deliver handles a valid topic message.
func (r *room) deliver(m p2p.Message) {
	if m.From == r.svc.cfg.Host.ID() {
		return
	}
	w := m.Value.(*wireMsg)
	switch w.T {
	case wireMessage:
		r.deliverRemote(m.From, w)
	case wireJoin:
		r.memberDelta(m.From, *w.Member, true)
	case wireLeave:
		r.memberDelta(m.From, *w.Member, false)
	case wireRoster:
		r.setRoster(m.From, w.Members, w.Bye)
	}
}

// newMsgID returns a fresh message id.
func newMsgID() string {
	b := make([]byte, 12)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// admit adds socket sk and greets it: a welcome frame listing who is online
// on every node, and a presence frame about sk to everyone else. It
// returns false when the room has closed meanwhile.
func (r *room) admit(sk *socket) bool {
	admitted := false
	r.change([]string{sk.handle}, sk, func() {
		if r.closed {
			return
		}
		admitted = true
		sk.room = r
		r.addLocked(sk)
		r.record("join", sk)
		sk.send(outFrame{data: encodeFrame(welcomeFrame{Kind: KindWelcome, You: sk.handle, YouDID: nullable(sk.did),
			Public: r.cl.Public(), Owner: sk.owner, Online: r.onlineLocked(), Cluster: r.cl.ID, Vis: sk.vis})})
	})
	if admitted && !sk.ghost() {
		r.publish(wireMsg{T: wireJoin, Member: &member{Agent: sk.handle, DID: sk.did, Vis: sk.vis}})
	}
	return admitted
}

// dismiss removes sk and tells the cluster when its handle went offline
// here; it reports whether the room is now empty.
func (r *room) dismiss(sk *socket) (empty bool) {
	gone := false
	r.change([]string{sk.handle}, sk, func() {
		if _, in := r.sockets[sk]; in {
			r.record("leave", sk)
		}
		r.removeLocked(sk)
		gone = !sk.ghost() && r.local[sk.handle] == nil
		empty = len(r.sockets) == 0
	})
	if gone && !empty {
		r.publish(wireMsg{T: wireLeave, Member: &member{Agent: sk.handle, DID: sk.did, Vis: sk.vis}})
	}
	return empty
}

// shutdown stops the room's work and leaves the topic; with goodbye, the
// other nodes are told at once that this node's members left.
func (r *room) shutdown(goodbye bool) {
	if goodbye && r.topic != nil {
		r.publish(wireMsg{T: wireRoster, Bye: true})
	}
	r.gmu.Lock()
	r.stopping = true
	r.gmu.Unlock()
	r.cancel()
	r.wg.Wait()
	if r.topic != nil {
		r.topic.Leave()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	r.svc.cfg.Host.Unregister(ctx, topicName(r.cl.ID))
	cancel()
}
