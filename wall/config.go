package wall

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentmesh/mesh/internal/clock"
	"github.com/agentmesh/mesh/internal/cmdlog"
	"github.com/agentmesh/mesh/p2p"
)

// Defaults of Tuning.
const (
	DefaultBeatInterval    = 5 * time.Second
	DefaultPresenceTimeout = 15 * time.Second
	DefaultAckWindow       = 2 * time.Second
	DefaultSyncTimeout     = 2 * time.Second
	DefaultPingInterval    = 30 * time.Second
	// DefaultControlRate bounds the control frames (pings, pongs, closes)
	// a client sends a second, in bursts of twice that: WebSocket
	// libraries that keep a connection alive ping every few seconds at
	// most, and the node answers pings and pings every socket itself, so a
	// client needs none.
	DefaultControlRate = 10
	// DefaultSocketRate is the pace node.DefaultConfig holds one socket
	// to, in messages a second, in bursts of twice that: an agent
	// streaming 100 deltas a second (a fast model's tokens) runs at half
	// of it for ever, and a burst of 300 is taken at once. A faster sender
	// is slowed down, never refused.
	DefaultSocketRate = 200
	// DefaultRoomRate is the pace node.DefaultConfig holds all the sockets
	// of one cluster on a node to together (bursts of twice that): ten
	// such streams at once.
	DefaultRoomRate = 1000
	// DefaultPeerRate bounds the topic messages a node takes a second from
	// another node in one cluster (bursts of twice that): above what an
	// honest node with the default rates publishes (DefaultRoomRate
	// messages, deltaRate presence deltas and a beat), so that the other
	// nodes shed none of it.
	DefaultPeerRate = 2000
	// DefaultRelayRate bounds the topic messages a node takes a second from
	// one connected peer in one cluster, whatever their origins (bursts of
	// twice that): room for an honest peer relaying a few nodes' traffic,
	// while a peer signing with made-up keys gets no more.
	DefaultRelayRate = 2 * DefaultPeerRate
)

// Tuning holds the wall's timings, queue bounds and rates. Zero fields
// take the defaults; tests shorten the timings.
type Tuning struct {
	// BeatInterval is how often a node tells a cluster's other nodes, on
	// the topic, that it is alive and which roster it holds (a digest of
	// it); PresenceTimeout how long after its last word a node's members
	// go offline (a node killed without a goodbye).
	BeatInterval    time.Duration
	PresenceTimeout time.Duration
	// AckWindow bounds how long a sender waits for other nodes' receipts.
	AckWindow time.Duration
	// SyncTimeout bounds a roster exchange with another node.
	SyncTimeout time.Duration
	// SendQueue is how many frames may wait for a slow client.
	SendQueue int
	// SendMemory bounds the bytes of the frames waiting for all the
	// sockets of the node together (a frame several sockets wait for
	// counts once). Past it, a socket that has frames waiting already is
	// closed as a slow consumer (1008) rather than given another; one
	// that keeps up still gets its frames.
	SendMemory int64
	// SocketBurst is the burst of Config.SocketRate; zero means twice the
	// rate.
	SocketBurst int
	// PeerRate is how many topic messages per second a cluster accepts
	// from one other node (its origin, whoever forwards them), in bursts
	// of twice that. The excess is dropped; a node that keeps sending
	// more than twice that is taken for a flooder and loses gossipsub
	// score. Keep it well above RoomRate.
	PeerRate float64
	// RelayRate is how many topic messages per second a cluster accepts
	// from one connected peer, whatever their origins, in bursts of twice
	// that; past it, as for PeerRate. An origin is only a key, which costs
	// nothing to make; a connected peer is what a flooder must pay for.
	// Keep it at least PeerRate.
	RelayRate float64
	// PingInterval is how often sockets are pinged; one that has not
	// answered by the next ping is closed.
	PingInterval time.Duration
	// ControlRate bounds the control frames a client sends a second, in
	// bursts of twice that; a socket past it is closed (1008).
	// math.Inf(1) bounds nothing.
	ControlRate float64
	// ProofNonces bounds the nonces of connect proofs the node remembers
	// (proof.go), each for identity.NonceMemory; past it, signed connects
	// are refused (503) until some are forgotten.
	ProofNonces int
}

func (t *Tuning) fill() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&t.BeatInterval, DefaultBeatInterval)
	def(&t.PresenceTimeout, DefaultPresenceTimeout)
	def(&t.AckWindow, DefaultAckWindow)
	def(&t.SyncTimeout, DefaultSyncTimeout)
	def(&t.PingInterval, DefaultPingInterval)
	if t.SendQueue <= 0 {
		t.SendQueue = DefaultSendQueue
	}
	if t.SendMemory <= 0 {
		t.SendMemory = DefaultSendMemory
	}
	if t.ProofNonces <= 0 {
		t.ProofNonces = DefaultProofNonces
	}
	defRate := func(r *float64, v float64) {
		if *r <= 0 {
			*r = v
		}
	}
	defRate(&t.PeerRate, DefaultPeerRate)
	defRate(&t.ControlRate, DefaultControlRate)
	defRate(&t.RelayRate, max(DefaultRelayRate, t.PeerRate))
}

// Config configures the wall.
type Config struct {
	Catalog *Catalog        // required
	Log     cmdlog.Proposer // required: creates and deletes clusters
	Host    *p2p.Host       // required
	// Directory names the node that orders the directory's writes, which
	// keeps cluster histories (the leader of a quorum, which may change);
	// nil, or an empty answer from a node keeping histories, means this
	// node.
	Directory func() peer.ID
	// KeepsHistory serves cluster histories to other nodes (bootstrap
	// nodes): those of the directory whenever this node is it.
	KeepsHistory bool
	// HistoryKeepers, if set, names every node that keeps cluster
	// histories (the members of the directory's quorum): history events
	// go to each, so that whichever leads next holds them. Nil: the
	// Directory alone.
	HistoryKeepers func() []peer.ID
	// PublicURL is the base URL clients reach this node at.
	PublicURL string
	// Refresh, if set, brings the catalog up to date with the directory;
	// a node that is not the directory asks it before answering that a
	// cluster does not exist (it may have been created a moment ago).
	Refresh func(ctx context.Context) error
	// SocketRate paces the frames one socket sends, in frames a second
	// (bursts of Tuning.SocketBurst), RoomRate the messages all sockets of
	// one cluster on this node send (bursts of twice that): while either
	// does not allow the next, the node stops reading the socket, and TCP
	// slows the client down; nothing is refused for coming too fast. Zero
	// means unlimited. Other nodes take at most Tuning.PeerRate a second
	// of a cluster's traffic from this one, whatever RoomRate says: past
	// it they shed messages, which the senders' acks do not count.
	SocketRate, RoomRate float64
	// JoinWindow is, on the directory, how long a new public cluster
	// waits for a node to serve it before it expires (expiry.go); zero
	// keeps every cluster until its admin deletes it.
	JoinWindow time.Duration
	// Quota is what a cluster's boards may hold, on the directory (it is
	// stamped in every board write it sequences); zero fields: no limit.
	Quota Quota
	// SlugRedirect is, on the directory, how long a renamed public
	// cluster's former slug keeps leading to it (redirect.go; stamped in
	// every cluster patch it sequences); zero keeps it for ever.
	SlugRedirect time.Duration
	Tuning
	// Clock is the wall's time; nil is the real clock. Its Now stamps
	// and checks what carries a time (messages, records, proofs and
	// challenges, replays, expiry); its timers and tickers run what
	// lasts (beats and presence, acks, the ordering window, keepalive
	// pings, retries). What must happen while nothing else does (a
	// silent node's members going offline, a lost message given up on)
	// waits on timers and tickers, never for Now to move: a node hands
	// its wall clock.WithNow(its own clock), which its tests hold still.
	// How long something has waited is read as the timers run
	// (clock.TimerNow), so that a clock held still cuts no wait short.
	Clock      clock.Clock
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

func (c *Config) fill() error {
	if c.Catalog == nil || c.Log == nil || c.Host == nil {
		return errors.New("wall: Catalog, Log and Host are required")
	}
	if c.SocketRate < 0 || c.RoomRate < 0 {
		return errors.New("wall: SocketRate and RoomRate must not be negative (zero is unlimited)")
	}
	if c.SlugRedirect < 0 {
		return errors.New("wall: SlugRedirect must not be negative (zero is for ever)")
	}
	c.PublicURL = strings.TrimRight(c.PublicURL, "/")
	c.Tuning.fill()
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}
