package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentmesh/mesh/internal/admission"
	"github.com/agentmesh/mesh/internal/cmdlog"
	"github.com/agentmesh/mesh/internal/safefetch"
	"github.com/agentmesh/mesh/registryapi"
)

// The directory probes each registered agent's endpoint: it fetches the
// agent's card from <endpoint>/.well-known/agent.json (agent-card.json
// when that is 404), at most once every Config.Cards.Refresh per agent.
// What it finds feeds the agent's liveness (registryapi.Liveness, which
// travels to the other nodes with the heartbeats), and a card that differs
// from the one kept is proposed to the log (registryapi.CardOp), unless
// the agent hands its card over with its registration. Fetches go through
// internal/safefetch: the SSRF rules are there.

const (
	// probeScan bounds the rows one round reads.
	probeScan = 1000
	// probeTickMin and probeTickMax clamp a round's pace (Refresh/10).
	probeTickMin = 20 * time.Millisecond
	probeTickMax = 5 * time.Second
	// maxFirstQueue bounds the new registrations waiting for their first
	// probe; past it the walk finds them.
	maxFirstQueue = 10_000
)

// cardProber is the directory's probing state. Probes go in two lanes,
// each with Concurrency fetches at most: the walk, which goes round the
// rows and probes each agent every Refresh, and the first probes of new
// registrations, queued as they commit, at most a quarter of whose
// fetches go to one endpoint host. Endpoints that answer slowly (a byte
// a second until the fetch's deadline) hold only the walk's fetches and
// their own host's share of the first probes: a new agent elsewhere is
// probed at once.
type cardProber struct {
	n     *Node
	cfg   CardFetch
	fetch *safefetch.Client
	walk  chan struct{} // the walk's concurrency bound
	first chan struct{} // the first probes' concurrency bound
	wake  chan struct{} // a registration was queued, or a first probe ended
	mu    sync.Mutex
	busy  map[string]bool // agents whose probe is under way
	queue []string        // new registrations, oldest first
	hosts map[string]int  // first probes under way, by endpoint host
	after string          // where the walk's next round resumes
	wg    sync.WaitGroup
	// probes counts probes by result (reachable, unreachable); cards the
	// fetched cards that changed and were proposed.
	probes *prometheus.CounterVec
	cards  prometheus.Counter
}

func newCardProber(n *Node) *cardProber {
	allow, _ := safefetch.ParseAllow(n.cfg.Cards.Allow) // checked by Validate
	c := n.cfg.Cards
	p := &cardProber{n: n, cfg: c, busy: map[string]bool{}, hosts: map[string]int{},
		walk: make(chan struct{}, c.Concurrency), first: make(chan struct{}, c.Concurrency), wake: make(chan struct{}, 1),
		fetch: safefetch.New(safefetch.Config{Allow: allow, Timeout: c.Timeout, MaxBytes: c.MaxBytes, MaxRedirects: c.Redirects}),
		probes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mesh_card_probes_total", Help: "Probes of agents' endpoints (fetches of their cards) by result: reachable or unreachable.",
		}, []string{"result"}),
		cards: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mesh_cards_fetched_total", Help: "Fetched cards that differed from the kept one and were proposed to the log.",
		}),
	}
	n.metrics.MustRegister(p.probes, p.cards)
	return p
}

// probeCards runs the probes until ctx ends, on the node that orders the
// log (the single directory, or the quorum's leader).
func (n *Node) probeCards(ctx context.Context) {
	p := n.prober
	if p == nil {
		return
	}
	defer p.wg.Wait()
	tick := min(max(n.cfg.Cards.Refresh/10, probeTickMin), probeTickMax)
	p.wg.Go(func() {
		every(ctx, tick, func() {
			if n.view.isDirectory() {
				p.round(ctx)
			}
		})
	})
	everyOrWoken(ctx, tick, p.wake, func() {
		if n.view.isDirectory() {
			p.startFirst(ctx)
		}
	})
}

// committed queues the agents a committed entry registered for their
// first probe; the node that orders the log calls it for each entry.
func (p *cardProber) committed(e cmdlog.Entry) {
	ids := registryapi.RegisteredAgents(&e)
	if len(ids) == 0 {
		return
	}
	p.mu.Lock()
	for _, id := range ids {
		if len(p.queue) < maxFirstQueue {
			p.queue = append(p.queue, id)
		}
	}
	p.mu.Unlock()
	signal(p.wake)
}

// startFirst starts the first probes queued whose host has room, while
// the lane has.
func (p *cardProber) startFirst(ctx context.Context) {
	p.mu.Lock()
	queue := p.queue
	p.queue = nil
	p.mu.Unlock()
	var left []string
	for i, id := range queue {
		t, ok := p.n.dir.FirstProbe(id)
		if !ok {
			continue // gone, without an endpoint, or probed already
		}
		host := endpointHost(t.Endpoint)
		if !p.claimFirst(id, host) {
			left = append(left, id)
			continue
		}
		select {
		case p.first <- struct{}{}:
		default:
			p.releaseFirst(id, host)
			left = append(left, queue[i:]...)
			p.requeue(left)
			return
		}
		p.wg.Go(func() {
			defer signal(p.wake)
			defer p.releaseFirst(id, host)
			defer func() { <-p.first }()
			p.probe(ctx, t)
		})
	}
	p.requeue(left)
}

// requeue puts ids back at the head of the queue.
func (p *cardProber) requeue(ids []string) {
	if len(ids) == 0 {
		return
	}
	p.mu.Lock()
	p.queue = append(ids, p.queue...)
	p.mu.Unlock()
}

// claimFirst claims agent id for a first probe unless its probe is under
// way, or its host holds its share of the lane.
func (p *cardProber) claimFirst(id, host string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.busy[id] || p.hosts[host] >= max(1, p.cfg.Concurrency/4) {
		return false
	}
	p.busy[id] = true
	p.hosts[host]++
	return true
}

func (p *cardProber) releaseFirst(id, host string) {
	p.mu.Lock()
	delete(p.busy, id)
	if p.hosts[host]--; p.hosts[host] == 0 {
		delete(p.hosts, host)
	}
	p.mu.Unlock()
}

// endpointHost is the host an endpoint's fetches go to, for the first
// probes' share per host.
func endpointHost(endpoint string) string {
	u, err := url.Parse(endpoint)
	if err != nil {
		return ""
	}
	return strings.ToLower(u.Hostname())
}

// round starts the walk's probes due among the next rows.
func (p *cardProber) round(ctx context.Context) {
	due, next, err := p.n.dir.ProbesDue(p.after, probeScan, probeScan, p.n.cfg.Now(), p.cfg.Refresh)
	if err != nil {
		p.n.log.Warn("listing the agents to probe", "err", err)
		return
	}
	p.after = next
	for _, t := range due {
		if !p.claim(t.AgentID) {
			continue
		}
		select {
		case p.walk <- struct{}{}:
		case <-ctx.Done():
			p.release(t.AgentID)
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer func() { <-p.walk }()
			defer p.release(t.AgentID)
			p.probe(ctx, t)
		}()
	}
}

func (p *cardProber) claim(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.busy[id] {
		return false
	}
	p.busy[id] = true
	return true
}

func (p *cardProber) release(id string) {
	p.mu.Lock()
	delete(p.busy, id)
	p.mu.Unlock()
}

// probe fetches t's card, records what it found and proposes a changed card.
func (p *cardProber) probe(ctx context.Context, t registryapi.ProbeTarget) {
	raw, err := p.fetchCard(ctx, t.Endpoint)
	if err == nil {
		if verr := registryapi.ValidateFullCard(raw); verr != nil {
			err = errors.New("the card is not usable: " + verr.Error())
		}
	}
	if ctx.Err() != nil {
		return // the node stops: not the agent's failure
	}
	result := registryapi.LiveReachable
	if err != nil {
		result = registryapi.LiveUnreachable
	}
	p.probes.WithLabelValues(result).Inc() // counted before it shows
	p.n.dir.RecordProbe(t.AgentID, t.Reg, t.Endpoint, p.n.cfg.Now(), publicReason(err))
	if err != nil || t.Pushed {
		return
	}
	// The directory's own housekeeping: no write budget holds it back;
	// only a changed card takes a log entry.
	proposed, err := p.n.dir.ProposeCard(admission.Unmetered(ctx), p.n.orderer, p.n.cfg.Now(), t.AgentID, t.Reg, raw)
	if err != nil && ctx.Err() == nil {
		p.n.log.Warn("proposing a fetched card", "agent", t.AgentID, "err", err)
	}
	if proposed {
		p.cards.Inc()
	}
}

// publicReason is err as every node's page shows it: a refused address by
// its class only, not the address, which the directory's resolver (maybe
// one that answers for internal names) found for the stranger who
// registered the endpoint; a failed lookup without the resolver's address;
// a failed connection without the address it tried.
func publicReason(err error) error {
	var fe *safefetch.ForbiddenError
	var de *net.DNSError
	var oe *net.OpError
	switch {
	case errors.As(err, &fe):
		return fmt.Errorf("%w: the endpoint leads to an address that is %s", safefetch.ErrForbidden, fe.Why)
	case errors.As(err, &de):
		why := "the lookup failed" // its own words may name the resolver
		switch {
		case de.IsNotFound:
			why = "no such host"
		case de.IsTimeout:
			why = "the lookup timed out"
		}
		return fmt.Errorf("%w: lookup %s: %s", safefetch.ErrUnreachable, de.Name, why)
	case errors.As(err, &oe) && oe.Err != nil:
		return fmt.Errorf("%w: %s: %s", safefetch.ErrUnreachable, oe.Op, causeOf(oe.Err))
	}
	return err
}

// causeOf is what a failed connection says without an address: the
// system call's error (connection refused, no route to host...).
func causeOf(err error) string {
	var se *os.SyscallError
	if errors.As(err, &se) {
		return se.Err.Error()
	}
	return err.Error()
}

// fetchCard reads the card at endpoint's well-known paths.
func (p *cardProber) fetchCard(ctx context.Context, endpoint string) ([]byte, error) {
	raw, err := p.fetch.Get(ctx, cardURL(endpoint, "agent.json"), "application/json")
	var se *safefetch.StatusError
	if errors.As(err, &se) && se.Code == 404 {
		return p.fetch.Get(ctx, cardURL(endpoint, "agent-card.json"), "application/json")
	}
	return raw, err
}

// cardURL is the URL of the well-known file name under endpoint's path,
// without the endpoint's query or fragment: appended to those, the
// well-known path would be a query value or a fragment, and a stranger
// could aim the directory's GET at any URL of a host.
func cardURL(endpoint, name string) string {
	u, err := url.Parse(endpoint)
	if err != nil {
		return "" // registration checked it; safefetch refuses ""
	}
	u.Path = strings.TrimRight(u.Path, "/") + "/.well-known/" + name
	u.User = nil // never sent as Basic auth: rows of earlier releases may carry some
	u.RawPath, u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = "", "", false, "", ""
	return u.String()
}
