package interop

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Checking a proof whose signature is not claimed yet costs the provider a
// getTransaction, whoever sends it: a made-up signature with a nonce
// obtained for free from a 402 passes every local check. So each IP
// address may have proofChecksPerMinute such checks (burst proofCheckBurst),
// plenty for a payer whose client re-sends its proof with backoff. Replays
// of claimed signatures and nonces that fail their MAC never reach the
// chain and are not counted.
const (
	proofChecksPerMinute = 60
	proofCheckBurst      = 20
	// maxLimitedIPs bounds the limiter's memory: when that many addresses
	// are tracked, the table starts afresh (a caller with more addresses
	// than this escapes any per-address limit anyway).
	maxLimitedIPs = 4096
)

// ipLimiter is a token bucket per IP address, on the paywall's clock.
type ipLimiter struct {
	mu   sync.Mutex
	byIP map[string]*rate.Limiter
}

func newIPLimiter() *ipLimiter { return &ipLimiter{byIP: map[string]*rate.Limiter{}} }

// allow takes one token of ip's bucket at now.
func (l *ipLimiter) allow(ip string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	lim := l.byIP[ip]
	if lim == nil {
		if len(l.byIP) >= maxLimitedIPs {
			clear(l.byIP)
		}
		lim = rate.NewLimiter(rate.Every(time.Minute/proofChecksPerMinute), proofCheckBurst)
		l.byIP[ip] = lim
	}
	return lim.AllowN(now, 1)
}
