package httpx

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// HeaderForwardedFor is where a reverse proxy names the client it forwards
// for, appending the address of its own peer to the list it received.
const HeaderForwardedFor = "X-Forwarded-For"

// Proxies are the address ranges of reverse proxies trusted to name a
// request's client in X-Forwarded-For.
type Proxies []netip.Prefix

// ParseProxies reads CIDRs; a bare address stands for itself alone (/32,
// /128). Spaces around an entry are ignored ("10.0.0.0/8, fd00::/8" split
// at the comma).
func ParseProxies(ranges []string) (Proxies, error) {
	ps := make(Proxies, 0, len(ranges))
	for _, s := range ranges {
		p, err := parseProxy(s)
		if err != nil {
			return nil, err
		}
		ps = append(ps, p)
	}
	return ps, nil
}

func parseProxy(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if strings.Contains(s, "/") {
		if p, err := netip.ParsePrefix(s); err == nil {
			return p.Masked(), nil
		}
	} else if a, err := netip.ParseAddr(s); err == nil {
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	return netip.Prefix{}, fmt.Errorf("trusted proxy %q: want an IP address or a CIDR such as 10.0.0.0/8", s)
}

func (ps Proxies) trust(a netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

type clientIPKey struct{}

// TrustProxies records, for ClientIP, the client of each request that a
// peer in ps forwards: the right-most address of X-Forwarded-For that is
// not itself in ps (the left-most, when all are). Each proxy appends the
// peer it saw, so the entries left of the first untrusted one are whatever
// the client sent and are never read. A request from any other peer keeps
// its peer as its client, whatever its headers say. A malformed entry (or
// none at all) where one is read leaves the proxy as the client: a broken
// proxy chain must not cost the request its answer.
func TrustProxies(ps Proxies, next http.Handler) http.Handler {
	if len(ps) == 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ip, ok := ps.forwardedClient(r); ok {
			r = r.WithContext(context.WithValue(r.Context(), clientIPKey{}, ip))
		}
		next.ServeHTTP(w, r)
	})
}

// forwardedClient is the client a trusted proxy names for r; false when
// the peer is not trusted or names none.
func (ps Proxies) forwardedClient(r *http.Request) (string, bool) {
	peer, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return "", false // a request that came over libp2p ("p2p/<peer>")
	}
	client := plain(peer.Addr())
	if !ps.trust(client) {
		return "", false
	}
	// Several header lines make one list, in order; no header at all
	// makes one empty entry, which falls back to the peer.
	hops := strings.Split(strings.Join(r.Header.Values(HeaderForwardedFor), ","), ",")
	for i := len(hops) - 1; i >= 0 && ps.trust(client); i-- {
		hop, ok := parseHop(hops[i])
		if !ok {
			return "", false
		}
		client = hop
	}
	return client.String(), true
}

// parseHop reads one X-Forwarded-For entry: an address, or an address and
// port as some proxies write it.
func parseHop(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	if a, err := netip.ParseAddr(s); err == nil {
		return plain(a), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return plain(ap.Addr()), true
	}
	return netip.Addr{}, false
}

// plain is a without an IPv6 zone or IPv4-in-IPv6 mapping, so that it
// matches the ranges it belongs to and one client has one spelling.
func plain(a netip.Addr) netip.Addr { return a.Unmap().WithZone("") }

// ClientIP is the address of the client r comes from: the one TrustProxies
// recorded, else the host of r.RemoteAddr (all of it when it has no port,
// as for a request that came over libp2p). Everything that counts, limits
// or logs clients reads it, never r.RemoteAddr, which behind a proxy is the
// proxy.
func ClientIP(r *http.Request) string {
	if ip, ok := r.Context().Value(clientIPKey{}).(string); ok {
		return ip
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
