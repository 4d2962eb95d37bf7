package p2p

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
)

// maxMessageSize bounds any gossipsub message; topics set tighter limits.
const maxMessageSize = 1 << 20

// validateQueue is how many received messages may wait for validation,
// and outboundQueue how many RPCs may wait in gossipsub's own queue for one
// peer; past them gossipsub drops messages. Their defaults (32) lose a burst
// (a chat client's, a node's join storm) sent faster than validation or
// gossipsub's sending goroutine goes; the topics' rate limits bound what
// comes. That goroutine only hands each RPC to the peer's queue bounded in
// bytes (outbound.go), which holds what the connection has not taken yet.
const (
	validateQueue = 4096
	outboundQueue = 1024
)

// newPubSub starts gossipsub. Parameters, and why:
//
//   - Mesh degree: libp2p's defaults (D=6, Dlo=5, Dhi=12, Dlazy=6). Our
//     meshes are small; the defaults give every node several redundant
//     paths without flooding.
//   - Heartbeat 700 ms instead of 1 s: mesh repairs and IHAVE gossip come
//     sooner, for a modest amount of control traffic.
//   - Flood publishing (default on): a node's own messages go to every
//     subscribed peer it knows with a good score, not only its mesh peers,
//     so the first hop costs no mesh formation delay.
//   - Messages are signed by their origin and signatures are required
//     (strict), so a message's origin (Message.GetFrom) is authentic and
//     validators may trust it. What gossipsub refuses for its signature,
//     before any validator, is counted as invalid (signatureDrops).
//   - Peer scoring penalises peers that forward invalid messages and
//     misbehave at the protocol level; below the graylist threshold a peer
//     is ignored. IP colocation is not penalised: many honest nodes share an
//     address in tests and behind NAT.
//   - Message ids are js-libp2p's default (MessageID: the origin's public
//     key as libp2p's protobuf encodes it, then the 8-byte seqno), not
//     go-libp2p's (the peer id, which prefixes that key with two bytes of
//     multihash header, then the seqno): a js-libp2p peer with its
//     library's defaults then names every message as this node does, so
//     gossip (IHAVE, IWANT, IDONTWANT) between them works. With the ids
//     apart, a node asked a peer outside its mesh for messages it had
//     (its own among them) and counted their echoes as invalid
//     (docs/wire.md, Message ids).
//   - Gossipsub gets the host through gossipHost, so that what waits for a
//     slow peer is bounded in bytes (GossipQueueBytes), dropping its oldest
//     published messages first, not only in RPCs (outboundQueue).
func (h *Host) newPubSub(ctx context.Context) (*pubsub.PubSub, error) {
	gs := pubsub.DefaultGossipSubParams()
	gs.HeartbeatInterval = 700 * time.Millisecond
	return pubsub.NewGossipSub(ctx, &gossipHost{Host: h.h, out: h.out},
		pubsub.WithGossipSubParams(gs),
		pubsub.WithFloodPublish(true),
		pubsub.WithMessageSigning(true),
		pubsub.WithMessageIdFn(MessageID),
		pubsub.WithAppSpecificRpcInspector(inspectRPC(h.h.ID())),
		pubsub.WithRawTracer(signatureDrops{h}),
		pubsub.WithStrictSignatureVerification(true),
		pubsub.WithMaxMessageSize(maxMessageSize),
		pubsub.WithValidateQueueSize(validateQueue),
		pubsub.WithPeerOutboundQueueSize(outboundQueue),
		pubsub.WithPeerExchange(h.cfg.DHTServer),
		pubsub.WithPeerScore(peerScoreParams(), peerScoreThresholds()),
		pubsub.WithPeerScoreInspect(func(s map[peer.ID]float64) { h.scores.Store(&s) }, time.Second),
		pubsub.WithLogger(h.cfg.Logger),
	)
}

func peerScoreParams() *pubsub.PeerScoreParams {
	return &pubsub.PeerScoreParams{
		Topics:                      map[string]*pubsub.TopicScoreParams{},
		AppSpecificScore:            func(peer.ID) float64 { return 0 },
		AppSpecificWeight:           1,
		IPColocationFactorWeight:    0,
		IPColocationFactorThreshold: 1,
		BehaviourPenaltyWeight:      -10,
		BehaviourPenaltyThreshold:   6,
		BehaviourPenaltyDecay:       pubsub.ScoreParameterDecay(10 * time.Minute),
		DecayInterval:               time.Second,
		DecayToZero:                 0.01,
		RetainScore:                 10 * time.Minute,
	}
}

func peerScoreThresholds() *pubsub.PeerScoreThresholds {
	return &pubsub.PeerScoreThresholds{
		GossipThreshold:             -100,
		PublishThreshold:            -200,
		GraylistThreshold:           -400,
		AcceptPXThreshold:           5,
		OpportunisticGraftThreshold: 3,
	}
}

// PeerScore is peer p's gossipsub score as this node last computed it
// (each second); 0 for a peer it does not score.
func (h *Host) PeerScore(p peer.ID) float64 {
	if s := h.scores.Load(); s != nil {
		return (*s)[p]
	}
	return 0
}

// topicScoreParams: each invalid message a peer forwards costs it 50 points
// (squared counter, decaying to 1% in ten minutes: a half-life of about
// 90 s, TestScoreFigures), so a handful of invalid messages pushes a
// flooding peer below the gossip and publish thresholds, and sustained
// abuse below the graylist.
func topicScoreParams() *pubsub.TopicScoreParams {
	return &pubsub.TopicScoreParams{
		TopicWeight:                    1,
		TimeInMeshQuantum:              time.Second,
		InvalidMessageDeliveriesWeight: -50,
		InvalidMessageDeliveriesDecay:  pubsub.ScoreParameterDecay(10 * time.Minute),
		SkipAtomicValidation:           true,
	}
}

// Reasons a message is dropped, as counted by Topic.Dropped and by
// mesh_p2p_dropped_total{surface="topic"}.
const (
	DropTooLarge = "too_large"
	DropInvalid  = "invalid"
	DropRate     = "rate"
	DropReplay   = "replay"  // Validate returned ErrReplay
	DropIgnored  = "ignored" // Validate returned another ErrIgnore
	// DropSlowPeer: not sent to a peer whose gossip queue was full
	// (GossipQueueBytes). Counted by the metric only: the queue knows
	// peers, not topics.
	DropSlowPeer = "slow_peer"
)

// ErrIgnore, returned by a TopicConfig.Validate, drops a message without
// penalising the peer that forwarded it (for messages that are well formed
// but not wanted, such as duplicates).
var ErrIgnore = errors.New("p2p: ignore message")

// ErrReplay is an ErrIgnore for a message already seen or applied.
var ErrReplay = fmt.Errorf("%w: replayed or already applied", ErrIgnore)

// TopicConfig configures a joined topic.
type TopicConfig struct {
	// MaxSize drops larger messages (and penalises their forwarder).
	MaxSize int
	// RatePerOrigin, if positive, bounds the messages per second accepted
	// from each origin (Burst at once), however they come. The excess is
	// dropped: ignored as long as the origin stays within twice the limit,
	// rejected (penalising the forwarder) beyond (peerLimits).
	RatePerOrigin float64
	Burst         int
	// RatePerPeer, if positive, bounds likewise the messages per second
	// accepted from each connected peer that forwards them, whatever their
	// origins (PeerBurst at once). Gossipsub checks only that a message is
	// signed by its origin's key, and keys cost nothing: without this, a
	// peer signing each message with a fresh key would get a fresh origin
	// budget for each.
	RatePerPeer float64
	PeerBurst   int
	// Validate checks a message from its authenticated origin. An error
	// rejects it (penalising the forwarder); ErrIgnore drops it quietly.
	// What it returns reaches Deliver as Message.Value, so that a message
	// is decoded once.
	Validate func(origin peer.ID, data []byte) (any, error)
	// Deliver receives each valid message, in arrival order, from one
	// goroutine. Own messages are delivered too. Validation runs inline
	// (no goroutine per message), but gossipsub validates on several
	// workers and a message may come by several paths, so one origin's
	// messages can arrive out of order: a topic that needs their order
	// numbers them itself.
	Deliver func(Message)
}

// Message is a delivered topic message.
type Message struct {
	From  peer.ID // the authenticated origin
	Data  []byte
	Value any // what Validate returned
}

// Topic is a joined gossipsub topic.
type Topic struct {
	h       *Host
	name    string
	t       *pubsub.Topic
	sub     *pubsub.Subscription
	cancel  context.CancelFunc
	done    chan struct{}
	ps      *pubsub.PubSub
	dropped sync.Map // reason -> *atomic.Uint64
}

// Join subscribes to topic name with the given validation and delivery.
func (h *Host) Join(name string, cfg TopicConfig) (*Topic, error) {
	if h.ps == nil {
		return nil, ErrNotStarted
	}
	if cfg.MaxSize <= 0 || cfg.MaxSize > maxMessageSize {
		cfg.MaxSize = maxMessageSize
	}
	tp := &Topic{h: h, name: name, ps: h.ps, done: make(chan struct{})}
	if err := h.ps.RegisterTopicValidator(name, tp.validator(h.h.ID(), cfg),
		pubsub.WithValidatorInline(true)); err != nil {
		return nil, fmt.Errorf("p2p: topic %s: %w", name, err)
	}
	t, err := h.ps.Join(name)
	if err != nil {
		h.ps.UnregisterTopicValidator(name)
		return nil, fmt.Errorf("p2p: join %s: %w", name, err)
	}
	if err := t.SetScoreParams(topicScoreParams()); err != nil {
		h.cfg.Logger.Warn("topic score params refused", "topic", name, "err", err)
	}
	sub, err := t.Subscribe(pubsub.WithBufferSize(1024))
	if err != nil {
		t.Close()
		h.ps.UnregisterTopicValidator(name)
		return nil, fmt.Errorf("p2p: subscribe %s: %w", name, err)
	}
	tp.t, tp.sub = t, sub
	ctx, cancel := context.WithCancel(context.Background())
	tp.cancel = cancel
	go tp.deliver(ctx, cfg.Deliver)
	h.mu.Lock()
	h.topics[name] = tp
	h.mu.Unlock()
	return tp, nil
}

func (tp *Topic) validator(self peer.ID, cfg TopicConfig) pubsub.ValidatorEx {
	origins := newPeerLimits(cfg.RatePerOrigin, cfg.Burst)
	forwarders := newPeerLimits(cfg.RatePerPeer, cfg.PeerBurst)
	return func(_ context.Context, from peer.ID, m *pubsub.Message) pubsub.ValidationResult {
		if len(m.Data) > cfg.MaxSize {
			tp.drop(DropTooLarge)
			return pubsub.ValidationReject
		}
		origin, err := peer.IDFromBytes(m.From)
		if err != nil || !seqnoOK(m) {
			tp.drop(DropInvalid)
			return pubsub.ValidationReject
		}
		if origin != self {
			// The forwarder first, so that what a flooding forwarder
			// relays past its limit spends no origin's budget.
			res := forwarders.check(from)
			if res == pubsub.ValidationAccept {
				res = origins.check(origin)
			}
			if res != pubsub.ValidationAccept {
				tp.drop(DropRate)
				return res
			}
		}
		if cfg.Validate == nil {
			return pubsub.ValidationAccept
		}
		m.ValidatorData, err = cfg.Validate(origin, m.Data)
		switch {
		case err == nil:
			return pubsub.ValidationAccept
		case errors.Is(err, ErrReplay):
			tp.drop(DropReplay)
			return pubsub.ValidationIgnore
		case errors.Is(err, ErrIgnore):
			tp.drop(DropIgnored)
			return pubsub.ValidationIgnore
		}
		tp.drop(DropInvalid)
		return pubsub.ValidationReject
	}
}

func (tp *Topic) drop(reason string) {
	c, _ := tp.dropped.LoadOrStore(reason, new(atomic.Uint64))
	c.(*atomic.Uint64).Add(1)
	tp.h.dropped(SurfaceTopic, reason)
}

// Dropped returns how many messages were dropped for reason.
func (tp *Topic) Dropped(reason string) uint64 {
	c, ok := tp.dropped.Load(reason)
	if !ok {
		return 0
	}
	return c.(*atomic.Uint64).Load()
}

func (tp *Topic) deliver(ctx context.Context, fn func(Message)) {
	defer close(tp.done)
	for {
		m, err := tp.sub.Next(ctx)
		if err != nil {
			return
		}
		if fn != nil {
			fn(Message{From: m.GetFrom(), Data: m.Data, Value: m.ValidatorData})
		}
	}
}

// Name is the topic's name.
func (tp *Topic) Name() string { return tp.name }

// Publish sends data to the topic's subscribers.
func (tp *Topic) Publish(ctx context.Context, data []byte) error { return tp.t.Publish(ctx, data) }

// Peers lists the peers known to be subscribed to the topic.
func (tp *Topic) Peers() []peer.ID { return tp.t.ListPeers() }

// AwaitPeer waits until p is known to subscribe to the topic, so that
// what this node publishes next reaches it; it fails when ctx ends first.
func (tp *Topic) AwaitPeer(ctx context.Context, p peer.ID) error {
	events, err := tp.t.EventHandler() // it starts with a join of every peer known now
	if err != nil {
		return err
	}
	defer events.Cancel()
	for {
		e, err := events.NextPeerEvent(ctx)
		if err != nil {
			return err
		}
		if e.Type == pubsub.PeerJoin && e.Peer == p {
			return nil
		}
	}
}

// TopicPeers lists the peers known to be subscribed to topic name, as
// this node sees them (nil while it has not joined the topic).
func (h *Host) TopicPeers(name string) []peer.ID {
	h.mu.Lock()
	tp := h.topics[name]
	h.mu.Unlock()
	if tp == nil {
		return nil
	}
	return tp.Peers()
}

// Leave unsubscribes from the topic and stops its delivery. It waits for a
// Deliver call in progress, so it must not be called from Deliver.
func (tp *Topic) Leave() {
	tp.h.mu.Lock()
	cur, ok := tp.h.topics[tp.name]
	if ok && cur == tp {
		delete(tp.h.topics, tp.name)
	}
	tp.h.mu.Unlock()
	if ok && cur == tp {
		tp.close()
	}
}

func (tp *Topic) close() {
	tp.cancel()
	tp.sub.Cancel()
	<-tp.done
	tp.t.Close()
	tp.ps.UnregisterTopicValidator(tp.name)
}
