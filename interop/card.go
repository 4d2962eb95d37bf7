package interop

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"

	"github.com/gagliardetto/solana-go"

	"github.com/agentmesh/mesh/identity"
)

// Card is the full public card an agent serves at /.well-known/agent.json
// and /.well-known/agent-card.json (spec 2.3, the A2A PublicCard) plus the
// payment block of spec 2.5. It is also an A2A AgentCard of both versions
// the agent speaks: A2A 0.3 clients read protocolVersion, url,
// preferredTransport and additionalInterfaces, A2A 1.0 clients
// supportedInterfaces; capabilities and each skill's tags are A2A fields
// the spec's card lacks. (A client that asks for A2A-Version 1.0 is served
// the card in 1.0's own shape, which takes no other field.)
type Card struct {
	ProtocolVersion      string           `json:"protocolVersion"`
	PreferredTransport   string           `json:"preferredTransport,omitempty"`
	AdditionalInterfaces []AgentInterface `json:"additionalInterfaces,omitempty"`
	// SupportedInterfaces are the A2A 1.0 interfaces, preferred first.
	SupportedInterfaces []AgentInterfaceV1 `json:"supportedInterfaces,omitempty"`
	Capabilities        A2ACapabilities    `json:"capabilities"`

	Name               string        `json:"name"`
	Version            string        `json:"version"`
	Description        string        `json:"description"`
	URL                string        `json:"url"`
	DefaultInputModes  []string      `json:"defaultInputModes"`
	DefaultOutputModes []string      `json:"defaultOutputModes"`
	Protocols          []string      `json:"protocols"`
	Pricing            Prices        `json:"pricing"`
	Payment            *PaymentBlock `json:"payment,omitempty"`
	Availability       Availability  `json:"availability"`
	Contact            Contact       `json:"contact"`
	Skills             []SkillCard   `json:"skills"`
	// MeshSig lists the Mesh-Sig schemes the agent verifies: "v1" (spec
	// 5) and, on this project's agents, "v1-bound" (a signature that also
	// names the agent and the X-Api-Key; see docs/api.md). This project's
	// extension of the card; absent means v1 only.
	MeshSig []string `json:"mesh_sig,omitempty"`
}

// AcceptsBoundSig reports whether the card says the agent verifies
// v1-bound signatures.
func (c *Card) AcceptsBoundSig() bool {
	return slices.Contains(c.MeshSig, identity.SigVersionBound)
}

// AgentInterface is an A2A 0.3 interface: a transport served at a URL.
type AgentInterface struct {
	URL       string `json:"url"`
	Transport string `json:"transport"`
}

// AgentInterfaceV1 is an A2A 1.0 interface: a protocol binding of one A2A
// version served at a URL.
type AgentInterfaceV1 struct {
	URL             string `json:"url"`
	ProtocolBinding string `json:"protocolBinding"`
	ProtocolVersion string `json:"protocolVersion"`
}

// A2ACapabilities is the A2A card's capabilities block.
type A2ACapabilities struct {
	Streaming              bool           `json:"streaming"`
	PushNotifications      bool           `json:"pushNotifications"`
	StateTransitionHistory bool           `json:"stateTransitionHistory"`
	Extensions             []A2AExtension `json:"extensions,omitempty"`
}

// A2AExtension declares an A2A protocol extension the agent supports.
type A2AExtension struct {
	URI         string `json:"uri"`
	Description string `json:"description,omitempty"`
	Required    bool   `json:"required"`
}

// OffersA2A reports whether the card declares an A2A JSON-RPC interface,
// and at which URL.
func (c *Card) OffersA2A() (string, bool) {
	if c.PreferredTransport == TransportJSONRPC && c.URL != "" {
		return c.URL, true
	}
	for _, i := range c.AdditionalInterfaces {
		if i.Transport == TransportJSONRPC && i.URL != "" {
			return i.URL, true
		}
	}
	return "", false
}

// Availability is the card's availability block.
type Availability struct {
	Now         bool   `json:"now"`
	WindowHours int    `json:"window_hours"`
	SLA         string `json:"sla"`
}

// Contact says where to call the agent: http is the skill endpoint base,
// a2a the URL of the well-known card.
type Contact struct {
	HTTP string `json:"http"`
	A2A  string `json:"a2a"`
}

// SkillCard is a skill as the card shows it. Pricing is this project's
// extension of the A2A skill entry: the rows that price this skill (the
// card's top-level pricing is the cheapest row per network, for indexers).
type SkillCard struct {
	ID          string   `json:"id"`
	Name        string   `json:"name"`
	Description string   `json:"description"`
	Examples    []string `json:"examples"`
	// Tags are the skill's A2A keywords (at least an empty list).
	Tags    []string `json:"tags"`
	Pricing Prices   `json:"pricing,omitempty"`
}

// Price is one pricing row (spec 2.5). Amount is an integer in the
// currency's smallest unit per Unit: lamports, or for an SPL token row its
// smallest unit; Network is explicit on every priced row.
type Price struct {
	Unit     string `json:"unit"`
	Amount   uint64 `json:"amount"`
	Currency string `json:"currency"`
	Network  string `json:"network,omitempty"`
	Tier     string `json:"tier,omitempty"`
	// Asset is the SPL mint of a token row (base58): this project's
	// extension of the row. A row in USDC or wSOL may leave it out on a
	// known network; the card shows it filled in.
	Asset string `json:"asset,omitempty"`
}

// Free is the pricing row of a free skill or agent: unit request, amount 0,
// currency free.
func Free() Price { return Price{Unit: UnitRequest, Amount: 0, Currency: CurrencyFree} }

// Lamports is a per-request price in lamports on network.
func Lamports(amount uint64, network string) Price {
	return Price{Unit: UnitRequest, Amount: amount, Currency: CurrencyLamports, Network: network}
}

// Token is a per-request price of amount smallest units of an SPL token
// on network: currency CurrencyUSDC or CurrencyWSOL with mint "" (the
// known mint), or any currency name with its mint. It is paid by x402 v2
// ("exact" on Solana), which needs a fee payer (PaymentConfig).
func Token(amount uint64, currency, mint, network string) Price {
	if mint == "" {
		mint, _ = KnownMint(currency, network)
	}
	return Price{Unit: UnitRequest, Amount: amount, Currency: currency, Network: network, Asset: mint}
}

// IsFree reports whether the row asks for nothing.
func (p Price) IsFree() bool { return p.Currency == CurrencyFree || p.Amount == 0 }

// IsToken reports whether the row is priced in an SPL token.
func (p Price) IsToken() bool { return p.Currency != CurrencyFree && p.Currency != CurrencyLamports }

// withMint is the row with its known mint filled in.
func (p Price) withMint() Price {
	if p.IsToken() && p.Asset == "" {
		p.Asset, _ = KnownMint(p.Currency, p.Network)
	}
	return p
}

func (p Price) validate() error {
	switch {
	case p.Unit == "":
		return fmt.Errorf("pricing row: unit is required")
	case p.Currency == CurrencyFree:
		if p.Amount != 0 {
			return fmt.Errorf("pricing row: currency free needs amount 0")
		}
	case p.Currency == CurrencyLamports:
		if p.Network == "" {
			return fmt.Errorf("pricing row of %d lamports: network is required", p.Amount)
		}
	case p.Currency == "":
		return fmt.Errorf("pricing row: currency is required (lamports, free, %s, %s or a token with its asset)", CurrencyUSDC, CurrencyWSOL)
	default:
		return p.validateToken()
	}
	return nil
}

// validateToken checks an SPL token row: a network, a positive amount and
// a mint (given, or known for the currency on the network).
func (p Price) validateToken() error {
	if p.Network == "" {
		return fmt.Errorf("pricing row in %s: network is required", p.Currency)
	}
	if p.Amount == 0 {
		return fmt.Errorf("pricing row in %s: amount must be positive (a free skill has a free row)", p.Currency)
	}
	mint := p.withMint().Asset
	if mint == "" {
		return fmt.Errorf("pricing row in %s: asset (the token's SPL mint) is required on %s", p.Currency, p.Network)
	}
	if _, err := solana.PublicKeyFromBase58(mint); err != nil {
		return fmt.Errorf("pricing row in %s: asset %q is not a base58 address", p.Currency, mint)
	}
	return nil
}

// Prices is a list of pricing rows. On the wire it is one object when it
// holds one row and an array otherwise; both forms are accepted.
type Prices []Price

// MarshalJSON writes one row as an object, several as an array.
func (ps Prices) MarshalJSON() ([]byte, error) {
	if len(ps) == 1 {
		return json.Marshal(ps[0])
	}
	return json.Marshal([]Price(ps))
}

// UnmarshalJSON accepts an object, an array of objects or null.
func (ps *Prices) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case len(b) == 0 || string(b) == "null":
		*ps = nil
		return nil
	case b[0] == '{':
		var p Price
		if err := json.Unmarshal(b, &p); err != nil {
			return err
		}
		*ps = Prices{p}
		return nil
	}
	var rows []Price
	if err := json.Unmarshal(b, &rows); err != nil {
		return err
	}
	*ps = rows
	return nil
}

// For returns the row priced on network, or a free row, if any.
func (ps Prices) For(network string) (Price, bool) {
	for _, p := range ps {
		if p.Currency == CurrencyLamports && p.Network == network {
			return p, true
		}
	}
	for _, p := range ps {
		if p.IsFree() {
			return p, true
		}
	}
	return Price{}, false
}

// priced reports whether any row asks for something.
func (ps Prices) priced() bool {
	return slices.ContainsFunc(ps, func(p Price) bool { return !p.IsFree() })
}

// Tokens returns the SPL token rows priced on network, their mints
// filled in.
func (ps Prices) Tokens(network string) Prices {
	var out Prices
	for _, p := range ps {
		if p.IsToken() && p.Network == network {
			out = append(out, p.withMint())
		}
	}
	return out
}

// PaymentBlock is the card's payment block (spec 2.5).
type PaymentBlock struct {
	Modes   []string `json:"modes"`
	Network string   `json:"network"`
	Wallet  string   `json:"wallet"`
	// Commitment is what a payment must reach before the agent sees it
	// (confirmed or finalized): a client waits for it before sending the
	// proof. This project's extension of the block.
	Commitment string `json:"commitment,omitempty"`
	// Deposit is present when the agent takes prepaid deposits.
	Deposit *DepositTerms `json:"deposit,omitempty"`
	// PostpayMinReputation: callers at or above this score are served
	// first and billed after; null means pre-pay only.
	PostpayMinReputation *float64  `json:"postpay_min_reputation"`
	FreeTier             *FreeTier `json:"free_tier,omitempty"`
}

// Payment modes.
const (
	ModeX402    = "x402"
	ModeDeposit = "deposit"
)

// DepositTerms describe prepaid deposits. A deposit of L lamports credits
// L / Divisor units; one call debits its price / Divisor units.
type DepositTerms struct {
	MinLamports uint64 `json:"min_lamports"`
	CreditUnit  string `json:"credit_unit"`
	Divisor     uint64 `json:"divisor"`
}

// FreeTier is the daily allowance of signed callers.
type FreeTier struct {
	CallsPerDay int    `json:"calls_per_day"`
	By          string `json:"by"`
}

// FreeTierBy is how this implementation counts the allowance: against the
// caller's key and its IP address, both.
const FreeTierBy = "pubkey+ip"

// reservedSkillIDs collide with /v1 paths of the node or of the spec.
var reservedSkillIDs = []string{
	"agents", "clusters", "whoami", "topup", "balance", "admin", "search",
	"health", "metrics", "me", "register", "token", "ws", "wall", "boards",
}

var skillIDPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,63}$`)

// ValidateSkillID checks a skill id: 1-64 lowercase letters, digits, and
// "_.-", starting with a letter or digit, not a reserved /v1 path segment.
func ValidateSkillID(id string) error {
	if !skillIDPattern.MatchString(id) {
		return fmt.Errorf("%w: skill id %q must be 1-64 of a-z 0-9 _ . - starting with a letter or digit", ErrConfig, id)
	}
	if slices.Contains(reservedSkillIDs, id) {
		return fmt.Errorf("%w: skill id %q is reserved (it names a /v1 path of the node)", ErrConfig, id)
	}
	return nil
}
