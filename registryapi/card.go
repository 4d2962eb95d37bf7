package registryapi

import (
	"encoding/json"

	"github.com/agentmesh/mesh/internal/httpx"
)

// DiscoveryCard is the slim card of spec 2.4 that a registration may carry
// (register body field "card", this project's extension): what the oracle
// indexes and filters on. The full card stays with the agent.
type DiscoveryCard struct {
	Name        string      `json:"name,omitempty"`
	Description string      `json:"description,omitempty"`
	Tags        []string    `json:"tags,omitempty"`
	Skills      []CardSkill `json:"skills,omitempty"`
	// Pricing rows as in spec 2.5; always an array here.
	Pricing []PriceRow `json:"pricing,omitempty"`
}

// CardSkill is a skill as the discovery card shows it.
type CardSkill struct {
	ID          string   `json:"id"`
	Name        string   `json:"name,omitempty"`
	Description string   `json:"description,omitempty"`
	Tags        []string `json:"tags,omitempty"`
}

// PriceRow is one pricing row of spec 2.5.
type PriceRow struct {
	Unit     string `json:"unit"`
	Amount   uint64 `json:"amount"`
	Currency string `json:"currency"`
	Network  string `json:"network,omitempty"`
	// Tier is the row's optional tier (spec 2.5), kept for display.
	Tier looseText `json:"tier,omitempty"`
}

// looseText is an optional text field read after the fields a card was
// held to were fixed (the log and DHT records hold cards checked without
// it): a string of at most maxTagLen bytes without control characters
// is kept, anything else is dropped rather than refused, so that no card
// accepted before is refused now.
type looseText string

func (t *looseText) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil && validateText("text", s, maxTagLen, false) == nil {
		*t = looseText(s)
	}
	return nil
}

// Bounds of a discovery card.
const (
	maxCardTags    = 32
	maxCardSkills  = 64
	maxPriceRows   = 16
	maxNameLen     = 256
	maxTagLen      = 64
	unitRequest    = "request"
	currencyFree   = "free"
	currencyLamprt = "lamports"
)

func (c *DiscoveryCard) validate() error {
	if len(c.Tags) > maxCardTags || len(c.Skills) > maxCardSkills || len(c.Pricing) > maxPriceRows {
		return httpx.ErrInvalid.With("card: at most %d tags, %d skills and %d pricing rows", maxCardTags, maxCardSkills, maxPriceRows)
	}
	if err := validateTexts("card", c.Name, c.Description, c.Tags); err != nil {
		return err
	}
	for _, s := range c.Skills {
		if err := validateText("card skill id", s.ID, maxTagLen, true); err != nil {
			return err
		}
		if err := validateTexts("card skill "+s.ID, s.Name, s.Description, s.Tags); err != nil {
			return err
		}
	}
	for _, p := range c.Pricing {
		if p.Currency != currencyFree && p.Currency != currencyLamprt {
			return httpx.ErrInvalid.With("card pricing: currency must be lamports or free")
		}
		if err := validateText("card pricing unit", p.Unit, maxTagLen, true); err != nil {
			return err
		}
		if err := validateText("card pricing network", p.Network, maxTagLen, false); err != nil {
			return err
		}
	}
	return nil
}

// validateTexts checks a name, a description and tags.
func validateTexts(what, name, desc string, tags []string) error {
	if len(tags) > maxCardTags {
		return httpx.ErrInvalid.With("%s: at most %d tags", what, maxCardTags)
	}
	if err := validateText(what+" name", name, maxNameLen, false); err != nil {
		return err
	}
	if err := validateText(what+" description", desc, maxTextLen, false); err != nil {
		return err
	}
	for _, t := range tags {
		if err := validateText(what+" tag", t, maxTagLen, true); err != nil {
			return err
		}
	}
	return nil
}

// cheapestRequest is the lowest per-request price of rows in lamports (0
// when a row is free), best when none is lower, nil when no row prices a
// request. Rows in SPL tokens (USDC, wSOL, ...) are not lamports: they
// price nothing here.
func cheapestRequest(best *uint64, rows []PriceRow) *uint64 {
	return cheapestIn(best, rows, currencyLamprt)
}

// cheapestIn is cheapestRequest in currency's smallest unit: rows in
// currency and free rows count.
func cheapestIn(best *uint64, rows []PriceRow, currency string) *uint64 {
	for _, p := range rows {
		amount := p.Amount
		switch p.Currency {
		case currencyFree:
			amount = 0
		case currency:
		default:
			continue
		}
		if p.Unit == unitRequest && (best == nil || amount < *best) {
			best = &amount
		}
	}
	return best
}
