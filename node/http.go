package node

import (
	"maps"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/agentmesh/mesh/internal/admission"
	"github.com/agentmesh/mesh/internal/httpx"
	"github.com/agentmesh/mesh/internal/openapi"
	"github.com/agentmesh/mesh/internal/site"
	"github.com/agentmesh/mesh/registryapi"
	"github.com/agentmesh/mesh/wall"
	"github.com/agentmesh/mesh/wall/pages"
)

// buildHTTP assembles the bridge: one route table, panic recovery, the
// client address behind trusted proxies, the base URL and request metrics
// around it.
func (n *Node) buildHTTP() error {
	mux := httpx.NewMux()
	pagesSite := site.New(site.Info{Node: shortID(n.host.ID().String()), Role: n.role, Version: Version}, n.log.With("component", "pages"))
	cfg := registryapi.Config{
		Site:              pagesSite,
		Directory:         n.dir,
		Log:               n.proposer,
		Tokens:            n.tokens,
		PublicURL:         n.cfg.PublicURL,
		OnlineWindow:      n.cfg.OnlineWindow,
		IsAdmin:           n.isAdmin,
		Now:               n.cfg.Now,
		Logger:            n.log,
		Admission:         n.admission,
		SolUSD:            n.solUSD,
		ActivationWindow:  n.cfg.AgentActivationWindow,
		SearchConcurrency: n.cfg.SearchConcurrency,
		SearchWait:        n.cfg.SearchWait,
	}
	if n.role == RoleNode {
		cfg.Fallback = n.fallbackAgent
		cfg.KeyFallback = n.fallbackKey
	}
	api, err := registryapi.NewAPI(cfg)
	if err != nil {
		return err
	}
	api.Routes(mux)
	n.wall.Routes(mux)
	clusterPages := pages.New(n.wall, pagesSite)
	clusterPages.Routes(mux)
	pagesSite.Routes(mux, pagesSite.NewHome(site.HomeConfig{Agents: api.OnlineAgents, Clusters: clusterPages.Busiest}))
	mux.Handle("GET /health", httpx.Handle(n.log, n.health))
	mux.Handle("GET /openapi.json", openapi.Handler())
	n.quorumRoutes(mux)
	n.agentRoutes(mux)

	reg := n.metrics
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := newHTTPMetrics(reg)
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "mesh_directory_seq", Help: "Sequence number of the last applied directory command.",
	}, func() float64 { return float64(n.clog.Seq()) }))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "mesh_agents_registered", Help: "Registered agents in the directory.",
	}, func() float64 { return float64(n.dir.AgentCount()) }))
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))

	proxies, err := httpx.ParseProxies(n.cfg.TrustedProxies)
	if err != nil {
		return err
	}
	// Handlers that hand on a copy of the request (with a context value)
	// sit outside the metrics: inside, they would hide from m.wrap the
	// route the mux records in the request.
	n.surfaces = admission.NewSurfaces(registryapi.WriteRoutes(), wall.WriteRoutes(), quorumWrites)
	n.forwarded = admission.NewSurfaces(registryapi.WriteRoutes(), quorumWrites)
	admit := func(next http.Handler) http.Handler {
		return n.admission.Writes(n.surfaces, api.Credential, n.log, next)
	}
	n.mux = mux
	n.handler = httpx.Recover(n.log, httpx.TrustProxies(proxies, n.withBaseURL(admit(m.wrap(n.gated(n.forwardWrites(mux)))))))
	n.forwardMux = httpx.NewMux()
	for _, pattern := range forwardedRoutes() {
		n.forwardMux.Handle(pattern, n.handler)
	}
	return nil
}

// shortID is a peer id as the pages' footer names the node: its first
// and last characters, enough to tell nodes apart.
func shortID(id string) string {
	if len(id) <= 16 {
		return id
	}
	return id[:8] + "…" + id[len(id)-6:]
}

// errStopping answers a request that comes after the node began to stop.
var errStopping = httpx.ErrUnavailable.With("the node is shutting down; retry later, or on another node")

// gated admits the requests the bridge serves while n.requests is open,
// whichever way they come: through the HTTP server, forwarded by another
// node over the mesh, or from the embedded agent. Close closes the gate
// once the HTTP server has stopped, and waits for the requests it
// admitted: the directory's last flush of heartbeats follows, so a
// heartbeat answered 2xx is in it, and none is recorded after it.
func (n *Node) gated(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !n.requests.Enter() {
			httpx.WriteError(n.log, w, r, errStopping)
			return
		}
		defer n.requests.Done()
		next.ServeHTTP(w, r)
	})
}

// withBaseURL gives a node without a known public URL the one each client
// used (its Host header), unless a forwarded request already names one.
func (n *Node) withBaseURL(next http.Handler) http.Handler {
	if !n.baseFromHost {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Host != "" && httpx.BaseURL(r, "") == "" {
			r = r.WithContext(httpx.WithBaseURL(r.Context(), "http://"+r.Host))
		}
		next.ServeHTTP(w, r)
	})
}

// healthView is the body of GET /health.
type healthView struct {
	Status  string   `json:"status"` // ok, or degraded: not connected to the directory or not caught up
	Version string   `json:"version"`
	Role    string   `json:"role"`
	DID     string   `json:"did"`
	PeerID  string   `json:"peer_id"`
	Addrs   []string `json:"addrs"`
	// BrowserAddrs are the addresses a web page dials (WebTransport's and
	// WebRTC-direct's, with their current certificate hashes), and
	// RendezvousBrowserAddrs the rendezvous nodes' (docs/api.md, Browser
	// peers); empty when the node does not listen for browsers.
	BrowserAddrs           []string  `json:"browser_addrs"`
	RendezvousBrowserAddrs []string  `json:"rendezvous_browser_addrs"`
	Peers                  int       `json:"peers"`
	URL                    string    `json:"url"`
	StartedAt              time.Time `json:"started_at"`
	UptimeS                int64     `json:"uptime_s"`
	Directory              struct {
		Peer      string `json:"peer"`
		Connected bool   `json:"connected"`
		Seq       uint64 `json:"seq"`
		Head      uint64 `json:"head"`
		Agents    int64  `json:"agents"`
		CaughtUp  bool   `json:"caught_up"`
		Error     string `json:"error,omitempty"`
	} `json:"directory"`
	Quorum *healthQuorum `json:"quorum"`
	// Admission tells whether this node, or the directory, shed writes
	// over a budget in the last minute.
	Admission admission.Status `json:"admission"`
}

// errCatchUp is /health's directory.error while catching up fails.
const errCatchUp = "catching up with the directory failed; the node's log says why"

func (n *Node) health(w http.ResponseWriter, r *http.Request) error {
	now := n.cfg.Now()
	v := healthView{
		Status: "ok", Version: Version, Role: n.role, DID: n.DID(), PeerID: n.host.ID().String(),
		Addrs: n.host.Addrs(), Peers: len(n.host.Peers()), URL: n.URL(),
		BrowserAddrs: nonNil(n.host.BrowserAddrs()), RendezvousBrowserAddrs: nonNil(n.host.RendezvousBrowserAddrs()),
		StartedAt: n.started.UTC(), UptimeS: int64(now.Sub(n.started) / time.Second),
		Admission: n.admission.Status(),
	}
	d := &v.Directory
	dir := n.view.directory()
	d.Peer, d.Seq, d.Agents = dir.String(), n.clog.Seq(), n.dir.AgentCount()
	d.Head, d.CaughtUp, d.Connected = d.Seq, true, true
	if n.replica != nil {
		var err error
		d.Head, d.CaughtUp, err = n.replica.Status()
		d.Connected = dir == n.host.ID() || (dir != "" && n.host.Connected(dir))
		if err != nil {
			d.Error = errCatchUp // its cause (addresses, dial errors) is logged
		}
	}
	v.Quorum = n.healthQuorum(d.Head)
	// A node without its directory still serves reads, so it stays 200
	// (a load balancer keeps it); "degraded" tells an operator that writes
	// answer 503 and reads may be stale.
	if !d.Connected || !d.CaughtUp {
		v.Status = "degraded"
	}
	httpx.WriteJSON(w, http.StatusOK, v)
	return nil
}

// httpMetrics counts requests by route pattern, so that cardinality stays
// bounded whatever paths clients send. Each route's series are looked up
// once and kept: every request records two, and the registry's own lookup
// hashes the labels under a lock. What keeps them is replaced, never
// changed (a new route or status is rare), so that a request reads it
// without a lock: a map of routes, and each route's few statuses in a
// list (comparing a few numbers is cheaper than a map's hash).
type httpMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	mu       sync.Mutex // orders the replacements
	routes   atomic.Pointer[map[string]*routeMetrics]
}

// routeMetrics are one route's series.
type routeMetrics struct {
	duration prometheus.Observer
	codes    atomic.Pointer[[]codeCounter]
}

// codeCounter is a route's counter of one status.
type codeCounter struct {
	code int
	c    prometheus.Counter
}

func newHTTPMetrics(reg prometheus.Registerer) *httpMetrics {
	m := &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mesh_http_requests_total", Help: "HTTP requests by route and status.",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "mesh_http_request_duration_seconds", Help: "HTTP request latency by route.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"route"}),
	}
	m.routes.Store(&map[string]*routeMetrics{})
	reg.MustRegister(m.requests, m.duration)
	return m
}

// route returns the series of route, looked up the first time.
func (m *httpMetrics) route(route string) *routeMetrics {
	if rm, ok := (*m.routes.Load())[route]; ok {
		return rm
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	old := *m.routes.Load()
	if rm, ok := old[route]; ok {
		return rm
	}
	rm := &routeMetrics{duration: m.duration.WithLabelValues(route)}
	rm.codes.Store(&[]codeCounter{})
	next := maps.Clone(old)
	next[route] = rm
	m.routes.Store(&next)
	return rm
}

// counter returns route's counter of code, looked up the first time.
func (m *httpMetrics) counter(rm *routeMetrics, route string, code int) prometheus.Counter {
	find := func() prometheus.Counter {
		for _, cc := range *rm.codes.Load() {
			if cc.code == code {
				return cc.c
			}
		}
		return nil
	}
	if c := find(); c != nil {
		return c
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if c := find(); c != nil {
		return c
	}
	c := m.requests.WithLabelValues(route, strconv.Itoa(code))
	next := append(slices.Clip(*rm.codes.Load()), codeCounter{code, c})
	rm.codes.Store(&next)
	return c
}

func (m *httpMetrics) count(route string, code int, took time.Duration) {
	rm := m.route(route)
	m.counter(rm, route, code).Inc()
	rm.duration.Observe(took.Seconds())
}

// epoch is what the route metrics read the monotonic clock against:
// time.Since(epoch) reads it alone, time.Now the wall clock too.
var epoch = time.Now()

func (m *httpMetrics) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Since(epoch)
		a := httpx.Record(w) // the mux answers through it too: one wrapper a request
		next.ServeHTTP(a, r)
		route := r.Pattern
		if route == "" {
			route = "unmatched"
		}
		m.count(route, a.Status(), time.Since(epoch)-start)
	})
}

// nonNil is s, or an empty slice for nil: a list in JSON, never null.
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
