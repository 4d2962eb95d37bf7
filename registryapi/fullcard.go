package registryapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/agentmesh/mesh/internal/httpx"
)

// The full public card (spec 2.3, an A2A AgentCard) of an agent, as the
// directory keeps it: the JSON the agent handed over with its registration
// (register body field "full_card") or served at its endpoint's
// /.well-known/agent.json (fetched by the directory, CardOp), compacted.
// The public address mirrors it (mirrorCard), adding what an A2A AgentCard
// requires when the agent left it out.

// MaxFullCard bounds a full card the directory keeps.
const MaxFullCard = 64 << 10

// maxCardDepth bounds the nesting of a full card's objects and arrays
// (A2A's own go 4 deep, a skill's JSON schema a few more): every node
// keeps the card, and A2A tooling reads the mirror, so a card nested some
// 30,000 deep in its 64 KiB would only cost them.
const maxCardDepth = 32

// Where a kept full card came from.
const (
	cardFromRegistration = "registration"
	cardFromFetch        = "fetched"
)

// A2AProtocolVersion is the A2A version the mirrored card claims when the
// agent's card names none.
const A2AProtocolVersion = "0.3.0"

// ErrNoCard: the agent has no full card (a catalog listing only, or none
// handed over or fetched yet).
var ErrNoCard = httpx.E(http.StatusNotFound, "card_not_found", "this agent has no full card here")

// fullCard is what the page reads of a full card. Decoding it checks the
// types of the fields it names; the rest of the card is kept as sent.
type fullCard struct {
	Name               string          `json:"name"`
	Description        string          `json:"description"`
	Version            string          `json:"version"`
	URL                string          `json:"url"`
	ProtocolVersion    string          `json:"protocolVersion"`
	Capabilities       map[string]any  `json:"capabilities"`
	DefaultInputModes  []string        `json:"defaultInputModes"`
	DefaultOutputModes []string        `json:"defaultOutputModes"`
	Protocols          []string        `json:"protocols"`
	Pricing            priceRows       `json:"pricing"`
	Skills             []fullCardSkill `json:"skills"`
}

type fullCardSkill struct {
	ID          string   `json:"id"`
	Name        string   `json:"name"`
	Description string   `json:"description"`
	Tags        []string `json:"tags"`
	Examples    []string `json:"examples"`
	// Pricing is the skill's own rows (this project's agents declare
	// them), read loosely: cards were accepted before it was read.
	Pricing loosePrices `json:"pricing"`
}

// loosePrices is a skill's pricing: rows as spec 2.5's pricing, or none
// when they do not decode (a card is never refused for them).
type loosePrices []PriceRow

func (p *loosePrices) UnmarshalJSON(b []byte) error {
	var rows priceRows
	if json.Unmarshal(b, &rows) == nil && len(rows) <= maxPriceRows {
		*p = loosePrices(rows)
	}
	return nil
}

// priceRows is spec 2.5's pricing: one object or an array of rows.
type priceRows []PriceRow

func (p *priceRows) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case string(b) == "null":
		*p = nil
		return nil
	case len(b) > 0 && b[0] == '{':
		var row PriceRow
		if err := json.Unmarshal(b, &row); err != nil {
			return err
		}
		*p = priceRows{row}
		return nil
	}
	var rows []PriceRow
	err := json.Unmarshal(b, &rows)
	*p = rows
	return err
}

// parseFullCard checks a full card and returns it compacted with its
// decoded view. It is deterministic (Apply runs it).
func parseFullCard(raw []byte) (json.RawMessage, *fullCard, error) {
	if len(raw) > MaxFullCard {
		return nil, nil, httpx.ErrInvalid.With("full_card is over %d bytes", MaxFullCard)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil || buf.Len() == 0 || buf.Bytes()[0] != '{' {
		return nil, nil, httpx.ErrInvalid.With("full_card must be a JSON object")
	}
	var c fullCard
	if err := json.Unmarshal(buf.Bytes(), &c); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, nil, httpx.ErrInvalid.With("full_card field %s: want %s", te.Field, te.Type)
		}
		return nil, nil, httpx.ErrInvalid.With("full_card: %v", err)
	}
	if err := c.validate(); err != nil {
		return nil, nil, err
	}
	return buf.Bytes(), &c, nil
}

func (c *fullCard) validate() error {
	if len(c.Skills) > maxCardSkills || len(c.Pricing) > maxPriceRows {
		return httpx.ErrInvalid.With("full_card: at most %d skills and %d pricing rows", maxCardSkills, maxPriceRows)
	}
	for _, s := range c.Skills {
		if s.ID == "" || len(s.Tags) > maxCardTags {
			return httpx.ErrInvalid.With("full_card skill %q: an id and at most %d tags", s.ID, maxCardTags)
		}
	}
	return nil
}

// ValidateFullCard checks a full card as the directory would keep it.
func ValidateFullCard(raw []byte) error {
	_, _, err := admitFullCard(raw)
	return err
}

// admitFullCard is parseFullCard for a card on its way to the log (handed
// over or fetched), which must not nest past maxCardDepth. Applying the
// log does not check the depth, so that entries taken before the bound
// still apply.
func admitFullCard(raw []byte) (json.RawMessage, *fullCard, error) {
	if jsonDepth(raw) > maxCardDepth {
		return nil, nil, httpx.ErrInvalid.With("full_card nests objects and arrays more than %d deep", maxCardDepth)
	}
	return parseFullCard(raw)
}

// jsonDepth is how deep JSON text b nests objects and arrays.
func jsonDepth(b []byte) int {
	depth, deepest, inString, escaped := 0, 0, false, false
	for _, c := range b {
		switch {
		case escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case c == '"':
			inString = !inString
		case inString:
		case c == '{' || c == '[':
			depth++
			deepest = max(deepest, depth)
		case c == '}' || c == ']':
			depth--
		}
	}
	return deepest
}

// view decodes a kept card; nil for none (or one that no longer decodes).
func cardView(raw json.RawMessage) *fullCard {
	if raw == nil {
		return nil
	}
	var c fullCard
	if json.Unmarshal(raw, &c) != nil {
		return nil
	}
	return &c
}

// fullCardOf decodes the full_card of a register body: absent and null are none.
func fullCardOf(raw json.RawMessage) (json.RawMessage, error) {
	if len(raw) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return nil, nil
	}
	card, _, err := admitFullCard(raw)
	return card, err
}

// mirrorCard is the full card of a as the public address serves it: the
// agent's card with every field it has, plus what an A2A AgentCard
// requires where the agent left it out, filled from what the directory
// knows (its id, endpoint and capabilities).
func mirrorCard(a *Agent) (map[string]any, error) {
	if a.FullCard == nil || !a.Registered() {
		return nil, ErrNoCard.With("agent %s has no full card here: %s", a.ID, noCardWhy(a))
	}
	d := json.NewDecoder(bytes.NewReader(a.FullCard))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		return nil, fmt.Errorf("registry: kept card of %s: %w", a.ID, err)
	}
	fill := func(k string, v any) {
		if _, ok := m[k]; !ok {
			m[k] = v
		}
	}
	fill("name", a.displayName())
	fill("description", "")
	fill("version", "unknown")
	fill("url", publicEndpoint(a.Endpoint))
	fill("protocolVersion", A2AProtocolVersion)
	fill("capabilities", map[string]any{})
	fill("defaultInputModes", []string{"application/json"})
	fill("defaultOutputModes", []string{"application/json"})
	fill("skills", skillsOf(a.Capabilities))
	if skills, ok := m["skills"].([]any); ok {
		for _, s := range skills {
			if s, ok := s.(map[string]any); ok {
				completeSkill(s)
			}
		}
	}
	return m, nil
}

func noCardWhy(a *Agent) string {
	if !a.Registered() {
		return "it is a catalog listing only"
	}
	return "it handed none over and none was fetched from its endpoint yet"
}

// skillsOf makes A2A skills of bare capabilities.
func skillsOf(caps []string) []map[string]any {
	out := make([]map[string]any, len(caps))
	for i, c := range caps {
		out[i] = map[string]any{"id": c, "name": c, "description": c, "tags": []string{c}}
	}
	return out
}

// completeSkill adds the fields an A2A AgentSkill requires.
func completeSkill(s map[string]any) {
	id, _ := s["id"].(string)
	for k, v := range map[string]any{"name": id, "description": "", "tags": []string{}} {
		if _, ok := s[k]; !ok {
			s[k] = v
		}
	}
}
