package interop

import (
	"math"
	"net/http"
	"strconv"
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
	// maxBuckets bounds each limiter's memory (see ratelimit.Keyed).
	maxBuckets = 4096
)

// newProofLimits returns the proof-check buckets, one per IP address.
func newProofLimits() *ratelimit.Keyed[string] {
	return ratelimit.NewKeyed[string](rate.Every(time.Minute/proofChecksPerMinute), proofCheckBurst, maxBuckets)
}

// topupLimits are the buckets of POST /v1/topup, one per client IP address
// and one per caller key, each holding an hour's worth of top-ups. They
// spread the room MaxUnfundedAccounts leaves among callers, so that one
// caller cannot take all of it; that bound, kept in the store, is what
// bounds the store (the buckets restart full with the agent).
type topupLimits struct{ byIP, byKey *ratelimit.Keyed[string] }

func newTopupLimits(perHourPerIP, perHourPerKey int) topupLimits {
	hourly := func(n int) *ratelimit.Keyed[string] {
		return ratelimit.NewKeyed[string](rate.Every(time.Hour/time.Duration(n)), n, maxBuckets)
	}
	return topupLimits{byIP: hourly(perHourPerIP), byKey: hourly(perHourPerKey)}
}

// take takes one top-up from the IP address's bucket and the key's, and
// returns giveBack, which returns it (a top-up refused afterwards costs the
// caller nothing). When either bucket is empty it takes nothing and
// returns how long until both hold a top-up.
func (t topupLimits) take(ip, key string, now time.Time) (giveBack func(), wait time.Duration) {
	byIP := t.byIP.Bucket(ip, now).ReserveN(now, 1)
	byKey := t.byKey.Bucket(key, now).ReserveN(now, 1)
	giveBack = func() {
		byIP.CancelAt(now)
		byKey.CancelAt(now)
	}
	if wait = max(byIP.DelayFrom(now), byKey.DelayFrom(now)); wait > 0 {
		giveBack()
		return nil, wait
	}
	return giveBack, 0
}

// retryAfter tells a client refused with 429 to retry after d, in whole
// seconds (at least one).
func retryAfter(w http.ResponseWriter, d time.Duration) {
	w.Header().Set("Retry-After", strconv.FormatInt(max(1, int64(math.Ceil(d.Seconds()))), 10))
}
