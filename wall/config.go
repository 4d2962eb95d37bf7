package wall

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"

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
	// A socket may send DefaultSocketRate messages a second, in bursts of
	// DefaultSocketBurst: more than a person types, enough for an agent
	// streaming deltas.
	DefaultSocketRate  = 50
	DefaultSocketBurst = 100
	// DefaultRoomRate bounds the messages a node publishes in one cluster
	// a second, from all its sockets (bursts of twice that).
	DefaultRoomRate = 500
	// DefaultPeerRate bounds the topic messages a node takes a second from
	// another node in one cluster (bursts of twice that): well above what
	// an honest node publishes (DefaultRoomRate messages, deltaRate
	// presence deltas and a beat).
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
	// SocketRate and SocketBurst bound the messages one socket sends; a
	// message over them gets a rate_limited error frame.
	SocketRate  float64
	SocketBurst int
	// RoomRate bounds the messages all sockets of one cluster on this node
	// send per second (bursts of twice that); a message over it gets a
	// rate_limited error frame.
	RoomRate float64
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
	defRate := func(r *float64, v float64) {
		if *r <= 0 {
			*r = v
		}
	}
	defRate(&t.SocketRate, DefaultSocketRate)
	defRate(&t.RoomRate, DefaultRoomRate)
	defRate(&t.PeerRate, DefaultPeerRate)
	defRate(&t.RelayRate, max(DefaultRelayRate, t.PeerRate))
	if t.SocketBurst <= 0 {
		t.SocketBurst = DefaultSocketBurst
	}
}

// Config configures the wall.
type Config struct {
	Catalog *Catalog        // required
	Log     cmdlog.Proposer // required: creates and deletes clusters
	Host    *p2p.Host       // required
	// Directory is the directory node, which keeps cluster histories;
	// empty means this node.
	Directory peer.ID
	// PublicURL is the base URL clients reach this node at.
	PublicURL string
	// Refresh, if set, brings the catalog up to date with the directory;
	// a node that is not the directory asks it before answering that a
	// cluster does not exist (it may have been created a moment ago).
	Refresh func(ctx context.Context) error
	Tuning
	Now        func() time.Time
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

func (c *Config) fill() error {
	if c.Catalog == nil || c.Log == nil || c.Host == nil {
		return errors.New("wall: Catalog, Log and Host are required")
	}
	c.PublicURL = strings.TrimRight(c.PublicURL, "/")
	c.Tuning.fill()
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}
