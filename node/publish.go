package node

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/agentmesh/mesh/internal/cmdlog"
	"github.com/agentmesh/mesh/p2p"
	"github.com/agentmesh/mesh/registryapi"
)

// Pace of DHT puts: at most putsInFlight at once (each is a Kademlia
// lookup and a store on the closest peers) and putsPerSecond in all, so a
// republish of every record neither floods the network nor takes the
// directory's CPU (each put signs a record): 100,000 agents take a few
// minutes when puts are quick and stay far inside RepublishInterval when
// they are slow.
const (
	putsInFlight  = 4
	putsPerSecond = 2000
	putTimeout    = 30 * time.Second
	// republishPage is how many agents one read transaction lists.
	republishPage = 256
	// smallDHT: while the routing table holds fewer DHT servers than a
	// Kademlia bucket (20), every server is among the closest peers of
	// every key, so one that connects is handed all records at once.
	// Beyond that, new servers get what they are closest to from the
	// periodic republish, as Kademlia intends.
	smallDHT = 20
	// A failed put (no DHT server answered in time) is tried again after
	// putRetry, the wait doubling while retries keep failing, up to
	// putRetryMax; the next RepublishInterval covers it anyway.
	putRetry    = time.Minute
	putRetryMax = time.Hour
)

// publisher spreads what the directory commits: every entry on the
// directory topic, and the agents' records and tombstones in the DHT.
//
// A change lost on the topic is fetched by replicas when they catch up, so
// that queue is bounded and drops when full. DHT values are never dropped:
// agents whose values changed wait in a set (bounded by the directory's
// size), those whose put failed are tried again with backoff, and
// everything is published again when the directory starts, when a DHT
// server connects to a small DHT, and every RepublishInterval.
type publisher struct {
	n       *Node
	topics  dirTopics
	changes chan cmdlog.Entry

	mu      sync.Mutex
	pending map[string]bool // agent ids whose DHT values changed
	failed  map[string]bool // agent ids a put of which failed
	wake    chan struct{}   // pending is not empty
	resync  chan struct{}   // republish everything; requests coalesce
	joined  chan struct{}   // a DHT server connected; wake-ups coalesce

	limit *rate.Limiter
	puts  *prometheus.CounterVec
	// gossiped counts the messages and entries published on each
	// directory topic; legacy is whether the last entries went to
	// legacyDirectoryTopic too.
	gossiped *prometheus.CounterVec
	legacy   atomic.Bool
	// putValue stores a DHT value (the host's PutValue); retryAfter is the
	// first wait before failed puts are tried again (putRetry). Both are
	// guarded by mu, so that a test can change them.
	putValue   func(ctx context.Context, key string, value []byte) error
	retryAfter time.Duration
}

// Results of a DHT put, as counted by mesh_dht_record_puts_total.
const (
	putOK     = "ok"     // stored here and on the closest DHT servers
	putLocal  = "local"  // stored here only: no other DHT server was found
	putFailed = "failed" // not stored (logged)
)

// newPublisher returns the directory's publisher; it publishes on the
// directory topic once run.
func newPublisher(n *Node) *publisher {
	p := &publisher{n: n, changes: make(chan cmdlog.Entry, 4096),
		pending: map[string]bool{}, failed: map[string]bool{}, wake: make(chan struct{}, 1), resync: make(chan struct{}, 1),
		joined: make(chan struct{}, 1),
		limit:  rate.NewLimiter(putsPerSecond, putsInFlight),
		puts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mesh_dht_record_puts_total",
			Help: "Agent records and tombstones put into the DHT by the directory, by result: ok (stored on the closest DHT servers), local (only this node holds it: no other DHT server found) or failed.",
		}, []string{"result"}),
		gossiped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mesh_directory_gossip_total",
			Help: "What this node published of the directory's log, by topic (mesh/directory/2: batches; mesh/directory/1: one entry a message, for nodes of earlier releases) and unit (messages, entries).",
		}, []string{"topic", "unit"}),
		retryAfter: putRetry,
		putValue: func(ctx context.Context, key string, value []byte) error {
			return n.host.PutValue(ctx, key, value) // the host starts after the publisher
		},
	}
	for _, r := range []string{putOK, putLocal, putFailed} {
		p.puts.WithLabelValues(r) // export zeros, so that alerts see the series
	}
	for _, t := range []string{directoryTopic, legacyDirectoryTopic} {
		for _, u := range []string{"messages", "entries"} {
			p.gossiped.WithLabelValues(t, u)
		}
	}
	n.metrics.MustRegister(p.puts, p.gossiped)
	return p
}

// ordered is what the node that orders the log does with each entry it
// commits: it publishes it, and queues the agents it registered for their
// first probe. It runs under the log's lock.
func (n *Node) ordered(e cmdlog.Entry) {
	n.publisher.committed(e)
	if n.prober != nil {
		n.prober.committed(e)
	}
}

// committed publishes e.
func (p *publisher) committed(e cmdlog.Entry) {
	select {
	case p.changes <- e:
	default:
	}
	if ids := registryapi.PublishedAgents(&e); len(ids) > 0 {
		p.mu.Lock()
		for _, id := range ids {
			p.pending[id] = true
		}
		p.mu.Unlock()
		signal(p.wake)
	}
}

// dhtServerConnected is the host's OnDHTServer hook. It may run while the
// host is still starting (before n.host is set), so it only signals:
// runRecords reads the routing table.
func (p *publisher) dhtServerConnected(peer.ID) {
	signal(p.joined)
}

// signal wakes the reader of c; a wake-up already pending covers this one.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// run publishes the entries committed on the directory's topics, as
// many at once as committed while the last were published (gossip), and
// the DHT records (runRecords).
func (p *publisher) run(ctx context.Context) {
	p.n.goroutine(func() { p.runRecords(ctx) })
	for {
		select {
		case <-ctx.Done():
			return
		case e := <-p.changes:
			es := []cmdlog.Entry{e}
			for len(es) < maxGossipEntries && len(p.changes) > 0 {
				es = append(es, <-p.changes)
			}
			p.gossip(ctx, es)
		}
	}
}

// runRecords publishes the DHT values of changed agents as they come, and
// all of them at start (a DHT server that lost its values, one in memory
// or without its DATA/dht, gets them back, and the others' are renewed),
// on request and every RepublishInterval, well inside their RecordTTL.
func (p *publisher) runRecords(ctx context.Context) {
	tick := time.NewTicker(registryapi.RepublishInterval)
	defer tick.Stop()
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	retries, armed := 0, false // retries: rounds in a row that failed
	signal(p.resync)
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.wake:
			p.publishPending(ctx)
		case <-p.resync:
			p.republish(ctx)
		case <-p.joined:
			if p.n.host.DHTServers() < smallDHT {
				p.republish(ctx)
			}
		case <-tick.C:
			p.republish(ctx)
		case <-retry.C:
			armed = false
			p.retryFailed(ctx)
			retries = min(retries+1, 16)
		}
		switch failing := p.failing(); {
		case !failing && !armed:
			retries = 0
		case failing && !armed:
			retry.Reset(min(p.firstRetry()<<retries, putRetryMax))
			armed = true
		}
	}
}

// republish publishes every agent's values, a page at a time, letting
// changes made meanwhile through between pages.
func (p *publisher) republish(ctx context.Context) {
	for after := ""; ctx.Err() == nil; {
		ids, err := p.n.dir.PublishedIDs(after, republishPage)
		if err != nil {
			p.n.log.Error("listing agents to republish failed", "after", after, "err", err)
			return
		}
		if len(ids) == 0 {
			return
		}
		p.publish(ctx, ids)
		p.publishPending(ctx)
		after = ids[len(ids)-1]
	}
}

func (p *publisher) publishPending(ctx context.Context) {
	p.mu.Lock()
	ids := slices.Sorted(maps.Keys(p.pending))
	clear(p.pending)
	p.mu.Unlock()
	p.publish(ctx, ids)
}

// retryFailed puts again the values of the agents whose put failed.
func (p *publisher) retryFailed(ctx context.Context) {
	p.mu.Lock()
	maps.Copy(p.pending, p.failed)
	clear(p.failed)
	p.mu.Unlock()
	p.publishPending(ctx)
}

// failing reports whether puts failed since the last retry.
func (p *publisher) failing() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.failed) > 0
}

// firstRetry is the first wait before failed puts are tried again.
func (p *publisher) firstRetry() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.retryAfter
}

// publish puts the current DHT values of ids, paced, and waits for them.
// Only the node that orders writes publishes (the leader of a quorum,
// which publishes everything again when it takes over).
func (p *publisher) publish(ctx context.Context, ids []string) {
	if !p.n.view.isDirectory() {
		return
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	inFlight := make(chan struct{}, putsInFlight)
	for _, id := range ids {
		pubs, err := p.n.dir.Publications(id, p.n.key, time.Now())
		if err != nil {
			p.n.log.Warn("agent record not publishable", "agent", id, "err", err)
			p.puts.WithLabelValues(putFailed).Inc()
			continue
		}
		// An agent's publications are put one after the other: they
		// carry the same record (under its did and its agent id), which
		// the DHT's validator decodes whole once and checks again from
		// its head (registryapi.RecordValidator); put at once, each
		// decoded it, request and card.
		inFlight <- struct{}{}
		wg.Go(func() {
			defer func() { <-inFlight }()
			for _, pub := range pubs {
				if p.limit.Wait(ctx) != nil {
					return
				}
				if !p.put(ctx, pub) {
					p.mu.Lock()
					p.failed[id] = true
					p.mu.Unlock()
				}
			}
		})
	}
}

// put stores pub in the DHT; it reports false when the put failed (and
// is to be tried again).
func (p *publisher) put(ctx context.Context, pub registryapi.Publication) bool {
	ctx, cancel := context.WithTimeout(ctx, putTimeout)
	defer cancel()
	p.mu.Lock()
	putValue := p.putValue
	p.mu.Unlock()
	err := putValue(ctx, pub.Key, pub.Value)
	switch {
	case err == nil:
		p.puts.WithLabelValues(putOK).Inc()
	case errors.Is(err, p2p.ErrNoPeer):
		p.puts.WithLabelValues(putLocal).Inc()
	case errors.Is(ctx.Err(), context.Canceled):
		// The node is closing: not a failure of the record.
	default:
		p.n.log.Warn("DHT put failed: tried again later", "key", pub.Key, "err", err)
		p.puts.WithLabelValues(putFailed).Inc()
		return false
	}
	return true
}
