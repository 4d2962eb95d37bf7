package interop

import (
	"net/http"
	"time"

	"golang.org/x/time/rate"

	"github.com/agentmesh/mesh/internal/httpx"
	"github.com/agentmesh/mesh/internal/ratelimit"
)

// Checking a proof whose signature is not claimed yet costs the provider a
// getTransaction, whoever sends it: a made-up signature with a nonce
// obtained for free from a 402 passes every local check. So each client
// address (addrKey) may have proofChecksPerMinute such checks (burst
// proofCheckBurst), plenty for a payer whose client re-sends its proof
// with backoff. Replays of claimed signatures, and proofs whose
// X-Payment-Nonce fails its MAC, never reach the chain and are not counted
// (a proof without the header is known by its memo only once the
// transaction is read).
const (
	proofChecksPerMinute = 60
	proofCheckBurst      = 20
	// maxBuckets bounds each limiter's memory (see ratelimit.Keyed).
	maxBuckets = 4096
)

// newProofLimits returns the proof-check buckets, one per client address
// (addrKey).
func newProofLimits() *ratelimit.Keyed[string] {
	return ratelimit.NewKeyed[string](rate.Every(time.Minute/proofChecksPerMinute), proofCheckBurst, maxBuckets)
}

// topupLimits are the buckets of POST /v1/topup, one per caller key, each
// holding an hour's worth of top-ups. They spread the room the stored
// bounds leave (MaxUnfundedPerIP, MaxUnfundedAccounts) among keys; those
// bounds, kept in the store, are what bound the store (the buckets restart
// full with the agent). There is no hourly bucket per address: it refills
// faster than unfunded accounts expire, so a few addresses could hold all
// the places; the stored cap per address does not refill until one goes.
type topupLimits struct{ byKey *ratelimit.Keyed[string] }

func newTopupLimits(perHourPerKey int) topupLimits {
	return topupLimits{byKey: ratelimit.NewKeyed[string](rate.Every(time.Hour/time.Duration(perHourPerKey)), perHourPerKey, maxBuckets)}
}

// take takes one top-up from the key's bucket and returns giveBack, which
// returns it (a top-up refused afterwards costs the caller nothing). When
// the bucket is empty it takes nothing and returns how long until it holds
// a top-up.
func (t topupLimits) take(key string, now time.Time) (giveBack func(), wait time.Duration) {
	r := t.byKey.Bucket(key, now).ReserveN(now, 1)
	giveBack = func() { r.CancelAt(now) }
	if wait = r.DelayFrom(now); wait > 0 {
		giveBack()
		return nil, wait
	}
	return giveBack, 0
}

// addrKey is the client address that per-address counts and limits are
// kept under (free tier, proof checks, accounts awaiting a deposit); see
// httpx.AddrKey.
func addrKey(ip string) string { return httpx.AddrKey(ip) }

// retryAfter is httpx.RetryAfter.
func retryAfter(w http.ResponseWriter, d time.Duration) int64 { return httpx.RetryAfter(w, d) }
