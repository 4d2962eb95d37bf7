package registryapi

import (
	"errors"
	"net/http"
	"time"

	"github.com/agentmesh/mesh/internal/httpx"
)

// flatRollup is the rollup as the feedback response shows it.
type flatRollup struct {
	N int `json:"n"`
	Dims
	Score *float64 `json:"score"`
}

func (a *API) feedback(w http.ResponseWriter, r *http.Request) error {
	ref, err := a.pathID(r)
	if err != nil {
		return err
	}
	body, err := httpx.ReadBody(w, r, a.cfg.MaxBody)
	if err != nil {
		return err
	}
	sig, err := a.requireSigner(r, body)
	if err != nil {
		return err
	}
	var rep Report
	if err := httpx.DecodeJSON(body, &rep); err != nil {
		return err
	}
	if err := rep.Validate(); err != nil {
		return err
	}
	res, err := a.propose(r.Context(), Command{At: a.now().UnixNano(), Sig: sig, Feedback: &FeedbackOp{
		Target: ref.id, DID: ref.did, Report: rep, Signed: *signedRequest(r, body),
	}})
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{
		"status": "recorded", "counted": res.Counted,
		"reputation":          flatRollup{N: res.Rollup.N, Dims: res.Rollup.Dims, Score: res.Rollup.Score},
		"weighted_reputation": res.Rollup.Weighted,
	})
	return nil
}

// reputationView is the read form of spec 2.7.
type reputationView struct {
	Agent     string     `json:"agent"`
	N         int        `json:"n"`
	Score     *float64   `json:"score"`
	Dims      Dims       `json:"dims"`
	UpdatedAt *time.Time `json:"updated_at"`
	// Weighted is the weighted view, beside the spec's.
	Weighted Weighted `json:"weighted"`
}

func (a *API) reputation(w http.ResponseWriter, r *http.Request) error {
	ref, err := a.pathID(r)
	if err != nil {
		return err
	}
	ag, roll, err := a.cfg.Directory.Reputation(ref.id, a.now())
	if ag, err = ref.check(ag, err); err != nil {
		return err
	}
	v := reputationView{Agent: ag.ID, N: roll.N, Score: roll.Score, Dims: roll.Dims, Weighted: roll.Weighted}
	if !roll.UpdatedAt.IsZero() {
		v.UpdatedAt = &roll.UpdatedAt
	}
	httpx.WriteJSON(w, http.StatusOK, v)
	return nil
}

// identityView is the attestation of spec 2.2.
type identityView struct {
	AgentID            string         `json:"agent_id"`
	Handle             string         `json:"handle"`
	Pubkey             *string        `json:"pubkey"`
	DID                *string        `json:"did"`
	DIDMesh            *string        `json:"did_mesh"`
	Verified           bool           `json:"verified"`
	Endpoint           *string        `json:"endpoint"`
	Registered         bool           `json:"registered"`
	Online             bool           `json:"online"`
	Reputation         specReputation `json:"reputation"`
	WeightedReputation Weighted       `json:"weighted_reputation"`
}

// specReputation is the reputation of spec 2.2: {n, score, dims}.
type specReputation struct {
	N     int      `json:"n"`
	Score *float64 `json:"score"`
	Dims  Dims     `json:"dims"`
}

func specOf(r Rollup) specReputation { return specReputation{N: r.N, Score: r.Score, Dims: r.Dims} }

func (a *API) identity(w http.ResponseWriter, r *http.Request) error {
	ref, err := a.pathID(r)
	if err != nil {
		return err
	}
	now := a.now()
	ag, roll, err := a.cfg.Directory.Reputation(ref.id, now)
	if errors.Is(err, ErrAgentNotFound) && a.cfg.Fallback != nil {
		ag, err = a.cfg.Fallback(r.Context(), ref.id) // reputation unknown here: n = 0
	}
	if ag, err = ref.check(ag, err); err != nil {
		return err
	}
	v := identityView{
		AgentID: ag.ID, Handle: a.handle(r, ag.ID), Pubkey: nullable(ag.Pubkey), DID: nullable(ag.DID),
		DIDMesh: nullable(AliasOf(ag.DID)), Verified: ag.Pubkey != "", Endpoint: nullable(publicEndpoint(ag.Endpoint)), Registered: true,
		Online: a.cfg.Directory.Online(ag, now, a.cfg.OnlineWindow),
	}
	v.Reputation, v.WeightedReputation = specOf(roll), roll.Weighted
	httpx.WriteJSON(w, http.StatusOK, v)
	return nil
}
