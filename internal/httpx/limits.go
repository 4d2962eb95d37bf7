package httpx

import (
	"net/http"
	"net/netip"
	"strconv"
	"time"
)

// AddrKey is the client address (ClientIP) that per-address counts and
// limits are kept under: an IPv4 address whole, an IPv6 address by its
// /64, the block one host (one home or VM) is normally given and can
// rotate its address through at will. Anything else (a request over
// libp2p names its peer) is its own key.
func AddrKey(ip string) string {
	a, err := netip.ParseAddr(ip)
	switch {
	case ip == "":
		return "unknown"
	case err != nil:
		return ip
	}
	if a = a.Unmap().WithZone(""); a.Is4() {
		return a.String()
	}
	return netip.PrefixFrom(a, 64).Masked().String()
}

// ValidAddrKey reports whether s is what AddrKey makes of an IP address:
// an IPv4 address or an IPv6 /64, in canonical form. Another node that
// reports its client's address is held to it.
func ValidAddrKey(s string) bool {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Is4() && a.String() == s
	}
	p, err := netip.ParsePrefix(s)
	return err == nil && p.Addr().Is6() && p.Bits() == 64 && p.Masked().String() == s
}

// RetryAfter tells a client refused with 429 to retry after d, in whole
// seconds (at least one, rounded up), and returns them for the detail.
func RetryAfter(w http.ResponseWriter, d time.Duration) int64 {
	s := RetryAfterSeconds(d)
	w.Header().Set("Retry-After", strconv.FormatInt(s, 10))
	return s
}
