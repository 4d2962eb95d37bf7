package wall

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/time/rate"

	"github.com/agentmesh/mesh/p2p"
)

// room is one cluster on this node while it has local sockets: the sockets,
// the cluster's other nodes and their rosters, and acks in flight.
type room struct {
	svc  *Service
	cl   *Cluster
	seal *sealer // nil for a public cluster
	// member is the member token of a private cluster (its boards' keys
	// derive from it: hashtags), "" for a public one.
	member string
	// memberKey is a private cluster's member key (nil for a public one,
	// or a v1 record, which names none): it signs the room's history
	// events.
	memberKey ed25519.PrivateKey
	topic     *p2p.Topic

	ctx    context.Context // ends when the room closes
	cancel context.CancelFunc
	ready  chan struct{} // closed once the room has synced with its peers
	done   chan struct{} // closed once the room has shut down and is forgotten

	gmu      sync.Mutex // guards stopping and wg.Add
	stopping bool
	wg       sync.WaitGroup

	pubMu sync.Mutex    // keeps messages published in sequence order; taken before mu
	seq   atomic.Uint64 // messages published
	wireN atomic.Uint64 // topic messages published, of every kind (wireMsg.N)
	// gone: the room said goodbye (under pubMu), and publishes no message
	// after it, so that the goodbye's Seq names the last.
	gone bool
	// sendLimit paces the messages the room's sockets send (RoomRate),
	// topicLimit those it publishes while other nodes serve the cluster
	// (topicRate); deltaLimit bounds the presence deltas it publishes
	// (deltaRate).
	sendLimit, topicLimit, deltaLimit *rate.Limiter

	mu      sync.Mutex
	sockets map[*socket]struct{}
	holds   map[peer.ID]bool // browser peers the room is held for (browser.go)
	local   map[string]*localMember
	epoch   uint64 // of this room: its start in Unix µs (Service.nextEpoch); a roster's revs count from it
	rev     uint64 // changes of the local roster
	digest  digest // of the local roster
	remote  map[peer.ID]*remoteNode
	pending map[string]*sent // by message id
	closed  bool
	beats   uint64 // counted since the room started (expire)

	// strangers counts the views in remote that are not known,
	// remoteMembers the members in all of them.
	strangers, remoteMembers int

	regs registrants // who the rendezvous vouches for (vouch.go)
}

// topicName is a public cluster's gossipsub topic, also its rendezvous
// namespace.
func topicName(id string) string { return topicPrefix + id }

// topicPrefix starts the name of every public cluster's topic (and
// rendezvous namespace).
const topicPrefix = "mesh/wall/1/"

// privatePrefix starts the name of every private cluster's topic (and
// rendezvous namespace): their messages are sealed with the origin bound
// (replay.go), which nodes of the release before cannot open, so the two
// never share a private cluster's topic (where each would count the
// other's messages as invalid) nor find each other at the rendezvous.
const privatePrefix = "mesh/wall/2/"

// topicOf is cluster cl's topic and rendezvous namespace.
func topicOf(cl *Cluster) string {
	if cl.Public() {
		return topicName(cl.ID)
	}
	return privatePrefix + cl.ID
}

func newRoom(svc *Service, cl *Cluster, token string) *room {
	r := &room{svc: svc, cl: cl, ready: make(chan struct{}), done: make(chan struct{}),
		sockets: map[*socket]struct{}{}, holds: map[peer.ID]bool{}, local: map[string]*localMember{}, remote: map[peer.ID]*remoteNode{}, pending: map[string]*sent{},
		epoch:      svc.nextEpoch(),
		sendLimit:  sendLimiter(svc.cfg.RoomRate, burstOf(svc.cfg.RoomRate)),
		topicLimit: sendLimiter(topicRate(svc.cfg.PeerRate), burstOf(topicRate(svc.cfg.PeerRate))),
		deltaLimit: rate.NewLimiter(deltaRate, 2*deltaRate),
		regs:       registrants{lookups: rate.NewLimiter(lookupRate, lookupBurst)}}
	if !cl.Public() {
		r.seal, r.member = newSealer(cl.ID, token), token
	}
	if !cl.Public() && cl.memberPub() != nil {
		r.memberKey = memberKey(cl.ID, token)
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
// here sees everyone online elsewhere. first is the joining member, in the
// roster (and told to the others) at once (nil for a ghost).
func (r *room) start(first *member) error {
	defer close(r.ready)
	t, err := r.svc.cfg.Host.Join(topicOf(r.cl), p2p.TopicConfig{
		MaxSize:       maxWire + 64,
		RatePerOrigin: r.svc.cfg.PeerRate, Burst: max(1, int(2*r.svc.cfg.PeerRate)),
		RatePerPeer: r.svc.cfg.RelayRate, PeerBurst: max(1, int(2*r.svc.cfg.RelayRate)),
		Validate: r.validate,
		Deliver:  r.deliver,
	})
	if err != nil {
		return err
	}
	r.topic = t
	var join *wireMsg
	if first != nil {
		r.mu.Lock()
		_, join = r.reserveLocked(*first)
		r.mu.Unlock()
	}
	r.sync()
	r.publishDelta(join) // for nodes the roster exchange missed
	r.goroutine(r.maintain)
	return nil
}

// sync asks every node that registered the cluster at the rendezvous for
// its roster, telling it ours, and waits (briefly) until gossip flows both
// ways with each.
func (r *room) sync() {
	ctx, cancel := context.WithTimeout(r.ctx, r.svc.cfg.SyncTimeout)
	defer cancel()
	peers, err := r.rendezvous(ctx, true)
	if err != nil {
		r.svc.log.Debug("rendezvous unreachable: the room starts alone", "cluster", r.cl.ID, "err", err)
		return
	}
	mine := r.localRoster()
	var wg sync.WaitGroup
	for _, p := range peers {
		wg.Go(func() { r.exchangeRoster(ctx, p, mine) })
	}
	wg.Wait()
}

func (r *room) exchangeRoster(ctx context.Context, p peer.AddrInfo, mine roster) {
	host := r.svc.cfg.Host
	if err := host.Connect(ctx, p); err != nil {
		r.svc.log.Debug("cluster peer unreachable", "cluster", r.cl.ID, "peer", p.ID, "err", err)
		return
	}
	theirs, err := r.svc.askRoster(ctx, p.ID, r.cl.ID, r.seal, mine, false)
	if err != nil {
		return // it no longer serves the cluster, refused this node (vouch.go), or said nothing useful
	}
	r.setRoster(p.ID, theirs)
	r.topic.AwaitPeer(ctx, p.ID) // so that what this node publishes next reaches it
}

// maintain beats every BeatInterval, expires nodes that stopped beating,
// and renews the rendezvous registration, connecting to nodes that arrived
// meanwhile.
func (r *room) maintain() {
	tick := r.svc.cfg.Clock.NewTicker(r.svc.cfg.BeatInterval)
	defer tick.Stop()
	renew := r.svc.cfg.Clock.NewTicker(p2p.RendezvousTTL / 3)
	defer renew.Stop()
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-tick.C():
			r.publish(r.beat())
			r.expire()
		case <-renew.C():
			r.renew("")
		}
	}
}

// renew renews the room's rendezvous registration, connects to the nodes
// registered there and fetches the rosters of those not known here (their
// roster exchange with this node failed, or they were strangers past
// maxStrangers). With back, a rendezvous node that has just connected and
// serves the cluster, it exchanges rosters as at the room's start: back may
// have restarted, and a room it started since knows nothing of this node.
func (r *room) renew(back peer.ID) {
	ctx, cancel := context.WithTimeout(r.ctx, r.svc.cfg.SyncTimeout)
	defer cancel()
	peers, _ := r.rendezvous(ctx, true)
	var exchange *peer.AddrInfo
	for _, p := range peers {
		if p.ID == back {
			exchange = &p
			continue
		}
		if !r.svc.cfg.Host.Connected(p.ID) {
			r.svc.cfg.Host.Connect(ctx, p)
		}
		r.mu.Lock()
		n := r.remote[p.ID]
		fetch := n == nil || (!n.known && claimFetch(n))
		r.mu.Unlock()
		if fetch {
			r.goroutine(func() { r.fetchRoster(p.ID) })
		}
	}
	if exchange != nil {
		r.exchangeRoster(ctx, *exchange, r.localRoster())
	}
}

// publish sends w on the cluster's topic. A failure is logged and counted:
// the other nodes miss what w says.
func (r *room) publish(w wireMsg) error {
	w.Epoch, w.At, w.N = r.epoch, r.svc.now().UnixMilli(), r.wireN.Add(1)
	err := r.topic.Publish(r.ctx, encodeWire(r.seal, topicAD(r.svc.cfg.Host.ID()), w))
	if err != nil && r.ctx.Err() == nil {
		r.svc.metrics.publishFailed.Inc()
		r.svc.log.Warn("publish on cluster topic failed", "cluster", r.cl.ID, "wire", w.T, "err", err)
	}
	return err
}

// deltaRate bounds the presence deltas a room publishes a second (bursts
// of twice that): past it, as in a storm of joins, deltas are left out and
// the other nodes catch up at the next beat (roster.go).
const deltaRate = 100

// publishDelta publishes presence delta w (if any), unless over deltaRate.
func (r *room) publishDelta(w *wireMsg) {
	if w != nil && r.deltaLimit.Allow() {
		r.publish(*w)
	}
}

// validate checks a topic message from another node: it opens (for a
// private cluster, proving the sender holds the token and the message was
// sealed by origin), is well formed, and, sealed, is no replay (replay.go).
func (r *room) validate(origin peer.ID, data []byte) (any, error) {
	var w wireMsg
	if err := decodeWire(r.seal, topicAD(origin), data, &w); err != nil {
		return nil, err
	}
	if err := w.check(r.cl.ID, r.svc.proofs); err != nil {
		return nil, err
	}
	if r.seal != nil {
		if err := r.svc.replays.take(r.cl.ID, origin, &w, r.svc.now()); err != nil {
			return nil, err
		}
	}
	if w.T == wireMessage {
		// Sent by a node of an earlier release, which checked only the
		// payload: no socket gets a frame over MaxFrame.
		if size, _ := messageFrameSize(&w); size > MaxFrame {
			return nil, fmt.Errorf("%w: a message frame of %d bytes", p2p.ErrIgnore, size)
		}
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
	case wireJoin, wireLeave:
		r.delta(m.From, w)
	case wireBeat:
		r.beatFrom(m.From, w)
	case wireBye:
		r.bye(m.From, w)
	}
}

// newMsgID returns a fresh message id.
func newMsgID() string {
	b := make([]byte, 12)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// errRoomClosed: the room closed before the socket was admitted.
var errRoomClosed = errors.New("wall: the room has closed")

// admit adds socket sk and greets it: a welcome frame listing who is online
// on every node, and a presence frame about sk to everyone else. It fails
// with errRoomClosed when the room has closed meanwhile, ErrRoomFull when
// sk would be a member past maxRoster here.
func (r *room) admit(sk *socket) error {
	var err error
	var join *wireMsg
	var unproven []*socket
	r.change(sk, func(touch func(string)) {
		if err = r.roomForLocked(sk.handle, sk.vis); r.closed {
			err = errRoomClosed
		}
		if err != nil {
			return
		}
		sk.room = r
		touch(sk.handle)
		if join, unproven = r.takeOverLocked(sk); join == nil {
			join = r.addLocked(sk)
		} else {
			r.addLocked(sk)
		}
		r.record("join", sk)
		sk.send(r.greetingLocked(sk))
	})
	r.publishDelta(join)
	f := encodeFrame(closedFrame{Kind: KindClosed, Reason: causeTaken.reason})
	for _, o := range unproven {
		o.closeAfter(f, causeTaken)
	}
	return err
}

// roomForLocked fails with ErrRoomFull when a socket of handle h would be
// a member past maxRoster here: other nodes refuse a roster over it.
func (r *room) roomForLocked(h, vis string) error {
	if vis == VisGhost || r.local[h] != nil || len(r.local) < maxRoster {
		return nil
	}
	return ErrRoomFull
}

// dismiss removes sk and tells the cluster when its handle went offline
// here. It reports whether sk was the room's last socket, and no browser
// peer holds the room (browser.go): the room is then closed (a socket
// arriving meanwhile waits for the next room), and its goodbye, not a
// leave, tells the cluster.
func (r *room) dismiss(sk *socket) (last bool) {
	var leave *wireMsg
	r.change(sk, func(touch func(string)) {
		if _, in := r.sockets[sk]; in {
			r.record("leave", sk)
		}
		touch(sk.handle)
		leave = r.removeLocked(sk)
		if r.vacantLocked() {
			last, leave = !r.closed, nil // the goodbye tells the cluster
			r.closed = true
		}
	})
	r.publishDelta(leave)
	return last
}

// shutdown stops the room's work and leaves the topic; with goodbye, the
// other nodes are told at once that this node's members left.
func (r *room) shutdown(goodbye bool) {
	r.pubMu.Lock()
	r.gone = true
	if goodbye && r.topic != nil {
		r.publish(wireMsg{T: wireBye, Epoch: r.epoch, Seq: r.seq.Load()})
	}
	r.pubMu.Unlock()
	r.gmu.Lock()
	r.stopping = true
	r.gmu.Unlock()
	r.cancel()
	r.wg.Wait()
	if r.topic != nil {
		r.topic.Leave()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	r.svc.cfg.Host.Unregister(ctx, topicOf(r.cl))
	cancel()
}
