package node

import (
	"context"
	"encoding/json"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentmesh/mesh/internal/cmdlog"
	"github.com/agentmesh/mesh/p2p"
	"github.com/agentmesh/mesh/registryapi"
)

// publisher spreads what the directory commits: every entry on the
// directory topic, and the DHT records of agents whose registration the
// agent signed. Both queues are bounded and never block a commit: a change
// lost here is fetched by replicas when they catch up, a record by the next
// republish.
type publisher struct {
	n       *Node
	topic   *p2p.Topic
	changes chan cmdlog.Entry
	records chan string // agent ids whose record to (re)publish
	puts    *prometheus.CounterVec
}

func newPublisher(n *Node, topic *p2p.Topic) *publisher {
	p := &publisher{n: n, topic: topic,
		changes: make(chan cmdlog.Entry, 4096), records: make(chan string, 4096),
		puts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mesh_dht_record_puts_total",
			Help: "Agent records put into the DHT, by result: ok (stored on the closest peers) or local (only this node holds it).",
		}, []string{"result"}),
	}
	n.metrics.MustRegister(p.puts)
	return p
}

// committed is the directory log's OnCommit hook; it runs under the log's lock.
func (p *publisher) committed(e cmdlog.Entry) {
	select {
	case p.changes <- e:
	default:
	}
	if id, ok := registryapi.SignedRegistration(&e); ok {
		p.queueRecord(id)
	}
}

func (p *publisher) queueRecord(id string) {
	select {
	case p.records <- id:
	default:
	}
}

func (p *publisher) run(ctx context.Context) {
	p.n.goroutine(func() { p.runRecords(ctx) })
	for {
		select {
		case <-ctx.Done():
			return
		case e := <-p.changes:
			b, err := json.Marshal(e)
			if err == nil {
				err = p.topic.Publish(ctx, b)
			}
			if err != nil && ctx.Err() == nil {
				p.n.log.Warn("publishing a directory change failed", "seq", e.Seq, "err", err)
			}
		}
	}
}

// runRecords publishes queued records and republishes all of them every
// RepublishInterval, well inside their RecordTTL.
func (p *publisher) runRecords(ctx context.Context) {
	tick := time.NewTicker(registryapi.RepublishInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case id := <-p.records:
			p.putRecord(ctx, id)
		case <-tick.C:
			p.n.dir.Agents(func(a *registryapi.Agent) bool {
				if a.Record != nil {
					p.queueRecord(a.ID)
				}
				return ctx.Err() == nil
			})
		}
	}
}

func (p *publisher) putRecord(ctx context.Context, id string) {
	a, err := p.n.dir.Agent(id)
	if err != nil || a.Record == nil {
		return // deregistered meanwhile, or no signed registration
	}
	rec, val, err := registryapi.NewRecord(*a.Record, p.n.key, time.Now())
	if err != nil {
		p.n.log.Warn("agent record not publishable", "agent", id, "err", err)
		return
	}
	for _, key := range registryapi.RecordKeys(rec.DID, rec.AgentID) {
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		// The node stores its own copy first; an error here only means no
		// other DHT server took one yet.
		if err := p.n.host.PutValue(pctx, key, val); err != nil {
			p.n.log.Debug("DHT put incomplete", "key", key, "err", err)
			p.puts.WithLabelValues("local").Inc()
		} else {
			p.puts.WithLabelValues("ok").Inc()
		}
		cancel()
	}
}
