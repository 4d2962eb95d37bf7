package node

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/fsx"
	"github.com/agentmesh/mesh/internal/httpx"
	"github.com/agentmesh/mesh/interop"
	"github.com/agentmesh/mesh/registryapi"
)

// AgentConfig embeds an agent in the node: the node serves the agent's
// card, whoami and skills (behind the paywall), and keeps the agent
// registered in the mesh: it registers it (signed by the agent's key,
// through its own bridge, so a node that is not the directory forwards the
// request), keeps the api_key in DataDir (mode 0600), exchanges it for a
// token and heartbeats. After a restart it reuses the stored api_key when
// the registration still matches, so no new one is issued.
type AgentConfig struct {
	// ID is the agent's id in the registry.
	ID string
	// Key is the agent's identity key; nil means the node's key (so the
	// agent's did:key and the node's peer ID are one key).
	Key ed25519.PrivateKey
	// Capabilities registered for the agent; nil means the skill ids.
	Capabilities []string
	// HeartbeatInterval defaults to about 5 minutes (the registry's pace).
	HeartbeatInterval time.Duration
	// The card, skills and payment configuration.
	interop.AgentConfig
}

func (c *AgentConfig) validate() error {
	if err := registryapi.ValidateNewID(c.ID); err != nil {
		return fmt.Errorf("node: agent: %w", err)
	}
	if c.Key != nil && len(c.Key) != ed25519.PrivateKeySize {
		return errors.New("node: agent: Key is not an Ed25519 private key")
	}
	if c.HeartbeatInterval < 0 {
		return errors.New("node: agent: HeartbeatInterval must not be negative")
	}
	return c.AgentConfig.Validate()
}

// agentRuntime is the embedded agent's state in the node.
type agentRuntime struct {
	cfg        AgentConfig
	key        ed25519.PrivateKey
	api        *interop.Agent
	registered atomic.Bool
	// sentCard is the card the registration handed over: a different one
	// is sent again with a new registration.
	sentCard atomic.Pointer[interop.Card]
	ready    chan struct{} // closed once registered
	token    string
}

// openAgent builds the embedded agent (before the bridge is built).
func (n *Node) openAgent() error {
	if n.cfg.Agent == nil {
		return nil
	}
	cfg := *n.cfg.Agent
	if cfg.HeartbeatInterval == 0 {
		cfg.HeartbeatInterval = registryapi.HeartbeatInterval
	}
	if cfg.Key == nil {
		cfg.Key = n.key
	}
	if cfg.Capabilities == nil {
		cfg.Capabilities = []string{}
		for _, s := range cfg.Skills {
			cfg.Capabilities = append(cfg.Capabilities, s.ID)
		}
	}
	api, err := interop.NewAgent(cfg.AgentConfig, interop.AgentDeps{
		DB: n.db, Registry: agentRegistry{n}, Logger: n.log.With("component", "agent"), Now: n.cfg.Now,
		ID: cfg.ID, Key: cfg.Key,
	})
	if err != nil {
		return err
	}
	api.SetURL(n.URL())
	n.agent = &agentRuntime{cfg: cfg, key: cfg.Key, api: api, ready: make(chan struct{})}
	return nil
}

// agentRoutes adds the agent's endpoints to the bridge.
func (n *Node) agentRoutes(mux httpx.Router) {
	if n.agent != nil {
		n.agent.api.Routes(mux)
	}
}

// startAgent checks the payment network and starts the agent's upkeep.
func (n *Node) startAgent(ctx context.Context) error {
	if n.agent == nil {
		return nil
	}
	if err := n.agent.api.Start(ctx); err != nil {
		return err
	}
	n.goroutine(func() { n.keepRegistered(ctx) })
	return nil
}

func (n *Node) closeAgent() {
	if n.agent != nil {
		n.agent.api.Close()
	}
}

// Agent is the embedded agent, nil when the node embeds none.
func (n *Node) Agent() *interop.Agent {
	if n.agent == nil {
		return nil
	}
	return n.agent.api
}

// AgentRegistered reports whether the embedded agent is registered and
// has sent a heartbeat since the node started.
func (n *Node) AgentRegistered() bool { return n.agent != nil && n.agent.registered.Load() }

// WaitAgent waits until the embedded agent is registered (or ctx ends).
func (n *Node) WaitAgent(ctx context.Context) error {
	if n.agent == nil {
		return errors.New("node: no agent is embedded")
	}
	select {
	case <-n.agent.ready:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("node: agent %s not registered: %w", n.agent.cfg.ID, ctx.Err())
	}
}

// keepRegistered registers the agent (retrying with backoff while the
// directory is unreachable), then heartbeats until ctx ends.
func (n *Node) keepRegistered(ctx context.Context) {
	a := n.agent
	backoff := time.Second
	for {
		err := n.agentRegister(ctx)
		if err == nil {
			err = n.agentHeartbeat(ctx)
		}
		if err == nil {
			a.registered.Store(true)
			close(a.ready)
			break
		}
		n.log.Warn("agent registration failed; retrying", "agent", a.cfg.ID, "err", err, "in", backoff)
		if !sleep(ctx, backoff) {
			return
		}
		backoff = min(2*backoff, time.Minute)
	}
	every(ctx, a.cfg.HeartbeatInterval, func() {
		if n.cardChanged() {
			if err := n.agentRegister(ctx); err != nil {
				n.log.Warn("agent registration with its new card failed", "agent", a.cfg.ID, "err", err)
			}
		}
		if err := n.agentHeartbeat(ctx); err != nil {
			n.log.Warn("agent heartbeat failed; registering again", "agent", a.cfg.ID, "err", err)
			if err := n.agentRegister(ctx); err != nil {
				n.log.Warn("agent registration failed", "agent", a.cfg.ID, "err", err)
			}
		}
	})
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (n *Node) apiKeyFile() string {
	if n.cfg.DataDir == "" {
		return ""
	}
	return filepath.Join(n.cfg.DataDir, "agent-"+n.agent.cfg.ID+".apikey")
}

// agentRegister makes sure the agent is registered as configured and holds
// a token: with the stored api_key when the registration still matches,
// otherwise by a new signed registration (which issues a new api_key).
func (n *Node) agentRegister(ctx context.Context) error {
	a := n.agent
	pub := identity.EncodePublicKey(a.key.Public().(ed25519.PublicKey))
	if file := n.apiKeyFile(); file != "" {
		if b, err := os.ReadFile(file); err == nil && n.registrationMatches(ctx, pub) {
			tok, err := n.agentToken(ctx, strings.TrimSpace(string(b)))
			if err == nil {
				a.token = tok
				card := a.api.Card()
				a.sentCard.Store(&card)
				return nil
			}
			// Only a directory that refuses the key earns a new
			// registration; while it is unreachable (a node that has
			// just started and not yet dialled it), keep the key and retry.
			if !errors.Is(err, errAPIKeyRefused) {
				return err
			}
		}
	}
	card := a.api.Card()
	body, _ := json.Marshal(map[string]any{"agent_id": a.cfg.ID, "capabilities": a.cfg.Capabilities,
		"endpoint": n.URL(), "pubkey": pub, "card": discoveryCard(card), "full_card": card})
	st, out, err := n.local(ctx, a.key, http.MethodPost, "/v1/agents/register", body, "")
	if err != nil {
		return err
	}
	if st != http.StatusOK && st != http.StatusCreated {
		return fmt.Errorf("register: %d %s", st, out)
	}
	var reg struct {
		APIKey string `json:"api_key"`
	}
	if err := json.Unmarshal(out, &reg); err != nil || reg.APIKey == "" {
		return fmt.Errorf("register: answer without api_key")
	}
	if file := n.apiKeyFile(); file != "" {
		if err := fsx.WriteSecret(file, []byte(reg.APIKey+"\n"), true); err != nil {
			return fmt.Errorf("storing the api_key: %w", err)
		}
	}
	tok, err := n.agentToken(ctx, reg.APIKey)
	a.token = tok
	if err == nil {
		a.sentCard.Store(&card)
	}
	return err
}

// cardChanged reports whether the agent's card differs from the one its
// registration handed over (the directory mirrors that one).
func (n *Node) cardChanged() bool {
	sent := n.agent.sentCard.Load()
	return sent != nil && !sameJSON(*sent, n.agent.api.Card())
}

// discoveryCard is the slim card of c that the directory indexes for search.
func discoveryCard(c interop.Card) *registryapi.DiscoveryCard {
	d := &registryapi.DiscoveryCard{Name: c.Name, Description: c.Description}
	for _, s := range c.Skills {
		d.Skills = append(d.Skills, registryapi.CardSkill{ID: s.ID, Name: s.Name, Description: s.Description, Tags: s.Tags})
	}
	for _, p := range c.Pricing {
		if p.IsToken() {
			continue // the slim card prices in lamports, which the directory's price filter reads; token rows are on the full card
		}
		d.Pricing = append(d.Pricing, registryapi.PriceRow{Unit: p.Unit, Amount: p.Amount, Currency: p.Currency, Network: p.Network})
	}
	return d
}

// registrationMatches reports whether the directory holds the agent with
// this node's endpoint, the agent's key, its capabilities and its card.
func (n *Node) registrationMatches(ctx context.Context, pub string) bool {
	st, out, err := n.local(ctx, nil, http.MethodGet, "/v1/agents/"+url.PathEscape(n.agent.cfg.ID), nil, "")
	if err != nil || st != http.StatusOK {
		return false
	}
	var v struct {
		Endpoint     *string                    `json:"endpoint"`
		Pubkey       *string                    `json:"pubkey"`
		Capabilities []string                   `json:"capabilities"`
		Card         *registryapi.DiscoveryCard `json:"card"`
	}
	card := n.agent.api.Card()
	return json.Unmarshal(out, &v) == nil && v.Endpoint != nil && *v.Endpoint == n.URL() &&
		v.Pubkey != nil && *v.Pubkey == pub && slices.Equal(v.Capabilities, n.agent.cfg.Capabilities) &&
		sameJSON(v.Card, discoveryCard(card)) && n.mirrorMatches(ctx, card)
}

// mirrorMatches reports whether the directory mirrors card as the
// agent's full card (the mirror adds nothing to a card of this project's
// agents: it holds every field A2A requires).
func (n *Node) mirrorMatches(ctx context.Context, card interop.Card) bool {
	st, out, err := n.local(ctx, nil, http.MethodGet, "/agent/"+url.PathEscape(n.agent.cfg.ID)+"/.well-known/agent.json", nil, "")
	if err != nil || st != http.StatusOK {
		return false
	}
	var mirrored, sent any
	b, _ := json.Marshal(card)
	return json.Unmarshal(out, &mirrored) == nil && json.Unmarshal(b, &sent) == nil && reflect.DeepEqual(mirrored, sent)
}

// sameJSON compares a and b as JSON, where an empty list and none are alike.
func sameJSON(a, b any) bool {
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(ja) == string(jb)
}

func (n *Node) agentToken(ctx context.Context, apiKey string) (string, error) {
	body, _ := json.Marshal(map[string]string{"agent_id": n.agent.cfg.ID, "api_key": apiKey})
	st, out, err := n.local(ctx, nil, http.MethodPost, "/v1/agents/token", body, "")
	if err != nil {
		return "", err
	}
	var v struct {
		Token string `json:"token"`
	}
	if st == http.StatusUnauthorized || st == http.StatusNotFound {
		return "", fmt.Errorf("token: %d %s: %w", st, out, errAPIKeyRefused)
	}
	if st != http.StatusOK || json.Unmarshal(out, &v) != nil || v.Token == "" {
		return "", fmt.Errorf("token: %d %s", st, out)
	}
	return v.Token, nil
}

// errAPIKeyRefused: the directory does not take the stored api_key (the
// agent was deleted, or registered again elsewhere).
var errAPIKeyRefused = errors.New("api_key refused")

func (n *Node) agentHeartbeat(ctx context.Context) error {
	st, out, err := n.local(ctx, nil, http.MethodPost, "/v1/agents/me/heartbeat", nil, n.agent.token)
	if err != nil {
		return err
	}
	if st == http.StatusUnauthorized { // token expired: exchange the api_key again
		if err := n.agentRegister(ctx); err != nil {
			return err
		}
		st, out, err = n.local(ctx, nil, http.MethodPost, "/v1/agents/me/heartbeat", nil, n.agent.token)
		if err != nil {
			return err
		}
	}
	if st != http.StatusOK {
		return fmt.Errorf("heartbeat: %d %s", st, out)
	}
	return nil
}

// local sends a request through the node's own bridge (so writes are
// forwarded to the directory like any client's), signed by key when given.
func (n *Node) local(ctx context.Context, key ed25519.PrivateKey, method, path string, body []byte, token string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.RemoteAddr = "127.0.0.1:0"
	if key != nil {
		identity.SignRequest(req, key, body, n.cfg.Now())
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := &recorder{header: http.Header{}, status: http.StatusOK}
	n.handler.ServeHTTP(rec, req)
	return rec.status, rec.body.Bytes(), nil
}

// agentRegistry gives the embedded agent what it needs of the registry:
// a caller's agent and reputation from the local directory, and signed
// reports through the bridge.
type agentRegistry struct{ n *Node }

var _ interop.Registry = agentRegistry{}

func (r agentRegistry) AgentByKey(_ context.Context, pub ed25519.PublicKey) (string, *float64, error) {
	enc := identity.EncodePublicKey(pub)
	var id string
	// The directory has no key index reader; a scan is fine at post-pay
	// and whoami rates.
	err := r.n.dir.Agents(func(a *registryapi.Agent) bool {
		if a.Pubkey == enc {
			id = a.ID
			return false
		}
		return true
	})
	if err != nil || id == "" {
		return "", nil, err
	}
	_, roll, err := r.n.dir.Reputation(id, r.n.cfg.Now())
	if err != nil {
		return "", nil, err
	}
	return id, roll.Weighted.Score, nil
}

func (r agentRegistry) Report(ctx context.Context, id string, rep interop.Report) error {
	body, _ := json.Marshal(rep)
	st, out, err := r.n.local(ctx, r.n.agent.key, http.MethodPost, "/v1/agents/"+url.PathEscape(id)+"/feedback", body, "")
	if err != nil {
		return err
	}
	if st != http.StatusOK {
		// The agent tells a refusal for good (a 4xx) from a failure.
		return fmt.Errorf("feedback: %w", &interop.RegistryError{Status: st, Body: string(out)})
	}
	return nil
}
