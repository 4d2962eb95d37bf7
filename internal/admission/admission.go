package admission

import (
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/agentmesh/mesh/internal/httpx"
	"github.com/agentmesh/mesh/internal/ratelimit"
)

// The budgets; a refusal's reason names its budget.
const (
	Client     = "client"
	Credential = "credential"
	Node       = "node"
	Directory  = "directory"
	// Search is a read's budget: searches (POST /v1/search) per client
	// address, on every node.
	Search = "search"
)

var budgetNames = []string{Client, Credential, Node, Directory, Search}

// Config sizes the budgets. The zero value is unlimited everywhere; a
// node starts from DefaultConfig.
type Config struct {
	// Client is the budget of each client address (an IPv4 address, an
	// IPv6 /64) for writes without an established credential.
	Client Budget `json:"client"`
	// Credential is the budget of each established credential.
	Credential Budget `json:"credential"`
	// Node is, at the directory, the budget of each node forwarding or
	// proposing writes to it.
	Node Budget `json:"node"`
	// Directory is, at the directory, the budget of the log: every write
	// it takes, from anywhere.
	Directory Budget `json:"directory"`
	// Search is the budget of each client address (as Client) for
	// searches, the one read that costs more than a lookup. Metered by the
	// search handler itself (Admit), not by Writes. A node sizes it from
	// its own search settings (--search-rate, --search-burst).
	Search Budget `json:"search"`
}

// Defaults: far above what honest use needs (a client walking through
// the README makes 6 writes; an agent registers, takes a token a day and
// heartbeats every 5 minutes; a node forwards its clients' writes), and
// far below what a loop of curl sends.
var (
	DefaultClient     = Budget{Rate: 5, Burst: 100}
	DefaultCredential = Budget{Rate: 5, Burst: 100}
	DefaultNode       = Budget{Rate: 200, Burst: 2000}
	DefaultDirectory  = Budget{Rate: 2000, Burst: 4000}
)

// DefaultConfig returns the budgets of `mesh node` without flags.
func DefaultConfig() Config {
	return Config{Client: DefaultClient, Credential: DefaultCredential, Node: DefaultNode, Directory: DefaultDirectory}
}

// Validate reports the first malformed budget.
func (c *Config) Validate() error {
	for _, b := range []Budget{c.Client, c.Credential, c.Node, c.Directory, c.Search} {
		if err := b.validate(); err != nil {
			return err
		}
	}
	return nil
}

// maxKeys bounds the buckets of each budget (ratelimit.Keyed forgets full
// ones first): some 200 bytes each, 13 MiB per budget at most.
const maxKeys = 65536

// sheddingWindow is how long a refusal shows in Status.
const sheddingWindow = time.Minute

// Errors of refused writes.
var (
	// ErrRateLimited: the client is over its own budget.
	ErrRateLimited = httpx.ErrRateLimited
	// ErrDirectoryBusy: the directory sheds load; the client is not at fault.
	ErrDirectoryBusy = httpx.E(http.StatusServiceUnavailable, "directory_busy",
		"the directory is taking no more writes for now; retry after Retry-After seconds")
	// ErrSearchRateLimited: the client is over its search budget.
	ErrSearchRateLimited = httpx.E(http.StatusTooManyRequests, "search_rate_limited",
		"too many searches from this address; retry after Retry-After seconds")
)

// Admitter holds the budgets of one node. It is safe for concurrent use.
type Admitter struct {
	now     func() time.Time
	mu      sync.Mutex // takes from the buckets (Admit)
	budgets map[string]*budget
	refused *prometheus.CounterVec
	// dirShed is when this node last heard the directory refuse one of
	// its writes for the directory's sake (node or directory budget).
	dirShed atomic.Int64
	// self is, on the directory, its own peer id (SetDirectory).
	self string
}

// SetDirectory tells a that it serves the directory, whose node is peer
// self: the writes of its own clients then take from its own node budget
// too. Call it before serving.
func (a *Admitter) SetDirectory(self string) { a.self = self }

type budget struct {
	name    string
	size    Budget
	buckets *ratelimit.Keyed[string]
	last    atomic.Int64 // unix ns of the last refusal
}

// New returns the budgets of cfg, their refusals counted in reg (nil: not
// exported). Budgets measure load in real time, whatever clock the node
// runs its business on (tests set that one).
func New(cfg Config, reg prometheus.Registerer) (*Admitter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	a := &Admitter{now: time.Now, budgets: map[string]*budget{},
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mesh_admission_refused_total",
			Help: "Requests refused by a budget (reason: client, credential, node, directory, search) or by the forward stream (reason: route, origin, client_addr), by surface.",
		}, []string{"surface", "reason"}),
	}
	sizes := map[string]Budget{Client: cfg.Client, Credential: cfg.Credential, Node: cfg.Node, Directory: cfg.Directory, Search: cfg.Search}
	for name, size := range sizes {
		b := &budget{name: name, size: size}
		if !size.Unlimited() {
			b.buckets = ratelimit.NewKeyed[string](rate.Limit(size.Rate), size.burst(), maxKeys)
		}
		a.budgets[name] = b
	}
	if reg != nil {
		reg.MustRegister(a.refused)
	}
	return a, nil
}

// Key names the bucket of one budget a write takes from.
type Key struct {
	Budget string
	ID     string
}

// Admit takes a token from the bucket of each key for a write on surface
// (register, feedback...), or none if any bucket is empty: then it counts
// the refusal and returns ErrRateLimited or ErrDirectoryBusy with the wait
// until that bucket holds a token. Keys of unlimited budgets cost nothing.
//
// Checks and takes happen under one lock, so that a write refused by one
// bucket takes nothing from the others without any give-back (the
// reservations of x/time/rate give back less than they took when others
// reserved meanwhile, which a flood would turn into a bucket in debt for
// ever).
func (a *Admitter) Admit(surface string, keys ...Key) error {
	now := a.now()
	var limiters [4]*rate.Limiter // a write falls under at most a few budgets
	taken := limiters[:0]
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, k := range keys {
		b, l := a.bucket(k, now)
		if l == nil {
			continue
		}
		if tokens := l.TokensAt(now); tokens < 1 {
			wait := time.Duration((1 - tokens) / b.size.Rate * float64(time.Second))
			return a.refuse(surface, b, now, wait)
		}
		taken = append(taken, l)
	}
	for _, l := range taken {
		l.AllowN(now, 1) // holds a token: checked under the lock
	}
	return nil
}

// bucket is the budget of k and its bucket for k.ID; nil for a budget
// that is unlimited. Call it under a.mu.
func (a *Admitter) bucket(k Key, now time.Time) (*budget, *rate.Limiter) {
	b := a.budgets[k.Budget]
	if b == nil || b.buckets == nil {
		return b, nil
	}
	return b, b.buckets.Bucket(k.ID, now)
}

func (a *Admitter) refuse(surface string, b *budget, now time.Time, wait time.Duration) error {
	b.last.Store(now.UnixNano())
	a.Refused(surface, b.name)
	rateDesc := fmt.Sprintf("%g a second, bursts of %d", b.size.Rate, b.size.burst())
	switch b.name {
	case Client:
		return ErrRateLimited.With("too many writes from this address (at most %s); retry after %d s", rateDesc, httpx.RetryAfterSeconds(wait)).After(wait)
	case Credential:
		return ErrRateLimited.With("too many writes by this agent (at most %s); retry after %d s", rateDesc, httpx.RetryAfterSeconds(wait)).After(wait)
	case Search:
		return ErrSearchRateLimited.With("too many searches from this address (at most %s); retry after %d s", rateDesc, httpx.RetryAfterSeconds(wait)).After(wait)
	case Node:
		return ErrDirectoryBusy.With("the directory takes at most %s from each node, and the node you called is over it; retry after %d s, or through another node", rateDesc, httpx.RetryAfterSeconds(wait)).After(wait)
	default:
		return ErrDirectoryBusy.With("the directory is at its write capacity (%s); retry after %d s", rateDesc, httpx.RetryAfterSeconds(wait)).After(wait)
	}
}

// Refused counts a request refused on surface for reason: a budget, or
// why the forward stream refused it.
func (a *Admitter) Refused(surface, reason string) {
	a.refused.WithLabelValues(surface, reason).Inc()
}

// DirectoryShed records that the directory refused a write of this node's
// for its own sake (ErrDirectoryBusy), for Status.
func (a *Admitter) DirectoryShed() { a.dirShed.Store(a.now().UnixNano()) }

// Status is what /health says of admission.
type Status struct {
	// Shedding: this node refused writes, or searches, over a budget in
	// the last minute.
	Shedding bool `json:"shedding"`
	// Budgets are the budgets it refused writes over.
	Budgets []string `json:"budgets,omitempty"`
	// DirectoryShedding: the directory refused writes for its own sake (a
	// node over its budget, or the log at its capacity) in the last
	// minute: on the directory, its own refusals; elsewhere, its answers
	// to this node's writes.
	DirectoryShedding bool `json:"directory_shedding"`
}

// Status reports the refusals of the last minute.
func (a *Admitter) Status() Status {
	now := a.now().UnixNano()
	recent := func(t int64) bool { return t != 0 && now-t < int64(sheddingWindow) }
	var s Status
	for _, name := range budgetNames {
		if recent(a.budgets[name].last.Load()) {
			s.Budgets = append(s.Budgets, name)
		}
	}
	s.Shedding = len(s.Budgets) > 0
	s.DirectoryShedding = recent(a.dirShed.Load()) ||
		slices.Contains(s.Budgets, Node) || slices.Contains(s.Budgets, Directory)
	return s
}
