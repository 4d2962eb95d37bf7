package interop

import (
	"time"

	"golang.org/x/time/rate"

	"github.com/agentmesh/mesh/internal/ratelimit"
)

// Checking a proof whose signature is not claimed yet costs the provider a
// getTransaction, whoever sends it: a made-up signature with a nonce
// obtained for free from a 402 passes every local check. So each IP
// address may have proofChecksPerMinute such checks (burst proofCheckBurst),
// plenty for a payer whose client re-sends its proof with backoff. Replays
// of claimed signatures, and proofs whose X-Payment-Nonce fails its MAC,
// never reach the chain and are not counted (a proof without the header is
// known by its memo only once the transaction is read).
const (
	proofChecksPerMinute = 60
	proofCheckBurst      = 20
	// maxLimitedIPs bounds the limiter's memory (see ratelimit.Keyed).
	maxLimitedIPs = 4096
)

// newProofLimits returns the proof-check buckets, one per IP address.
func newProofLimits() *ratelimit.Keyed[string] {
	return ratelimit.NewKeyed[string](rate.Every(time.Minute/proofChecksPerMinute), proofCheckBurst, maxLimitedIPs)
}
