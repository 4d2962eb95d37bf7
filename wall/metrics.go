package wall

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	messages      prometheus.Counter
	slow          prometheus.Counter
	publishFailed prometheus.Counter
	limited       prometheus.Counter
}

func newMetrics(s *Service, reg prometheus.Registerer) *metrics {
	m := &metrics{
		messages: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mesh_wall_messages_total", Help: "Messages sent by sockets on this node.",
		}),
		slow: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mesh_wall_slow_consumers_total", Help: "Sockets closed because their send queue was full.",
		}),
		publishFailed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mesh_wall_publish_failures_total", Help: "Messages, presence deltas and beats this node failed to publish on a cluster topic.",
		}),
		limited: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mesh_wall_rate_limited_total", Help: "Client frames refused with rate_limited (socket rate, cluster rate).",
		}),
	}
	if reg == nil {
		return m
	}
	reg.MustRegister(m.messages, m.slow, m.publishFailed, m.limited,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "mesh_wall_sockets", Help: "Open wall sockets on this node.",
		}, func() float64 { return float64(len(s.allSockets())) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "mesh_wall_rooms", Help: "Clusters with at least one socket on this node.",
		}, func() float64 { s.mu.Lock(); defer s.mu.Unlock(); return float64(len(s.rooms)) }),
	)
	return m
}
