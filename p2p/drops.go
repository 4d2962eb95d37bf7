package p2p

import (
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	record "github.com/libp2p/go-libp2p-record"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/prometheus/client_golang/prometheus"
)

// Peer input is untrusted: what fails its checks is dropped and counted in
// mesh_p2p_dropped_total{surface, reason}, so that an operator sees a peer
// sending garbage, forgeries or floods. So is gossip not sent to a peer too
// slow to take it (surface topic, reason slow_peer).
const (
	SurfaceTopic  = "topic"  // gossipsub messages (reasons: the Drop* constants)
	SurfaceStream = "stream" // request/response streams
	SurfaceDHT    = "dht"    // DHT records (put to us, or found by our lookups)
)

// Reasons of stream and DHT drops (topic reasons are in pubsub.go).
const (
	DropMalformed = "malformed" // unreadable request frame (truncated, timed out)
	DropRefused   = "refused"   // the handler refused the request
)

var dropSeries = map[string][]string{
	SurfaceTopic:  {DropTooLarge, DropInvalid, DropRate, DropReplay, DropIgnored, DropSlowPeer},
	SurfaceStream: {DropTooLarge, DropMalformed, DropRefused, DropRate},
	SurfaceDHT:    {DropInvalid},
}

func newDropCounter() *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mesh_p2p_dropped_total",
		Help: "Peer input dropped, by surface (topic: gossipsub messages; stream: request/response streams; dht: DHT records) and reason; topic reason slow_peer counts gossip not sent to a peer too slow to take it.",
	}, []string{"surface", "reason"})
	for s, reasons := range dropSeries {
		for _, r := range reasons {
			c.WithLabelValues(s, r) // export zeros, so that alerts see the series
		}
	}
	return c
}

func (h *Host) dropped(surface, reason string) { h.drops.WithLabelValues(surface, reason).Inc() }

// countingValidator counts the DHT records its validator refuses: records
// peers put to this node and records its own lookups receive.
type countingValidator struct {
	record.Validator
	h *Host
}

func (v countingValidator) Validate(key string, value []byte) error {
	err := v.Validator.Validate(key, value)
	if err != nil {
		v.h.dropped(SurfaceDHT, DropInvalid)
	}
	return err
}

// signatureDrops counts the messages gossipsub itself refuses for their
// signature, before any topic validator sees them: unsigned (StrictSign),
// or signed by another key than their origin's. Gossipsub penalises the
// peer that sent them as it does an invalid message, and they are counted
// as one (reason invalid), on their topic. It is a pubsub.RawTracer that
// only listens to rejections; a tracer is called from gossipsub's own
// goroutines and must not block.
type signatureDrops struct{ h *Host }

var _ pubsub.RawTracer = signatureDrops{}

func (s signatureDrops) RejectMessage(m *pubsub.Message, reason string) {
	switch reason {
	case pubsub.RejectMissingSignature, pubsub.RejectInvalidSignature,
		pubsub.RejectUnexpectedSignature, pubsub.RejectUnexpectedAuthInfo:
	default:
		return // a validator's verdict (counted by Topic.validator), or no fault of the peer's
	}
	s.h.mu.Lock()
	tp := s.h.topics[m.GetTopic()]
	s.h.mu.Unlock()
	if tp == nil {
		s.h.dropped(SurfaceTopic, DropInvalid)
		return
	}
	tp.drop(DropInvalid)
}

func (signatureDrops) Join(string)                              {}
func (signatureDrops) Leave(string)                             {}
func (signatureDrops) Graft(peer.ID, string)                    {}
func (signatureDrops) Prune(peer.ID, string)                    {}
func (signatureDrops) ValidateMessage(*pubsub.Message)          {}
func (signatureDrops) DeliverMessage(*pubsub.Message)           {}
func (signatureDrops) DuplicateMessage(*pubsub.Message)         {}
func (signatureDrops) ThrottlePeer(peer.ID)                     {}
func (signatureDrops) RecvRPC(*pubsub.RPC)                      {}
func (signatureDrops) SendRPC(*pubsub.RPC, peer.ID)             {}
func (signatureDrops) DropRPC(*pubsub.RPC, peer.ID)             {}
func (signatureDrops) UndeliverableMessage(*pubsub.Message)     {}
func (signatureDrops) OnNewOutboundStream(peer.ID, protocol.ID) {}
func (signatureDrops) OnClosedOutboundStream(peer.ID)           {}
