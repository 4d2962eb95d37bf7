package interop

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/httpx"
	"github.com/agentmesh/mesh/store"
)

// SkillFunc serves one skill call: input is the request body (valid JSON),
// the result is answered as JSON with 200. Return an *httpx.Error for a
// client-facing failure; any other error is a logged 500 and charges
// nothing. CallerFrom(ctx) tells who called and how the call was paid.
type SkillFunc func(ctx context.Context, input json.RawMessage) (any, error)

// Skill is a skill an agent serves at POST /v1/<ID>.
type Skill struct {
	ID          string
	Name        string
	Description string
	Examples    []string
	// Tags are keywords for the A2A card (none: an empty list).
	Tags []string
	// Pricing rows; nil or a Free() row means the skill is free. A paid
	// skill has a lamports row on the payment network, SPL token rows
	// there (Token: x402 v2 pays them), or both. One priced only in
	// tokens is paid by x402 v2 alone: the seed's x402, prepaid balances
	// and post-pay are in lamports.
	Pricing Prices
	Handler SkillFunc
}

// AgentConfig declares an agent: its card, its skills and how it is paid.
type AgentConfig struct {
	// Card holds the descriptive fields (name, version, description,
	// modes, protocols, availability). url, contact, skills, pricing,
	// payment and the A2A fields (protocolVersion, interfaces,
	// capabilities) are filled in by the agent.
	Card   Card
	Skills []Skill
	// Payment is required when any skill has a price.
	Payment *PaymentConfig
	// MaxBody bounds skill request bodies (default 64 KiB); an A2A
	// JSON-RPC request may be a2aEnvelope larger.
	MaxBody int64
	// A2A bounds the tasks of the A2A binding.
	A2A A2AConfig
}

// Validate reports the first problem with c.
func (c *AgentConfig) Validate() error {
	if c.Card.Name == "" {
		return fmt.Errorf("%w: agent card needs a name", ErrConfig)
	}
	if len(c.Skills) == 0 {
		return fmt.Errorf("%w: an agent needs at least one skill", ErrConfig)
	}
	if c.Payment != nil {
		if err := c.Payment.Validate(); err != nil {
			return err
		}
	}
	if err := c.A2A.validate(); err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, s := range c.Skills {
		if err := ValidateSkillID(s.ID); err != nil {
			return err
		}
		if seen[s.ID] {
			return fmt.Errorf("%w: skill %q declared twice", ErrConfig, s.ID)
		}
		seen[s.ID] = true
		if s.Handler == nil {
			return fmt.Errorf("%w: skill %q has no handler", ErrConfig, s.ID)
		}
		for _, p := range s.Pricing {
			if err := p.validate(); err != nil {
				return fmt.Errorf("%w: skill %q: %v", ErrConfig, s.ID, err)
			}
		}
		price, err := c.price(s)
		if err != nil {
			return err
		}
		if price > 0 && price%c.Payment.CreditDivisor != 0 {
			return fmt.Errorf("%w: skill %q: price %d is not a multiple of the credit divisor %d", ErrConfig, s.ID, price, c.Payment.CreditDivisor)
		}
		if c.Payment != nil && len(s.Pricing.Tokens(c.Payment.Network)) > 0 && !c.Payment.takesExact() {
			return fmt.Errorf("%w: skill %q is priced in an SPL token, which x402 v2 takes: the payment configuration needs the x402 mode and a fee payer (fee_payer_key_file) or a facilitator_url", ErrConfig, s.ID)
		}
	}
	return nil
}

// price is what a call of s costs in lamports on the payment network: 0
// for a free skill and for one priced only in SPL tokens.
func (c *AgentConfig) price(s Skill) (uint64, error) {
	if !s.Pricing.priced() {
		return 0, nil
	}
	if c.Payment == nil {
		return 0, fmt.Errorf("%w: skill %q has a price but the agent has no payment configuration", ErrConfig, s.ID)
	}
	row, ok := s.Pricing.For(c.Payment.Network)
	switch {
	case ok && row.IsFree():
		return 0, fmt.Errorf("%w: skill %q has a free row (or one of 0 lamports) beside its prices: a free skill has only a free row", ErrConfig, s.ID)
	case ok:
		return row.Amount, nil
	case len(s.Pricing.Tokens(c.Payment.Network)) > 0:
		return 0, nil // priced only in tokens: x402 v2 pays it
	}
	return 0, fmt.Errorf("%w: skill %q has no price on the payment network %s: it needs a lamports row or SPL token rows (USDC, wSOL) there",
		ErrConfig, s.ID, c.Payment.Network)
}

// Agent serves an agent's public surface: its card, whoami, its skills
// behind the paywall, and the deposit endpoints.
type Agent struct {
	cfg      AgentConfig
	registry Registry
	ledger   *ledger
	paywall  *Paywall // nil when every skill is free
	tasks    *taskStore
	handlers map[string]http.Handler // POST /v1/<skill>, by skill id
	log      *slog.Logger
	now      func() time.Time

	mu     sync.RWMutex
	url    string
	origin string // Origin(url): what a v1-bound signature must name
}

// AgentDeps are what an Agent is handed by its host (node).
type AgentDeps struct {
	DB       *store.DB
	Registry Registry // may be nil: no whoami agent ids, no post-pay
	Logger   *slog.Logger
	Now      func() time.Time
	// ID and Key are the agent's registry id and the key it registered:
	// paid calls are answered with a receipt signed by Key (header
	// X-Mesh-Receipt). A nil Key signs none.
	ID  string
	Key ed25519.PrivateKey
}

// NewAgent checks cfg; it starts nothing.
func NewAgent(cfg AgentConfig, deps AgentDeps) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.DB == nil {
		return nil, fmt.Errorf("%w: agent needs a store", ErrConfig)
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = 64 << 10
	}
	cfg.A2A.setDefaults()
	a := &Agent{cfg: cfg, registry: deps.Registry, log: deps.Logger, now: deps.Now}
	a.tasks = newTaskStore(cfg.A2A, deps.Now)
	if cfg.Payment != nil {
		pw, err := NewPaywall(*cfg.Payment, deps.DB, deps.Registry, deps.Logger, deps.Now)
		if err != nil {
			return nil, err
		}
		a.paywall, a.ledger = pw, pw.ledger
		if deps.Key != nil {
			pw.receipts = &receipts{agent: deps.ID, key: deps.Key}
		}
		a.cfg.Payment = &pw.cfg
	} else {
		a.ledger = newLedger(deps.DB)
	}
	a.cfg.Skills = make([]Skill, len(cfg.Skills))
	for i, s := range cfg.Skills {
		s.Pricing = slices.Clone(s.Pricing)
		for j := range s.Pricing {
			s.Pricing[j] = s.Pricing[j].withMint()
		}
		a.cfg.Skills[i] = s
	}
	if a.paywall != nil {
		a.paywall.baseURL = a.baseURL
	}
	a.handlers = map[string]http.Handler{}
	for _, s := range a.cfg.Skills {
		a.handlers[s.ID] = a.skillHandler(s)
	}
	return a, nil
}

// Start checks the payment network and starts the deposit poller.
func (a *Agent) Start(ctx context.Context) error {
	if a.paywall != nil {
		return a.paywall.Start(ctx)
	}
	return nil
}

// Close stops background work; safe to call twice.
func (a *Agent) Close() {
	if a.paywall != nil {
		a.paywall.Close()
	}
}

// Paywall is the agent's paywall, nil when every skill is free.
func (a *Agent) Paywall() *Paywall { return a.paywall }

// SetURL sets the base URL the agent is reached at (card url, contact).
func (a *Agent) SetURL(u string) {
	a.mu.Lock()
	a.url, a.origin = strings.TrimRight(u, "/"), Origin(u)
	a.mu.Unlock()
}

// baseURL is the URL set by SetURL ("" before).
func (a *Agent) baseURL() string {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.url
}

// Origin is what a v1-bound signature sent to the agent must name as its
// receiver: Origin of its url, "" before SetURL.
func (a *Agent) Origin() string {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.origin
}

// SkillIDs lists the agent's skill ids (its capabilities in the registry).
func (a *Agent) SkillIDs() []string {
	ids := make([]string, len(a.cfg.Skills))
	for i, s := range a.cfg.Skills {
		ids[i] = s.ID
	}
	return ids
}

// Routes adds the agent's endpoints to mux: the card at both well-known
// paths, the A2A JSON-RPC endpoint at /, whoami, the skills and the
// deposit endpoints.
func (a *Agent) Routes(mux httpx.Router) {
	h := func(pattern string, fn httpx.HandlerFunc) { mux.Handle(pattern, httpx.Handle(a.log, fn)) }
	h("GET /.well-known/agent.json", a.card)
	h("GET /.well-known/agent-card.json", a.card)
	mux.Handle("POST /{$}", http.HandlerFunc(a.serveA2A))
	h("GET /v1/whoami", signed(a.ledger, a.now, a.Origin, a.cfg.MaxBody, true, a.whoami))
	for _, s := range a.cfg.Skills {
		mux.Handle("POST /v1/"+s.ID, a.handlers[s.ID])
	}
	if a.paywall != nil && a.paywall.cfg.has(ModeDeposit) {
		h("POST /v1/topup", signed(a.ledger, a.now, a.Origin, 4<<10, true, a.paywall.topup))
		h("GET /v1/balance", signed(a.ledger, a.now, a.Origin, 4<<10, true, a.paywall.balance))
	}
}

// skillHandler is what serves POST /v1/<s.ID>, over HTTP and over A2A:
// the Mesh-Sig check, the paywall's cascade when the skill has a price,
// and the skill.
func (a *Agent) skillHandler(s Skill) http.Handler {
	var next http.Handler = httpx.Handle(a.log, a.skill(s))
	if s.Pricing.priced() {
		next = a.paywall.Guard(s, next)
	}
	return httpx.Handle(a.log, signed(a.ledger, a.now, a.Origin, a.cfg.MaxBody, false, func(w http.ResponseWriter, r *http.Request) error {
		// Refuse bad input before anyone pays for it.
		if body := rereadBody(r); len(bytes.TrimSpace(body)) > 0 && !json.Valid(body) {
			return httpx.ErrBadJSON.With("request body of skill %s is not valid JSON", s.ID)
		}
		next.ServeHTTP(w, r)
		return nil
	}))
}

// Card is the agent's full public card.
func (a *Agent) Card() Card {
	a.mu.RLock()
	base, origin := a.url, a.origin
	a.mu.RUnlock()
	c := a.cfg.Card
	c.URL = base
	c.MeshSig = []string{identity.SigVersion}
	if origin != "" {
		c.MeshSig = append(c.MeshSig, identity.SigVersionBound)
	}
	c.Contact = Contact{HTTP: base + "/v1", A2A: base + "/.well-known/agent-card.json"}
	c.ProtocolVersion, c.PreferredTransport = A2AVersion, TransportJSONRPC
	c.AdditionalInterfaces = []AgentInterface{{URL: base, Transport: TransportJSONRPC}}
	c.SupportedInterfaces = []AgentInterfaceV1{
		{URL: base, ProtocolBinding: TransportJSONRPC, ProtocolVersion: A2AVersion1},
		{URL: base, ProtocolBinding: TransportJSONRPC, ProtocolVersion: A2AVersion03},
	}
	c.Capabilities = A2ACapabilities{}
	if a.paywall != nil && a.paywall.cfg.has(ModeX402) {
		const how = "Paid skills answer a task in input-required with x402 payment requirements (x402.payment.required); " +
			"answer on the task with x402.payment.payload, or with payment-rejected."
		c.Capabilities.Extensions = []A2AExtension{{URI: X402A2AExtension, Description: how}, {URI: X402A2AExtensionV01, Description: how}}
	}
	if c.Version == "" {
		c.Version = "1.0.0"
	}
	if c.DefaultInputModes == nil {
		c.DefaultInputModes = []string{"application/json"}
	}
	if c.DefaultOutputModes == nil {
		c.DefaultOutputModes = []string{"application/json"}
	}
	if c.Protocols == nil {
		c.Protocols = []string{"http"}
		if a.paywall != nil && a.paywall.cfg.has(ModeX402) {
			c.Protocols = append(c.Protocols, ModeX402)
		}
		c.Protocols = append(c.Protocols, "a2a")
	}
	if c.Availability == (Availability{}) {
		c.Availability = Availability{Now: true, WindowHours: 24, SLA: "best-effort"}
	}
	cheapest := map[string]Price{}
	var networks []string
	c.Skills = make([]SkillCard, len(a.cfg.Skills))
	for i, s := range a.cfg.Skills {
		rows := s.Pricing
		if len(rows) == 0 {
			rows = Prices{Free()}
		}
		c.Skills[i] = SkillCard{ID: s.ID, Name: s.Name, Description: s.Description, Examples: s.Examples, Tags: s.Tags, Pricing: rows}
		if c.Skills[i].Examples == nil {
			c.Skills[i].Examples = []string{}
		}
		if c.Skills[i].Tags == nil {
			c.Skills[i].Tags = []string{}
		}
		for _, p := range rows {
			k := p.Network + "/" + p.Currency
			if old, ok := cheapest[k]; !ok || p.Amount < old.Amount {
				if !ok {
					networks = append(networks, k)
				}
				cheapest[k] = p
			}
		}
	}
	c.Pricing = nil
	for _, k := range networks {
		c.Pricing = append(c.Pricing, cheapest[k])
	}
	if pc := a.cfg.Payment; pc != nil {
		pb := &PaymentBlock{Modes: pc.Modes, Network: pc.Network, Wallet: pc.Wallet, Commitment: pc.Commitment,
			PostpayMinReputation: pc.PostpayMinReputation}
		if pc.has(ModeDeposit) {
			pb.Deposit = &DepositTerms{MinLamports: pc.DepositMinLamports, CreditUnit: CurrencyLamports, Divisor: pc.CreditDivisor}
		}
		if pc.FreeCallsPerDay > 0 {
			pb.FreeTier = &FreeTier{CallsPerDay: pc.FreeCallsPerDay, By: FreeTierBy}
		}
		c.Payment = pb
	}
	return c
}

// card serves the full card, or, to a client that asks for A2A-Version
// 1.0, the card in A2A 1.0's own shape.
func (a *Agent) card(w http.ResponseWriter, r *http.Request) error {
	w.Header().Add("Vary", HeaderA2AVersion)
	c := a.Card()
	if wantsV1(r.Header.Get(HeaderA2AVersion)) {
		httpx.WriteJSON(w, http.StatusOK, c.toV1())
		return nil
	}
	httpx.WriteJSON(w, http.StatusOK, c)
	return nil
}

// WhoAmI is the answer of GET /v1/whoami: the verified identity of the
// request's Mesh-Sig.
type WhoAmI struct {
	Verified bool    `json:"verified"`
	Pubkey   string  `json:"pubkey"`
	DID      string  `json:"did"`
	AgentID  *string `json:"agent_id"`
	// Reputation is the score of the caller's registered agent, when known.
	Reputation *float64 `json:"reputation"`
	TS         int64    `json:"ts"`
}

func (a *Agent) whoami(w http.ResponseWriter, r *http.Request) error {
	c := CallerFrom(r.Context())
	v := WhoAmI{Verified: true, Pubkey: identity.EncodePublicKey(c.Pubkey), DID: identity.DIDFromPublicKey(c.Pubkey)}
	if h, err := identity.ParseSigHeader(r.Header.Get(identity.SigHeaderName)); err == nil {
		v.TS = h.TS
	}
	if a.registry != nil {
		id, score, err := a.registry.AgentByKey(r.Context(), ed25519.PublicKey(c.Pubkey))
		if err != nil {
			a.log.Warn("whoami: registry lookup failed", "err", err)
		} else if id != "" {
			v.AgentID, v.Reputation = &id, score
		}
	}
	httpx.WriteJSON(w, http.StatusOK, v)
	return nil
}

// skill adapts a SkillFunc: the body must be JSON; the result is JSON.
func (a *Agent) skill(s Skill) httpx.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		body, err := httpx.ReadBody(w, r, a.cfg.MaxBody)
		if err != nil {
			return err
		}
		if t := bytes.TrimSpace(body); len(t) == 0 {
			body = []byte("null")
		} else if !json.Valid(t) {
			return httpx.ErrBadJSON.With("request body of skill %s is not valid JSON", s.ID)
		}
		out, err := s.Handler(r.Context(), body)
		if err != nil {
			var he *httpx.Error
			if !errors.As(err, &he) {
				a.log.Error("skill failed", "skill", s.ID, "err", err)
				return httpx.ErrInternal.With("skill %s failed", s.ID)
			}
			return err
		}
		httpx.WriteJSON(w, http.StatusOK, out)
		return nil
	}
}
