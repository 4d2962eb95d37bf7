package wall

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	messages      prometheus.Counter
	slow          prometheus.Counter
	publishFailed prometheus.Counter
	paced         *prometheus.CounterVec
	closed        *prometheus.CounterVec
	acksShort     prometheus.Counter
}

func newMetrics(s *Service, reg prometheus.Registerer) *metrics {
	m := &metrics{
		messages: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mesh_wall_messages_total", Help: "Messages sent by sockets on this node.",
		}),
		slow: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mesh_wall_slow_consumers_total", Help: "Sockets closed because they fell behind: their send queue was full, or the node's send memory was spent.",
		}),
		publishFailed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mesh_wall_publish_failures_total", Help: "Messages, presence deltas and beats this node failed to publish on a cluster topic.",
		}),
		paced: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mesh_wall_paced_total", Help: "Client frames the node took later than they came, pacing the socket to a rate (limit: socket, cluster, or mesh: what other nodes take from this one); none is dropped.",
		}, []string{"limit"}),
		closed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mesh_wall_sockets_closed_total", Help: "Sockets closed, by reason.",
		}, []string{"reason"}),
		acksShort: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mesh_wall_acks_short_total", Help: "Acks sent before every node serving the cluster reported its deliveries (within the ack window): a node shed the message, lost it or is slow.",
		}),
	}
	for _, l := range []string{paceSocket, paceCluster, paceMesh} {
		m.paced.WithLabelValues(l)
	}
	for _, l := range closeLabels {
		m.closed.WithLabelValues(l)
	}
	if reg == nil {
		return m
	}
	reg.MustRegister(m.messages, m.slow, m.publishFailed, m.paced, m.closed, m.acksShort,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "mesh_wall_sockets", Help: "Open wall sockets on this node.",
		}, func() float64 { return float64(len(s.allSockets())) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "mesh_wall_rooms", Help: "Clusters with at least one socket on this node.",
		}, func() float64 { s.mu.Lock(); defer s.mu.Unlock(); return float64(len(s.rooms)) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "mesh_wall_send_queued_bytes", Help: "Bytes of the frames waiting for this node's sockets or being written to them (bounded by the wall's SendMemory).",
		}, func() float64 { return float64(s.sendMemory.used.Load()) }),
	)
	return m
}

// socketClosed counts a socket closed for c.
func (m *metrics) socketClosed(c *closeCause) {
	m.closed.WithLabelValues(c.label).Inc()
	if c == causeSlow || c == causeMemory {
		m.slow.Inc()
	}
}
