package registryapi

import (
	"cmp"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"time"
)

// DiscoveryView is the discovery card of spec 2.4 as the public address
// serves it (GET /agent/<id> with Accept: application/json), and what its
// HTML page shows: endpoint, tags, pricing and online flag, plus what a
// person or an indexer needs besides. docs/api.md documents the shape.
type DiscoveryView struct {
	AgentID     string  `json:"agent_id"`
	Handle      string  `json:"handle"`
	Name        string  `json:"name"`
	Description string  `json:"description"`
	Endpoint    *string `json:"endpoint"`
	DID         *string `json:"did"`
	DIDMesh     *string `json:"did_mesh"`
	Verified    bool    `json:"verified"`
	// Registered: a live registration holds the id; CatalogOnly: only a
	// catalog listing does.
	Registered  bool `json:"registered"`
	CatalogOnly bool `json:"catalog_only"`
	// Online: a heartbeat of this registration within the online
	// window (registering alone is not being online); LastHeartbeat is
	// the latest, null before the first; LastSeen is it or, without
	// one, the registration.
	Online        bool           `json:"online"`
	LastHeartbeat *time.Time     `json:"last_heartbeat"`
	LastSeen      *time.Time     `json:"last_seen"`
	Tags          []string       `json:"tags"`
	Capabilities  []string       `json:"capabilities"`
	Skills        []SkillView    `json:"skills"`
	Pricing       []PriceView    `json:"pricing"`
	SolUSD        *rateView      `json:"sol_usd"`
	Reputation    specReputation `json:"reputation"`
	// WeightedReputation is the weighted view (GET .../reputation), the
	// one to trust: reports from paying callers count more.
	WeightedReputation Weighted     `json:"weighted_reputation"`
	Liveness           LivenessView `json:"liveness"`
	Listing            *Listing     `json:"listing"`
	// Card is the URL of the mirrored full card, null without one.
	Card *string `json:"card"`
}

// SkillView is a skill as the discovery card lists it.
type SkillView struct {
	ID          string   `json:"id"`
	Name        string   `json:"name"`
	Description string   `json:"description"`
	Tags        []string `json:"tags"`
}

// PriceView is a pricing row with its price in SOL, and in USD when the
// node knows a SOL/USD rate (null otherwise). A free row costs 0; a row
// in USDC costs its dollars and no SOL; a row in another SPL token (this
// project's x402 v2 rows) has neither.
type PriceView struct {
	PriceRow
	SOL float64  `json:"sol"`
	USD *float64 `json:"usd"`
}

// LivenessView is the probes' record (Liveness) as the public address
// shows it. State is "reachable" (the last probe read a card),
// "unreachable" (it did not: since failing_since, for reason), "unchecked"
// (no probe yet) or "no_endpoint".
type LivenessView struct {
	State         string     `json:"state"`
	CheckedAt     *time.Time `json:"checked_at"`
	LastReachable *time.Time `json:"last_reachable"`
	LastFailure   *time.Time `json:"last_failure"`
	FailingSince  *time.Time `json:"failing_since"`
	Reason        *string    `json:"reason"`
}

// Liveness states.
const (
	LiveReachable   = "reachable"
	LiveUnreachable = "unreachable"
	LiveUnchecked   = "unchecked"
	LiveNoEndpoint  = "no_endpoint"
)

// publicAgent returns the row of the agent ref names for its public
// address: registered or catalog-only, from the fallback while this node
// catches up.
func (a *API) publicAgent(r *http.Request, ref agentRef) (*Agent, error) {
	ag, err := a.cfg.Directory.Lookup(ref.id)
	if errors.Is(err, ErrAgentNotFound) && a.cfg.Fallback != nil {
		ag, err = a.cfg.Fallback(r.Context(), ref.id)
	}
	return ref.check(ag, err)
}

// discovery builds the discovery card of ag at now.
func (a *API) discovery(r *http.Request, ag *Agent, now time.Time) (*DiscoveryView, error) {
	d := a.cfg.Directory
	name, desc := ag.texts()
	v := &DiscoveryView{
		AgentID: ag.ID, Handle: a.handle(r, ag.ID), Name: name, Description: desc,
		Endpoint: nullable(publicEndpoint(ag.Endpoint)), DID: nullable(ag.DID), DIDMesh: nullable(AliasOf(ag.DID)), Verified: ag.Pubkey != "",
		Registered: ag.Registered(), CatalogOnly: !ag.Registered(), Listing: ag.Listing,
		Capabilities: ag.allCapabilities(), Tags: ag.tags(), Skills: ag.skills(),
		Liveness: LivenessView{State: LiveNoEndpoint},
	}
	if v.Capabilities == nil {
		v.Capabilities = []string{}
	}
	if ag.Registered() {
		v.Online = d.Online(ag, now, a.cfg.OnlineWindow)
		seen := d.LastSeen(ag)
		v.LastSeen = &seen
		if beat, ok := d.LastBeat(ag); ok {
			v.LastHeartbeat = &beat
		}
		_, roll, err := d.Reputation(ag.ID, now)
		if err != nil && !errors.Is(err, ErrAgentNotFound) {
			return nil, err
		}
		v.Reputation, v.WeightedReputation = specOf(roll), roll.Weighted
		v.Liveness = a.livenessView(ag)
	}
	if ag.Registered() && ag.FullCard != nil {
		c := v.Handle + "/.well-known/agent.json"
		v.Card = &c
	}
	rt, haveRate := a.cfg.SolUSD.Rate(now)
	if haveRate {
		v.SolUSD = &rateView{Rate: rt.USD, AgeS: now.Sub(rt.At).Seconds(), Source: rt.Source}
	}
	v.Pricing = []PriceView{}
	for _, p := range ag.pricing() {
		v.Pricing = append(v.Pricing, priceView(p, rt, haveRate))
	}
	return v, nil
}

// Currencies of token rows a page can price: wrapped SOL (in lamports, as
// SOL) and USDC (in millionths, at par with the dollar).
const (
	currencyWSOL = "wSOL"
	currencyUSDC = "USDC"
	usdcUnits    = 1e6
)

// priceView prices a row in SOL and, with a SOL/USD rate, in USD; a USDC
// row is in USD at par and has no SOL price, and a row in another token
// has neither (its amount is in the token's own smallest unit).
func priceView(p PriceRow, rt SolUSDRate, haveRate bool) PriceView {
	pv := PriceView{PriceRow: p}
	switch p.Currency {
	case currencyFree:
	case currencyLamprt, currencyWSOL:
		pv.SOL = float64(p.Amount) / lamportsPerSOL
	case currencyUSDC:
		usd := float64(p.Amount) / usdcUnits
		pv.USD = &usd
		return pv
	default:
		return pv
	}
	if haveRate {
		usd := roundSignificant(pv.SOL*rt.USD, 12)
		pv.USD = &usd
	}
	return pv
}

func (a *API) livenessView(ag *Agent) LivenessView {
	if ag.Endpoint == "" {
		return LivenessView{State: LiveNoEndpoint}
	}
	l, ok := a.cfg.Directory.Liveness(ag)
	if !ok {
		return LivenessView{State: LiveUnchecked}
	}
	v := LivenessView{State: LiveUnreachable, CheckedAt: unixPtr(l.Checked), LastReachable: unixPtr(l.Reachable),
		LastFailure: unixPtr(l.Failed), FailingSince: unixPtr(l.FailingSince), Reason: nullable(l.Reason)}
	if l.IsReachable() {
		v.State = LiveReachable
	}
	return v
}

// roundSignificant rounds x to digits significant digits: a price times a
// rate carries float noise (1.5e-05 comes out 1.4999999999999999e-05)
// that no reader wants.
func roundSignificant(x float64, digits int) float64 {
	r, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'g', digits, 64), 64)
	return r
}

// unixPtr is Unix seconds s as a time, nil for 0.
func unixPtr(s int64) *time.Time {
	if s == 0 {
		return nil
	}
	t := time.Unix(s, 0).UTC()
	return &t
}

// displayName is the agent's name: its discovery card's, its full card's,
// its listing's, or its id.
func (a *Agent) displayName() string {
	name, _ := a.texts()
	return name
}

// texts returns the first name and the first description among the
// discovery card, the full card and the listing; the id for no name.
func (a *Agent) texts() (name, desc string) {
	var sources [][2]string
	if c := a.Card; c != nil {
		sources = append(sources, [2]string{c.Name, c.Description})
	}
	if f := cardView(a.FullCard); f != nil {
		sources = append(sources, [2]string{f.Name, f.Description})
	}
	if l := a.Listing; l != nil {
		sources = append(sources, [2]string{l.Name, l.Description})
	}
	for _, s := range sources {
		name, desc = cmp.Or(name, s[0]), cmp.Or(desc, s[1])
	}
	return cmp.Or(name, a.ID), desc
}

// tags are the agent's keywords: its capabilities, its cards' tags and
// its skills' tags, each once, in order.
func (a *Agent) tags() []string {
	out := slices.Clone(a.allCapabilities())
	if c := a.Card; c != nil {
		out = append(out, c.Tags...)
	}
	for _, s := range a.skills() {
		out = append(out, s.Tags...)
	}
	seen := map[string]bool{}
	return slices.DeleteFunc(append([]string{}, out...), func(t string) bool {
		dup := seen[t]
		seen[t] = true
		return dup
	})
}

// skills are the full card's skills, else the discovery card's.
func (a *Agent) skills() []SkillView {
	out := []SkillView{}
	if f := cardView(a.FullCard); f != nil && len(f.Skills) > 0 {
		for _, s := range f.Skills {
			out = append(out, SkillView{ID: s.ID, Name: s.Name, Description: s.Description, Tags: orEmpty(s.Tags)})
		}
		return out
	}
	if c := a.Card; c != nil {
		for _, s := range c.Skills {
			out = append(out, SkillView{ID: s.ID, Name: s.Name, Description: s.Description, Tags: orEmpty(s.Tags)})
		}
	}
	return out
}

// pricing is the full card's pricing, else the discovery card's.
func (a *Agent) pricing() []PriceRow { return a.pricingOf(cardView(a.FullCard)) }

// pricingOf is pricing with the full card decoded (full).
func (a *Agent) pricingOf(full *fullCard) []PriceRow {
	if f := full; f != nil && len(f.Pricing) > 0 {
		return f.Pricing
	}
	if c := a.Card; c != nil {
		return c.Pricing
	}
	return nil
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
