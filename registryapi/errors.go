package registryapi

import (
	"net/http"

	"github.com/agentmesh/mesh/internal/httpx"
)

// Errors a client can see; each carries its HTTP status and code (spec
// section 7). Apply returns them too, so they must stay deterministic.
// Those of the Mesh-Sig are identity/meshsig's.
var (
	ErrAgentNotFound  = httpx.E(http.StatusNotFound, "agent_not_found", "agent not found")
	ErrIDTaken        = httpx.E(http.StatusConflict, "agent_id_taken", "agent id is registered to another agent")
	ErrPubkeyInUse    = httpx.E(http.StatusConflict, "pubkey_in_use", "public key is bound to another agent")
	ErrBadCredentials = httpx.E(http.StatusUnauthorized, "invalid_credentials", "agent_id and api_key do not match")
	ErrNoToken        = httpx.E(http.StatusUnauthorized, "token_required", "Authorization: Bearer <token> required")
	ErrBadToken       = httpx.E(http.StatusUnauthorized, "invalid_token", "bearer token is invalid")
	ErrTokenExpired   = httpx.E(http.StatusUnauthorized, "token_expired", "bearer token has expired")
	ErrSigKeyMismatch = httpx.E(http.StatusUnauthorized, "signature_key_mismatch", "Mesh-Sig must be made with the key being bound")
	ErrSelfRating     = httpx.E(http.StatusForbidden, "self_rating", "an agent cannot rate itself")
	ErrBadReceipt     = httpx.E(http.StatusBadRequest, "invalid_receipt", "the report's payment receipt does not check")
	ErrNotAdmin       = httpx.E(http.StatusForbidden, "not_admin", "Mesh-Sig key is not a directory administrator")
	ErrReadOnly       = httpx.E(http.StatusServiceUnavailable, "directory_unavailable", "this node cannot accept directory writes")
)
