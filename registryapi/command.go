package registryapi

import (
	"encoding/json"
	"time"
)

// Command is one write to the directory. Exactly one operation field is set.
// Everything Apply needs travels inside it: the proposer's clock reading
// (At), the verified signer of a signed request (Sig) and any random value.
type Command struct {
	// Seq is the command's place in the log and At the proposer's clock in
	// Unix nanoseconds, Apply's only "now": both travel in the cmdlog
	// entry that carries the command.
	Seq uint64 `json:"-"`
	At  int64  `json:"-"`
	// Sig names the key whose Mesh-Sig authorised the command. Apply claims
	// its nonce, so a replayed request fails on every replica.
	Sig *SigClaim `json:"sig,omitempty"`

	Register  *RegisterOp  `json:"register,omitempty"`
	Heartbeat *HeartbeatOp `json:"heartbeat,omitempty"`
	Delete    *DeleteOp    `json:"delete,omitempty"`
	Feedback  *FeedbackOp  `json:"feedback,omitempty"`
	Catalog   *CatalogOp   `json:"catalog,omitempty"`
	Activate  *ActivateOp  `json:"activate,omitempty"`
	Expire    *ExpireOp    `json:"expire,omitempty"`
	Card      *CardOp      `json:"card,omitempty"`
}

// Time returns At as a time.Time in UTC.
func (c *Command) Time() time.Time { return time.Unix(0, c.At).UTC() }

// agentIDs lists the directory rows the command may change.
func (c *Command) agentIDs() []string {
	switch {
	case c.Register != nil:
		return []string{c.Register.AgentID}
	case c.Delete != nil:
		return []string{c.Delete.AgentID}
	case c.Activate != nil:
		return []string{c.Activate.AgentID}
	case c.Card != nil:
		return []string{c.Card.AgentID}
	case c.Expire != nil:
		ids := make([]string, len(c.Expire.Agents))
		for i, a := range c.Expire.Agents {
			ids[i] = a.AgentID
		}
		return ids
	case c.Catalog != nil:
		ids := make([]string, len(c.Catalog.Listings))
		for i, l := range c.Catalog.Listings {
			ids[i] = l.AgentID
		}
		return ids
	}
	return nil
}

// SigClaim is the verified signer and nonce of a Mesh-Sig.
type SigClaim struct {
	Pubkey string `json:"pubkey"` // canonical base64
	Nonce  string `json:"nonce"`
}

// RegisterOp creates or updates a registration.
type RegisterOp struct {
	AgentID      string   `json:"agent_id"`
	Capabilities []string `json:"capabilities"`
	Endpoint     string   `json:"endpoint,omitempty"`
	// Pubkey, when set, is bound; the command's Sig must be by this key.
	Pubkey string `json:"pubkey,omitempty"`
	// APIKeyHash is the SHA-256 (hex) of the api_key handed to the registrant.
	APIKeyHash string `json:"api_key_hash"`
	// OwnerReg is the registration named by the caller's bearer token, if any.
	OwnerReg uint64 `json:"owner_reg,omitempty"`
	// Signed is the request as its author signed it, when it carried a
	// Mesh-Sig: the agent's own proof of its record in the DHT.
	Signed *Signed `json:"signed,omitempty"`
	// Card is the registration's discovery card, if it sent one.
	Card *DiscoveryCard `json:"card,omitempty"`
	// FullCard is the registration's full card (compacted), if it sent one
	// and it is not the one in Signed's body (CardSigned).
	FullCard json.RawMessage `json:"full_card,omitempty"`
	// CardSigned: the full card is the one Signed's body carries (its
	// full_card, compacted), and FullCard is left out, so that the entry
	// carries the card once (entries logged before carry both).
	CardSigned bool `json:"card_signed,omitempty"`
	// ActivateBy (Unix ns), when set, is when a new registration that
	// never took a token expires (see ExpireOp). It travels in the command,
	// set by the directory's handler, so that every node applies the same
	// deadline and registrations logged before it existed never expire.
	ActivateBy int64 `json:"activate_by,omitempty"`
}

// CardOp sets the full card the directory fetched from registration Reg's
// endpoint (fullcard.go). The directory proposes it only when the card
// changed; Apply refuses one equal to the kept card, or for a
// registration gone since, or one whose agent hands its card over itself.
type CardOp struct {
	AgentID string          `json:"agent_id"`
	Reg     uint64          `json:"reg"`
	Card    json.RawMessage `json:"card"`
}

// ActivateOp marks a registration as in use: its agent took its first
// token. The registration no longer expires.
type ActivateOp struct {
	AgentID string `json:"agent_id"`
	Reg     uint64 `json:"reg"`
}

// ExpireOp drops registrations that never took a token by their
// ActivateBy. The directory proposes it; Apply checks each again against
// the command's clock and skips one activated, deleted or registered
// anew since, so every node drops the same ones.
type ExpireOp struct {
	Agents []AgentReg `json:"agents"`
}

// AgentReg names one registration of an agent id.
type AgentReg struct {
	AgentID string `json:"agent_id"`
	Reg     uint64 `json:"reg"`
}

// HeartbeatOp is a heartbeat as logs written before Presence carried it.
type HeartbeatOp struct {
	AgentID string `json:"agent_id"`
}

// DeleteOp deregisters an agent.
type DeleteOp struct {
	AgentID string `json:"agent_id"`
	Reg     uint64 `json:"reg"`
}

// FeedbackOp files a reputation report. The signed request is kept whole so
// that anyone can re-verify the report later.
type FeedbackOp struct {
	Target string `json:"target"`
	// DID, when the feedback named its target by a did:mesh alias, is the
	// alias's did:key: the feedback applies only if the target holds it
	// then (the node that resolved the alias may have been behind).
	DID    string `json:"did,omitempty"`
	Report Report `json:"report"`
	Signed Signed `json:"signed"`
}

// Signed is a request exactly as its author signed it.
type Signed struct {
	Method  string `json:"method"`
	Path    string `json:"path"`
	Body    string `json:"body"`
	MeshSig string `json:"mesh_sig"`
}

// CatalogOp imports listings from an existing directory.
type CatalogOp struct {
	Listings []ImportListing `json:"listings"`
}

// ImportListing is one catalog row.
type ImportListing struct {
	AgentID string `json:"agent_id"`
	Listing
}

// Result is what applying a command produced.
type Result struct {
	Agent   *Agent  `json:"agent,omitempty"`
	Created bool    `json:"created,omitempty"`
	Counted bool    `json:"counted,omitempty"`
	Rollup  *Rollup `json:"rollup,omitempty"`
	// Removed is true when a delete hard-removed the row (no listing kept).
	Removed  bool `json:"removed,omitempty"`
	Imported int  `json:"imported,omitempty"`
	Expired  int  `json:"expired,omitempty"`
	// cmd is the command applied, for Directory.Committed; not sent.
	cmd *Command
}

// Receipt implements cmdlog.Receipter: what a handler reads of a result,
// kept for a write sent again (its agent without cards and records).
func (r Result) Receipt() any {
	if r.Agent != nil {
		a := *r.Agent
		a.Record, a.Listing, a.Card, a.FullCard = nil, nil, nil, nil
		r.Agent = &a
	}
	return r
}

// Surface names the write the command is, for the directory's write
// budget (internal/admission).
func (c Command) Surface() string {
	switch {
	case c.Register != nil:
		return "register"
	case c.Delete != nil:
		return "delete"
	case c.Feedback != nil:
		return "feedback"
	case c.Catalog != nil:
		return "catalog"
	case c.Activate != nil:
		return "token"
	case c.Expire != nil:
		return "expire"
	case c.Card != nil:
		return "card_fetch"
	}
	return Kind
}
