// Package safefetch fetches small documents from URLs that strangers
// name (an agent's endpoint) without letting them aim the node at itself
// or its network: server-side request forgery.
//
// The address check happens where it cannot be bypassed: in the dialer's
// Control hook, on the address a connection is about to be made to, after
// name resolution. So a name that resolves to a private address, a name
// whose answer changes between a check and the dial (DNS rebinding), and
// every hop of a redirect are all checked the same way. No proxy from the
// environment is used (the proxy's address would be the one checked).
package safefetch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// Config bounds what a fetch may do.
type Config struct {
	// Allow are address ranges the operator lets fetches reach although
	// they are forbidden by default (a lab network, 127.0.0.0/8 in tests).
	Allow []netip.Prefix
	// Timeout bounds a whole fetch: connects, redirects and the body.
	Timeout time.Duration
	// MaxBytes bounds the body.
	MaxBytes int64
	// MaxRedirects bounds the redirects followed (0: none).
	MaxRedirects int
}

// Errors a fetch returns; each wraps one of these.
var (
	ErrForbidden   = errors.New("address not allowed")
	ErrScheme      = errors.New("only http and https URLs are fetched")
	ErrTooLarge    = errors.New("answer too large")
	ErrRedirects   = errors.New("too many redirects")
	ErrStatus      = errors.New("unexpected status")
	ErrUnreachable = errors.New("unreachable")
)

// Client fetches under a Config. It is safe for concurrent use.
type Client struct {
	cfg  Config
	http *http.Client
}

// New returns a client for cfg.
func New(cfg Config) *Client {
	c := &Client{cfg: cfg}
	dialer := &net.Dialer{Timeout: cfg.Timeout, Control: c.control}
	transport := &http.Transport{
		Proxy:                  nil,
		DialContext:            dialer.DialContext,
		DisableKeepAlives:      true,
		TLSHandshakeTimeout:    cfg.Timeout,
		ResponseHeaderTimeout:  cfg.Timeout,
		MaxResponseHeaderBytes: 16 << 10,
	}
	c.http = &http.Client{Transport: transport, CheckRedirect: c.checkRedirect}
	return c
}

// control refuses a connection to an address that is not allowed.
func (c *Client) control(_, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return fmt.Errorf("%w: %s", ErrForbidden, address)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return fmt.Errorf("%w: %s", ErrForbidden, address)
	}
	return c.Check(ip)
}

// Check reports why ip may not be fetched from, nil when it may.
func (c *Client) Check(ip netip.Addr) error {
	ip = ip.Unmap().WithZone("")
	for _, p := range c.cfg.Allow {
		if p.Contains(ip) {
			return nil
		}
	}
	if why := forbidden(ip); why != "" {
		return &ForbiddenError{IP: ip, Why: why}
	}
	return nil
}

// ForbiddenError is a refused address: IP, of the class Why (private,
// loopback, ...). It is an ErrForbidden.
type ForbiddenError struct {
	IP  netip.Addr
	Why string
}

func (e *ForbiddenError) Error() string {
	return fmt.Sprintf("%v: %s is %s", ErrForbidden, e.IP, e.Why)
}

// Unwrap makes a ForbiddenError an ErrForbidden.
func (e *ForbiddenError) Unwrap() error { return ErrForbidden }

func (c *Client) checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) > c.cfg.MaxRedirects {
		return fmt.Errorf("%w (at most %d)", ErrRedirects, c.cfg.MaxRedirects)
	}
	return checkURL(req.URL)
}

func checkURL(u *url.URL) error {
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("%w, not %q", ErrScheme, u.Scheme)
	}
	if u.Host == "" {
		return fmt.Errorf("%w: the URL names no host", ErrForbidden)
	}
	return nil
}

// Get fetches rawURL and returns its body, which must come with a 2xx
// status. accept is sent as the Accept header.
func (c *Client) Get(ctx context.Context, rawURL, accept string) ([]byte, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrScheme, err)
	}
	if err := checkURL(u); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", accept)
	req.Header.Set("User-Agent", "mesh-card-fetch/1")
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, classify(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return nil, &StatusError{Code: resp.StatusCode}
	}
	if resp.ContentLength > c.cfg.MaxBytes {
		return nil, fmt.Errorf("%w: %d bytes, at most %d", ErrTooLarge, resp.ContentLength, c.cfg.MaxBytes)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, c.cfg.MaxBytes+1))
	if err != nil {
		return nil, classify(err)
	}
	if int64(len(body)) > c.cfg.MaxBytes {
		return nil, fmt.Errorf("%w: over %d bytes", ErrTooLarge, c.cfg.MaxBytes)
	}
	return body, nil
}

// StatusError is a non-2xx answer.
type StatusError struct{ Code int }

func (e *StatusError) Error() string { return fmt.Sprintf("%v %d", ErrStatus, e.Code) }

// Unwrap makes a StatusError an ErrStatus.
func (e *StatusError) Unwrap() error { return ErrStatus }

// classify keeps the reasons a caller shows (a refused address, too many
// redirects, a timeout) and files anything else under ErrUnreachable,
// without the URL the http client repeats.
func classify(err error) error {
	for _, known := range []error{ErrForbidden, ErrRedirects, ErrScheme, ErrTooLarge} {
		if errors.Is(err, known) {
			return unwrapURL(err)
		}
	}
	if errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
		return fmt.Errorf("%w: timed out", ErrUnreachable)
	}
	return fmt.Errorf("%w: %w", ErrUnreachable, unwrapURL(err))
}

func unwrapURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// forbidden names the class of a default-forbidden address, "" if none.
func forbidden(ip netip.Addr) string {
	if ip.Is6() {
		if v4, ok := embeddedV4(ip); ok {
			if why := forbidden(v4); why != "" {
				return why + " (embedded in " + ip.String() + ")"
			}
		}
	}
	for _, r := range forbiddenRanges {
		if r.prefix.Contains(ip) {
			return r.why
		}
	}
	if ip.Is6() && !globalUnicast6.Contains(ip) && !nat64.Contains(ip) {
		return "not global unicast IPv6"
	}
	return ""
}

// embeddedV4 is the IPv4 address a NAT64 (64:ff9b::/96) or 6to4
// (2002::/16) address reaches.
func embeddedV4(ip netip.Addr) (netip.Addr, bool) {
	b := ip.As16()
	switch {
	case nat64.Contains(ip):
		return netip.AddrFrom4([4]byte(b[12:16])), true
	case sixToFour.Contains(ip):
		return netip.AddrFrom4([4]byte(b[2:6])), true
	}
	return netip.Addr{}, false
}

var (
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour = netip.MustParsePrefix("2002::/16")
	// globalUnicast6 is where every reachable IPv6 host is (RFC 4291);
	// outside it, only NAT64 (checked by the IPv4 it reaches) is fetched.
	globalUnicast6 = netip.MustParsePrefix("2000::/3")
)

type forbiddenRange struct {
	prefix netip.Prefix
	why    string
}

// forbiddenRanges are refused unless Config.Allow lets them; the cloud
// metadata addresses come first, so that a refusal names them.
var forbiddenRanges = func() []forbiddenRange {
	var out []forbiddenRange
	for _, r := range []struct{ cidr, why string }{
		{"169.254.169.254/32", "a cloud metadata address"},
		{"fd00:ec2::254/128", "a cloud metadata address"},
		{"0.0.0.0/8", "unspecified"},
		{"127.0.0.0/8", "loopback"},
		{"10.0.0.0/8", "private (RFC 1918)"},
		{"172.16.0.0/12", "private (RFC 1918)"},
		{"192.168.0.0/16", "private (RFC 1918)"},
		{"100.64.0.0/10", "carrier-grade NAT (RFC 6598)"},
		{"169.254.0.0/16", "link-local"},
		{"192.0.0.0/24", "IETF protocol assignments"},
		{"198.18.0.0/15", "benchmarking (RFC 2544)"},
		{"192.0.2.0/24", "documentation (RFC 5737)"},
		{"198.51.100.0/24", "documentation (RFC 5737)"},
		{"203.0.113.0/24", "documentation (RFC 5737)"},
		{"224.0.0.0/4", "multicast"},
		{"240.0.0.0/4", "reserved (and broadcast)"},
		{"::/128", "unspecified"},
		{"::1/128", "loopback"},
		{"::/96", "IPv4-compatible (deprecated)"},
		{"::ffff:0:0:0/96", "IPv4-translated (SIIT)"},
		{"64:ff9b:1::/48", "local-use NAT64 (RFC 8215)"},
		{"2001::/32", "Teredo (tunnels to an address it hides)"},
		{"2001:db8::/32", "documentation"},
		{"fc00::/7", "unique local (private)"},
		{"fe80::/10", "link-local"},
		{"ff00::/8", "multicast"},
	} {
		out = append(out, forbiddenRange{netip.MustParsePrefix(r.cidr), r.why})
	}
	return out
}()

// ParseAllow parses operator CIDRs (a bare address is that address alone).
func ParseAllow(list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range list {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if !strings.Contains(s, "/") {
			a, err := netip.ParseAddr(s)
			if err != nil {
				return nil, fmt.Errorf("card fetch allow %q: want a CIDR or an address", s)
			}
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("card fetch allow %q: want a CIDR or an address", s)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}
