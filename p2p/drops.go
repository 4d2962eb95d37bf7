package p2p

import (
	record "github.com/libp2p/go-libp2p-record"
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
