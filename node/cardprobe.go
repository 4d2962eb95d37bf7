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
)

// cardProber is the directory's probing state.
type cardProber struct {
	n     *Node
	cfg   CardFetch
	fetch *safefetch.Client
	slots chan struct{} // global concurrency bound
	mu    sync.Mutex
	busy  map[string]bool // agents whose probe is under way
	after string          // where the next round resumes
	wg    sync.WaitGroup
	// probes counts probes by result (reachable, unreachable); cards the
	// fetched cards that changed and were proposed.
	probes *prometheus.CounterVec
	cards  prometheus.Counter
}

func newCardProber(n *Node) *cardProber {
	allow, _ := safefetch.ParseAllow(n.cfg.Cards.Allow) // checked by Validate
	c := n.cfg.Cards
	p := &cardProber{n: n, cfg: c, busy: map[string]bool{}, slots: make(chan struct{}, c.Concurrency),
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
	if n.cfg.Cards.Refresh <= 0 {
		return
	}
	p := newCardProber(n)
	defer p.wg.Wait()
	every(ctx, min(max(n.cfg.Cards.Refresh/10, probeTickMin), probeTickMax), func() {
		if n.view.isDirectory() {
			p.round(ctx)
		}
	})
}

// round starts the probes due among the next rows.
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
		case p.slots <- struct{}{}:
		case <-ctx.Done():
			p.release(t.AgentID)
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer func() { <-p.slots }()
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
	u.RawPath, u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = "", "", false, "", ""
	return u.String()
}
