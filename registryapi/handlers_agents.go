package registryapi

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/identity/meshsig"
	"github.com/agentmesh/mesh/internal/cmdlog"
	"github.com/agentmesh/mesh/internal/httpx"
)

// registerRequest is the body of POST /v1/agents/register.
type registerRequest struct {
	AgentID      string   `json:"agent_id"`
	Capabilities []string `json:"capabilities"`
	Pubkey       string   `json:"pubkey"`
	Endpoint     string   `json:"endpoint"`
	// Card is this project's extension: the discovery card the oracle indexes.
	Card *DiscoveryCard `json:"card"`
	// FullCard is this project's extension: the agent's full public card
	// (spec 2.3), mirrored by its public address.
	FullCard json.RawMessage `json:"full_card"`
}

func (q *registerRequest) validate() error {
	if err := ValidateNewID(q.AgentID); err != nil {
		return err
	}
	if err := validateCapabilities(q.Capabilities); err != nil {
		return err
	}
	if q.Capabilities == nil {
		q.Capabilities = []string{}
	}
	if q.Pubkey != "" {
		pub, err := identity.DecodePublicKey(q.Pubkey)
		if err != nil {
			return httpx.ErrInvalid.With("pubkey: %v", err)
		}
		q.Pubkey = identity.EncodePublicKey(pub)
	}
	if q.Card != nil {
		if err := q.Card.validate(); err != nil {
			return err
		}
	}
	card, err := fullCardOf(q.FullCard)
	if err != nil {
		return err
	}
	q.FullCard = card
	return validateEndpoint("endpoint", q.Endpoint)
}

type registerResponse struct {
	Status       string    `json:"status"`
	AgentID      string    `json:"agent_id"`
	APIKey       string    `json:"api_key"`
	Created      bool      `json:"created"`
	DID          *string   `json:"did"`
	DIDMesh      *string   `json:"did_mesh"`
	Handle       string    `json:"handle"`
	RegisteredAt time.Time `json:"registered_at"`
}

func (a *API) register(w http.ResponseWriter, r *http.Request) error {
	body, err := httpx.ReadBody(w, r, a.cfg.MaxBody)
	if err != nil {
		return err
	}
	var req registerRequest
	if err := httpx.DecodeJSON(body, &req); err != nil {
		return err
	}
	if err := req.validate(); err != nil {
		return err
	}
	sig, err := a.signer(r, body)
	if err != nil {
		return err
	}
	if req.Pubkey != "" && sig == nil {
		return meshsig.ErrNoSig.With("binding a pubkey requires a Mesh-Sig made with that key")
	}
	if req.Pubkey != "" && sig.Pubkey != req.Pubkey {
		return ErrSigKeyMismatch
	}
	var ownerReg uint64
	if r.Header.Get("Authorization") != "" {
		c, err := a.bearer(r)
		if err != nil {
			return err
		}
		if c.Sub != req.AgentID {
			return ErrBadToken.With("bearer token belongs to agent %q, not %q", c.Sub, req.AgentID)
		}
		ownerReg = c.Reg
	}
	apiKey := newAPIKey(r.Context())
	now := a.now()
	op := &RegisterOp{
		AgentID: req.AgentID, Capabilities: req.Capabilities, Endpoint: req.Endpoint, Pubkey: req.Pubkey,
		APIKeyHash: hashAPIKey(apiKey), OwnerReg: ownerReg, Card: req.Card, FullCard: req.FullCard,
	}
	if a.cfg.ActivationWindow > 0 {
		op.ActivateBy = now.Add(a.cfg.ActivationWindow).UnixNano()
	}
	if sig != nil {
		op.Signed = signedRequest(r, body)
		op.signCard()
	}
	res, err := a.propose(r.Context(), Command{At: now.UnixNano(), Sig: sig, Register: op})
	if err != nil {
		return err
	}
	status := http.StatusOK
	if res.Created {
		status = http.StatusCreated
	}
	httpx.WriteJSON(w, status, registerResponse{
		Status: "registered", AgentID: res.Agent.ID, APIKey: apiKey, Created: res.Created,
		DID: nullable(res.Agent.DID), DIDMesh: nullable(AliasOf(res.Agent.DID)), Handle: a.handle(r, res.Agent.ID), RegisteredAt: res.Agent.RegisteredAt,
	})
	return nil
}

// tokenRequest is the body of POST /v1/agents/token.
type tokenRequest struct {
	AgentID string `json:"agent_id"`
	APIKey  string `json:"api_key"`
}

func (a *API) token(w http.ResponseWriter, r *http.Request) error {
	body, err := httpx.ReadBody(w, r, a.cfg.MaxBody)
	if err != nil {
		return err
	}
	var req tokenRequest
	if err := httpx.DecodeJSON(body, &req); err != nil {
		return err
	}
	if req.AgentID == "" || req.APIKey == "" {
		return httpx.ErrInvalid.With("agent_id and api_key are required")
	}
	if err := ValidateID(req.AgentID); err != nil {
		return err
	}
	ag, err := a.cfg.Directory.Agent(req.AgentID)
	if err != nil {
		return err
	}
	if subtle.ConstantTimeCompare([]byte(hashAPIKey(req.APIKey)), []byte(ag.APIKeyHash)) != 1 {
		return ErrBadCredentials
	}
	if !a.cfg.Tokens.CanIssue() {
		return ErrReadOnly.With("this node holds no directory key and cannot issue tokens")
	}
	if err := a.activate(r.Context(), ag); err != nil {
		return err
	}
	tok, exp := a.cfg.Tokens.Issue(ag.ID, ag.Reg, a.now())
	httpx.WriteJSON(w, http.StatusOK, map[string]any{
		"token": tok, "token_type": "bearer", "agent_id": ag.ID,
		"expires_in": int(TokenTTL / time.Second), "expires_at": exp.UTC(),
	})
	return nil
}

// heartbeatRequest is the optional body of POST /v1/agents/me/heartbeat.
type heartbeatRequest struct {
	Status string `json:"status"`
}

func (a *API) heartbeat(w http.ResponseWriter, r *http.Request) error {
	c, err := a.bearer(r)
	if err != nil {
		return err
	}
	body, err := httpx.ReadBody(w, r, a.cfg.MaxBody)
	if err != nil {
		return err
	}
	var req heartbeatRequest
	if len(body) > 0 {
		if err := httpx.DecodeJSON(body, &req); err != nil {
			return err
		}
		if err := validateText("status", req.Status, maxStatusLen, false); err != nil {
			return err
		}
	}
	beat, err := a.cfg.Directory.Heartbeat(c.Sub, c.Reg, a.now(), req.Status)
	if err != nil {
		return err
	}
	// A node that forwarded the heartbeat waits until its copy of presence
	// holds it, so that its client reads its own write.
	epoch, _ := a.cfg.Directory.PresenceCursor()
	w.Header().Set(PresenceHeader, FormatPresenceCursor(epoch, beat.Ver))
	httpx.WriteJSON(w, http.StatusOK, map[string]any{
		"status": "ok", "agent_id": c.Sub, "online": true, "last_seen": beat.At,
		"next_heartbeat_s": int(HeartbeatInterval / time.Second),
	})
	return nil
}

func (a *API) deleteMe(w http.ResponseWriter, r *http.Request) error {
	c, err := a.bearer(r)
	if err != nil {
		return err
	}
	res, err := a.propose(r.Context(), Command{At: a.now().UnixNano(),
		Delete: &DeleteOp{AgentID: c.Sub, Reg: c.Reg}})
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"status": "deleted", "agent_id": c.Sub, "catalog_only": !res.Removed})
	return nil
}

// agentView is the body of GET /v1/agents/<id> and GET /agents/<id>. Its
// fields that only the row decides are in viewHead and viewTail, which a
// read of a cached row encodes once (agentjson.go).
type agentView struct {
	viewHead
	Handle string `json:"handle"`
	// Registered and Live are the spec's flags (2.1), as JSON booleans
	// like every other surface's; Live is Online.
	Registered bool      `json:"registered"`
	Live       bool      `json:"live"`
	Online     bool      `json:"online"`
	LastSeen   time.Time `json:"last_seen"`
	viewTail
	// Both views of the agent's reputation, as identity shows them (n = 0
	// on a node that does not hold the agent yet).
	Reputation         specReputation `json:"reputation"`
	WeightedReputation Weighted       `json:"weighted_reputation"`
}

type viewHead struct {
	AgentID      string   `json:"agent_id"`
	Capabilities []string `json:"capabilities"`
	Endpoint     *string  `json:"endpoint"`
	Pubkey       *string  `json:"pubkey"`
	DID          *string  `json:"did"`
	DIDMesh      *string  `json:"did_mesh"`
	Verified     bool     `json:"verified"`
}

type viewTail struct {
	RegisteredAt time.Time `json:"registered_at"`
	UpdatedAt    time.Time `json:"updated_at"`
	// Card is the discovery card of the registration, null without one.
	Card *DiscoveryCard `json:"card"`
}

func headOf(ag *Agent) viewHead {
	return viewHead{AgentID: ag.ID, Capabilities: ag.Capabilities, Endpoint: nullable(publicEndpoint(ag.Endpoint)),
		Pubkey: nullable(ag.Pubkey), DID: nullable(ag.DID), DIDMesh: nullable(AliasOf(ag.DID)), Verified: ag.Pubkey != ""}
}

func tailOf(ag *Agent) viewTail {
	return viewTail{RegisteredAt: ag.RegisteredAt, UpdatedAt: ag.UpdatedAt, Card: ag.Card}
}

func (a *API) getAgent(w http.ResponseWriter, r *http.Request, pathID string) error {
	ref, err := a.checkID(r.Context(), pathID)
	if err != nil {
		return err
	}
	e, err := a.cfg.Directory.lookup(ref.id)
	var p *viewParts
	if err == nil {
		if p = partsOf(e); p.reg == 0 { // not registered (a catalog-only listing)
			err = ErrAgentNotFound
		}
	}
	if errors.Is(err, ErrAgentNotFound) && a.cfg.Fallback != nil {
		var ag *Agent
		if ag, err = a.cfg.Fallback(r.Context(), ref.id); err == nil {
			e = rowOf(ag)
			p = partsOf(e)
		}
	}
	if err == nil {
		_, err = ref.check(e.a, nil)
	}
	if err != nil {
		return err
	}
	online, seen := a.cfg.Directory.presenceOf(p.id, p.reg, p.lastSeen, a.cfg.Now, a.cfg.OnlineWindow)
	roll, err := a.cfg.Directory.rollup(e, a.cfg.Now)
	if err != nil {
		return err
	}
	writeAgentView(w, p, a.baseURL(r), online, seen, roll)
	return nil
}

// apiKeyPrefix marks registry api keys, so a leaked one is recognisable.
const apiKeyPrefix = "mk_"

// newAPIKey draws an api key: the same on every attempt of one write
// (cmdlog.Draw), so that a registration sent again to the next leader is
// the same registration.
func newAPIKey(ctx context.Context) string {
	var b [32]byte
	cmdlog.Draw(ctx, "api key", b[:])
	return apiKeyPrefix + base64.RawURLEncoding.EncodeToString(b[:])
}

// hashAPIKey is how api keys are stored: they are 256-bit random, so a
// plain SHA-256 is preimage-resistant without salting or stretching.
func hashAPIKey(k string) string {
	s := sha256.Sum256([]byte(k))
	return hex.EncodeToString(s[:])
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
