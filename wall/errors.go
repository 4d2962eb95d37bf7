package wall

import (
	"net/http"

	"github.com/agentmesh/mesh/identity/meshsig"
	"github.com/agentmesh/mesh/internal/httpx"
)

// Errors a client can see (spec section 7). The catalog returns some of
// them from Apply, so they must stay deterministic.
var (
	ErrClusterNotFound = httpx.E(http.StatusNotFound, "cluster_not_found", "cluster not found")
	ErrClusterExists   = httpx.E(http.StatusConflict, "cluster_exists", "a cluster with this id exists or existed")
	ErrTokenRequired   = httpx.E(http.StatusUnauthorized, "token_required", "a cluster token is required")
	ErrBadToken        = httpx.E(http.StatusUnauthorized, "invalid_token", "the cluster token is wrong")
	ErrNotAdmin        = httpx.E(http.StatusUnauthorized, "admin_token_required", "this needs the cluster's admin token (ak_)")
	ErrNotOwner        = httpx.E(http.StatusUnauthorized, "owner_token_required", "this needs the cluster's token (ck_) or admin token (ak_)")
	ErrBadAction       = httpx.E(http.StatusUnauthorized, "invalid_admin_signature", "the admin action is not signed by the cluster's admin key")
	ErrNoDirectory     = httpx.E(http.StatusServiceUnavailable, "directory_unavailable", "the directory node cannot be reached; retry later")
	ErrBadRecord       = httpx.E(http.StatusBadRequest, "invalid_cluster_record", "the cluster record is not valid")
	// ErrRoomFull: a node holds at most maxRoster members of one cluster,
	// as other nodes take no larger roster from it.
	ErrRoomFull = httpx.E(http.StatusServiceUnavailable, "cluster_full",
		"this node holds the most members one cluster may have on one node (%d): connect to another node, or retry later", maxRoster)
	// ErrHistoryAtDirectory: a cluster created by an earlier release
	// (record v1) has no member key to prove a token holder to the
	// directory with, so only the directory node serves its history.
	ErrHistoryAtDirectory = httpx.E(http.StatusConflict, "history_at_directory",
		"this cluster was created by an earlier release: its history is served only by the directory node's HTTP API")
)

// Errors of board and post props (spec 2.5) and of the post filter of
// GET .../posts (spec section 4).
var (
	ErrBadProps       = httpx.E(http.StatusBadRequest, "bad_props", "props are not valid")
	ErrBadCoordinates = httpx.E(http.StatusBadRequest, "bad_coordinates", "coordinates must be a latitude in -90..90 and a longitude in -180..180")
	ErrBadRadius      = httpx.E(http.StatusBadRequest, "bad_radius", "km must be a number above 0 and at most %g", MaxRadiusKm)
	ErrBadFilter      = httpx.E(http.StatusBadRequest, "bad_filter", "the post filter is not valid")
)

// Errors of a connect's proof of key (proof.go): a Mesh-Sig's, with the
// codes of identity/meshsig and details of their own.
var (
	ErrBadProof    = meshsig.ErrBadSig.With("the proof of key does not verify")
	ErrStaleProof  = meshsig.ErrStaleSig.With("the proof's timestamp is outside the 120 s tolerance")
	ErrProofReplay = meshsig.ErrReplay.With("the proof's nonce was already used: sign each connect afresh")
	ErrDIDMismatch = httpx.E(http.StatusUnauthorized, "did_mismatch", "the proof is not signed by the did's key")
)

// ErrClockSkew: a post creation is stamped by the clock of the node that
// signed it, and the log takes it only within replayWindow of its own
// time (boards_apply.go), so a node whose clock is that far off cannot
// post. Not the client's fault.
var ErrClockSkew = httpx.E(http.StatusServiceUnavailable, "clock_skew",
	"this node's clock is more than 10 minutes from the directory's: its operator must set it right (NTP)")

// ErrBadChallenge: a proof of key signs a challenge this node issued
// lately (challenge.go).
var ErrBadChallenge = httpx.E(http.StatusUnauthorized, "invalid_challenge",
	"the proof's challenge is not one this node issued for this cluster in the last 120 s: fetch one with GET /v1/clusters/<id>/challenge from the node you connect to")
