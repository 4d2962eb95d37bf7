package registryapi

import (
	"context"
	"crypto/ed25519"
	"errors"
	"log/slog"
	"maps"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/identity/meshsig"
	"github.com/agentmesh/mesh/internal/admission"
	"github.com/agentmesh/mesh/internal/cmdlog"
	"github.com/agentmesh/mesh/internal/httpx"
	"github.com/agentmesh/mesh/internal/site"
)

// Defaults of Config.
const (
	// DefaultOnlineWindow: agents heartbeat about every 5 minutes; one late
	// or lost heartbeat is tolerated before an agent shows offline.
	DefaultOnlineWindow = 10 * time.Minute
	// HeartbeatInterval is what agents are told to keep to.
	HeartbeatInterval = 5 * time.Minute
	// DefaultMaxBody bounds request bodies of the registry surface.
	DefaultMaxBody = 64 << 10
	// maxCatalogListings bounds one catalog import.
	maxCatalogListings = 1000
)

// Config configures the registry's HTTP surface.
type Config struct {
	Directory *Directory      // required: reads
	Log       cmdlog.Proposer // required: writes
	Tokens    *Tokens         // required
	// PublicURL is the base of public agent addresses (handles), e.g.
	// "https://mesh.example"; no trailing slash.
	PublicURL string
	// OnlineWindow is how long after its last heartbeat an agent shows online.
	OnlineWindow time.Duration
	// Admins may import catalog listings (Mesh-Sig by one of these keys).
	Admins []ed25519.PublicKey
	// IsAdmin, if set, decides instead of Admins (the keys of a quorum's
	// members change).
	IsAdmin func(ed25519.PublicKey) bool
	// Fallback, if set, is asked for an agent this node does not hold (a
	// replica still catching up): from the DHT or the directory node. It
	// returns ErrAgentNotFound when it knows of none.
	Fallback func(ctx context.Context, id string) (*Agent, error)
	// KeyFallback, if set, is asked for the agent that a did:key is bound
	// to when this node's replica binds it to none (a replica still
	// catching up): the id of the agent, or ErrAgentNotFound. It resolves
	// did:mesh aliases (alias.go).
	KeyFallback func(ctx context.Context, did string) (string, error)
	// Admission meters searches per client address (its Search budget,
	// internal/admission); nil: searches are not metered.
	Admission *admission.Admitter
	// SolUSD is the rate of the max_price_usd filter; nil: none known.
	SolUSD *SolUSD
	// MaxBody bounds request bodies, in bytes.
	MaxBody int64
	// SearchConcurrency bounds the searches ranked at once on this node,
	// whoever asks (0: one a core; negative: no bound); a search past it
	// waits at most SearchWait (0: DefaultSearchWait) for its turn, then
	// is refused with ErrSearchBusy.
	SearchConcurrency int
	SearchWait        time.Duration
	// ActivationWindow is how long a new registration made through this
	// node (the directory) waits for its agent's first token before it
	// expires; 0 keeps registrations until they are deleted.
	ActivationWindow time.Duration
	// Site renders the pages (the agents' and the agents list) in the
	// node's layout; nil: a site naming no node.
	Site *site.Site
	// Now is the clock; nil means time.Now.
	Now    func() time.Time
	Logger *slog.Logger
}

// API serves the registry over HTTP.
type API struct {
	cfg     Config
	log     *slog.Logger
	site    *site.Site
	pages   pageTemplates
	aliases *aliases
	slots   *searchSlots
}

// NewAPI checks cfg and returns the API; it starts nothing.
func NewAPI(cfg Config) (*API, error) {
	if cfg.Directory == nil || cfg.Log == nil || cfg.Tokens == nil {
		return nil, errors.New("registry: Directory, Log and Tokens are required")
	}
	if cfg.OnlineWindow <= 0 {
		cfg.OnlineWindow = DefaultOnlineWindow
	}
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.PublicURL = strings.TrimRight(cfg.PublicURL, "/")
	if cfg.Site == nil {
		cfg.Site = site.New(site.Info{}, cfg.Logger)
	}
	if cfg.SearchConcurrency == 0 {
		cfg.SearchConcurrency = runtime.GOMAXPROCS(0)
	}
	if cfg.SearchWait <= 0 {
		cfg.SearchWait = DefaultSearchWait
	}
	return &API{cfg: cfg, log: cfg.Logger, site: cfg.Site, pages: newPageTemplates(cfg.Site), aliases: newAliases(),
		slots: newSearchSlots(cfg.SearchConcurrency, cfg.SearchWait)}, nil
}

// Routes adds the registry's routes to mux: the /v1 surface and the legacy
// hub paths.
func (a *API) Routes(mux httpx.Router) {
	h := func(pattern string, fn httpx.HandlerFunc) { mux.Handle(pattern, httpx.Handle(a.log, fn)) }
	// An agent's record, most of what a directory serves, is routed by its
	// path alone (httpx.HandleSegment).
	byID := func(pattern string, fn func(w http.ResponseWriter, r *http.Request, id string) error) {
		httpx.HandleSegment(mux, pattern, func(w http.ResponseWriter, r *http.Request, id string) {
			if err := fn(w, r, id); err != nil {
				httpx.WriteError(a.log, w, r, err)
			}
		})
	}
	h("POST /v1/agents/register", a.register)
	h("POST /v1/agents/token", a.token)
	h("DELETE /v1/agents/me", a.deleteMe)
	h("POST /v1/agents/me/heartbeat", a.heartbeat)
	byID("GET /v1/agents/{id}", a.getAgent)
	h("GET /v1/agents/{id}/identity", a.identity)
	h("POST /v1/agents/{id}/feedback", a.feedback)
	h("GET /v1/agents/{id}/reputation", a.reputation)
	h("POST /v1/admin/catalog", a.importCatalog)
	h("POST /v1/search", a.search)
	// The retired hub's paths, same behaviour.
	h("POST /agents/register", a.register)
	h("POST /agents/token", a.token)
	byID("GET /agents/{id}", a.getAgent)
	a.pageRoutes(mux)
}

// writeRoutes names the registry's write surfaces by route: what write
// budgets meter (internal/admission) and what a node that is not the
// directory forwards to it. Token issue changes nothing, yet only the
// directory can sign a token, and it costs a hash and a signature.
var writeRoutes = map[string]string{
	"POST /v1/agents/register":      "register",
	"POST /agents/register":         "register",
	"POST /v1/agents/token":         "token",
	"POST /agents/token":            "token",
	"POST /v1/agents/me/heartbeat":  "heartbeat",
	"DELETE /v1/agents/me":          "delete",
	"POST /v1/agents/{id}/feedback": "feedback",
	"POST /v1/admin/catalog":        "catalog",
}

// fallbackRoute is the read a node still catching up forwards to the
// directory for an agent it does not hold yet.
const fallbackRoute = "GET /v1/agents/{id}"

// WriteRoutes returns the registry's write surfaces: route pattern to
// surface name.
func WriteRoutes() map[string]string { return maps.Clone(writeRoutes) }

// ForwardedRoutes are the routes a node forwards to the directory, the
// only ones the directory serves over the forward stream: the write
// routes and the agent lookup of a node still catching up.
func ForwardedRoutes() []string {
	return append(slices.Sorted(maps.Keys(writeRoutes)), fallbackRoute)
}

var writes = func() *http.ServeMux {
	mux := http.NewServeMux()
	for p := range writeRoutes {
		mux.Handle(p, http.NotFoundHandler())
	}
	return mux
}()

// IsDirectoryWrite reports whether r is one of the write routes: what a
// node that is not the directory forwards to it. Other requests, however
// they look, get this node's own answer (a 404 or 405 like the
// directory's).
func IsDirectoryWrite(r *http.Request) bool {
	_, pattern := writes.Handler(r)
	return pattern != ""
}

// bearer verifies the request's bearer token.
func (a *API) bearer(r *http.Request) (TokenClaims, error) {
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if h == "" || !ok || !strings.EqualFold(scheme, "Bearer") {
		return TokenClaims{}, ErrNoToken
	}
	return a.cfg.Tokens.Verify(strings.TrimSpace(tok), a.cfg.Now())
}

// signer verifies the request's Mesh-Sig over body; it returns nil, nil
// when the header is absent. The nonce is claimed when the command applies.
func (a *API) signer(r *http.Request, body []byte) (*SigClaim, error) {
	h, err := meshsig.Verify(r, body, a.cfg.Now(), nil)
	if err != nil || h == nil {
		return nil, err
	}
	return &SigClaim{Pubkey: identity.EncodePublicKey(h.Pubkey), Nonce: h.Nonce}, nil
}

// signedRequest keeps a signed request whole, so that anyone can verify it again.
func signedRequest(r *http.Request, body []byte) *Signed {
	return &Signed{Method: r.Method, Path: identity.RequestPath(r.URL), Body: string(body), MeshSig: r.Header.Get(identity.SigHeaderName)}
}

// requireSigner is signer for endpoints that demand a Mesh-Sig.
func (a *API) requireSigner(r *http.Request, body []byte) (*SigClaim, error) {
	sig, err := a.signer(r, body)
	if err == nil && sig == nil {
		err = meshsig.ErrNoSig
	}
	return sig, err
}

func (a *API) now() time.Time { return a.cfg.Now() }

// handle is the public address of agent id, on the node the client called
// (httpx.BaseURL: a forwarded request names the node it came through).
func (a *API) handle(r *http.Request, id string) string {
	return a.baseURL(r) + "/agent/" + id
}

// baseURL is the base URL of the node the client called.
func (a *API) baseURL(r *http.Request) string { return httpx.BaseURL(r, a.cfg.PublicURL) }

// pathID reads and checks the {id} path value: an agent id, or a
// did:mesh alias, which it resolves to the id of its agent (alias.go).
func (a *API) pathID(r *http.Request) (agentRef, error) {
	return a.checkID(r.Context(), r.PathValue("id"))
}

// checkID checks id, an {id} path value, as pathID does.
func (a *API) checkID(ctx context.Context, id string) (agentRef, error) {
	if isAlias(id) {
		return a.resolveAlias(ctx, id)
	}
	if len(id) > maxIDLen { // not echoed: the answer stays small
		return agentRef{}, ErrAgentNotFound.With("agent not found: ids are at most %d characters", maxIDLen)
	}
	if err := ValidateID(id); err != nil {
		return agentRef{}, ErrAgentNotFound.With("agent %q not found: %v", id, err)
	}
	return agentRef{id: id}, nil
}
