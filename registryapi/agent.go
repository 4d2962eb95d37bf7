package registryapi

import (
	"encoding/json"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agentmesh/mesh/internal/httpx"
)

// Agent is the stored directory row of one agent id (spec 2.1).
type Agent struct {
	ID string `json:"agent_id"`
	// Reg is the log sequence of the command that registered the current
	// owner; 0 when the id is not registered (a catalog-only listing).
	// Tokens name it, so a token of a former owner never acts on a new one.
	Reg          uint64    `json:"reg"`
	Capabilities []string  `json:"capabilities"`
	Endpoint     string    `json:"endpoint,omitempty"`
	Pubkey       string    `json:"pubkey,omitempty"` // canonical base64
	DID          string    `json:"did,omitempty"`    // did:key of Pubkey
	APIKeyHash   string    `json:"api_key_hash,omitempty"`
	RegisteredAt time.Time `json:"registered_at"`
	UpdatedAt    time.Time `json:"updated_at"`
	// LastSeen is the registration time; heartbeats live in Presence.
	LastSeen time.Time `json:"last_seen"`
	// Record is the agent's latest register request signed by its bound
	// key: what the directory attests and publishes in the DHT.
	Record *Signed `json:"record,omitempty"`
	// RecordSeq is the log sequence of the command that set Record: the
	// seq of the DHT record.
	RecordSeq uint64 `json:"record_seq,omitempty"`
	// RecordLogged: the stored row leaves Record out, which is the signed
	// request of log entry RecordSeq; CardLogged: it leaves FullCard out,
	// which that request carries (rowlog.go). Readers of either fill them
	// in (fromLog).
	RecordLogged bool `json:"record_logged,omitempty"`
	CardLogged   bool `json:"card_logged,omitempty"`
	// Listing is catalog metadata imported from an existing directory; it
	// survives deregistration (spec 3.1, catalog-only).
	Listing *Listing `json:"listing,omitempty"`
	// Card is the discovery card sent with the registration, if any.
	Card *DiscoveryCard `json:"card,omitempty"`
	// FullCard is the agent's full public card (fullcard.go), compacted:
	// handed over with the registration (CardFrom "registration") or
	// fetched from its endpoint by the directory ("fetched"), at CardAt.
	FullCard json.RawMessage `json:"full_card,omitempty"`
	CardFrom string          `json:"card_from,omitempty"`
	CardAt   time.Time       `json:"card_at,omitzero"`
	// ActivateBy (Unix ns) is when the registration expires unless its
	// agent takes a token; 0 once it did, or when it never expires.
	ActivateBy int64 `json:"activate_by,omitempty"`
}

// Registered reports whether the id currently has an owner.
func (a *Agent) Registered() bool { return a.Reg != 0 }

// clearMesh drops every mesh-side field, keeping id and listing (catalog-only).
func (a *Agent) clearMesh() {
	*a = Agent{ID: a.ID, Listing: a.Listing, Capabilities: []string{}}
}

// Listing is a catalog entry imported from an existing directory.
type Listing struct {
	Name         string   `json:"name,omitempty"`
	Description  string   `json:"description,omitempty"`
	URL          string   `json:"url,omitempty"`
	Capabilities []string `json:"capabilities,omitempty"`
}

// Limits on what a client may register.
const (
	maxIDLen         = 128
	maxCapabilities  = 64
	maxCapabilityLen = 64
	maxURLLen        = 2048
	maxStatusLen     = 64
	maxTextLen       = 2048
)

// idByte reports whether c may appear in an agent id; alnum bytes may also start one.
func idByte(c byte, first bool) bool {
	alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
	return alnum || !first && (c == '.' || c == '_' || c == ':' || c == '@' || c == '-')
}

func validIDChars(id string) bool {
	for i := 0; i < len(id); i++ {
		if !idByte(id[i], i == 0) {
			return false
		}
	}
	return true
}

// reservedIDs would collide with fixed paths under /v1/agents/.
var reservedIDs = []string{"me", "register", "token"}

// reservedID reports whether id is a reserved word in any case (without
// lowering a copy of every id a read names).
func reservedID(id string) bool {
	for _, w := range reservedIDs {
		if strings.EqualFold(id, w) {
			return true
		}
	}
	return false
}

// ValidateID checks an agent id: 1..128 characters of letters, digits and
// . _ : @ -, starting with a letter or digit, and not a reserved path word.
func ValidateID(id string) error {
	switch {
	case id == "":
		return httpx.ErrInvalid.With("agent_id is required")
	case len(id) > maxIDLen:
		return httpx.ErrInvalid.With("agent_id is longer than %d characters", maxIDLen)
	case !validIDChars(id):
		return httpx.ErrInvalid.With("agent_id %q may contain only letters, digits and . _ : @ - and must start with a letter or digit", id)
	case reservedID(id):
		return httpx.ErrInvalid.With("agent_id %q is reserved", id)
	}
	return nil
}

// ValidateNewID checks an id being registered or listed: ValidateID, and
// not in the did:mesh namespace, which names agents by their keys
// (alias.go): an id of that form would pass for another agent's alias.
// Rows of such ids logged before this rule stay valid; their paths
// resolve as aliases.
func ValidateNewID(id string) error {
	if err := ValidateID(id); err != nil {
		return err
	}
	if isAlias(id) {
		return httpx.ErrInvalid.With("agent_id %.80q: ids starting with %s are reserved: did:mesh:<key> names the agent registered with that key", id, AliasPrefix)
	}
	return nil
}

func validateCapabilities(caps []string) error {
	if len(caps) > maxCapabilities {
		return httpx.ErrInvalid.With("at most %d capabilities", maxCapabilities)
	}
	for _, c := range caps {
		if err := validateText("capability", c, maxCapabilityLen, true); err != nil {
			return err
		}
	}
	return nil
}

func validateEndpoint(field, s string) error {
	if s == "" {
		return nil
	}
	if len(s) > maxURLLen {
		return httpx.ErrInvalid.With("%s is longer than %d characters", field, maxURLLen)
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return httpx.ErrInvalid.With("%s must be an absolute http or https URL", field)
	}
	if u.User != nil {
		return httpx.ErrInvalid.With("%s must not carry credentials (user:password@): every node shows it to anyone", field)
	}
	return nil
}

// publicEndpoint is an endpoint as answers show it: without credentials.
// Registrations refuse an endpoint that carries some (validateEndpoint);
// a row an earlier release took keeps its endpoint as logged, and no
// answer shows the credentials.
func publicEndpoint(endpoint string) string {
	if !strings.Contains(endpoint, "@") {
		return endpoint // no userinfo, without parsing it at each read
	}
	u, err := url.Parse(endpoint)
	if err != nil || u.User == nil {
		return endpoint
	}
	u.User = nil
	return u.String()
}

// validateText refuses control characters and overlong values.
func validateText(field, s string, max int, required bool) error {
	if required && s == "" {
		return httpx.ErrInvalid.With("%s must not be empty", field)
	}
	if len(s) > max {
		return httpx.ErrInvalid.With("%s is longer than %d bytes", field, max)
	}
	if !utf8.ValidString(s) {
		return httpx.ErrInvalid.With("%s is not valid UTF-8", field)
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return httpx.ErrInvalid.With("%s contains control characters", field)
		}
	}
	return nil
}
