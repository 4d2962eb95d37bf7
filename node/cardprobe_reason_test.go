package node

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/agentmesh/mesh/internal/safefetch"
)

// TestPublicReasonHidesAddresses: what a failed probe shows every node's
// visitors names no address the directory's resolver found, nor the
// resolver itself.
func TestPublicReasonHidesAddresses(t *testing.T) {
	t.Parallel()
	dns := &net.DNSError{Err: "no such host", Name: "agent.invalid", Server: "10.255.255.53:53", IsNotFound: true}
	refused := &net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 8443},
		Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	for _, c := range []struct {
		err  error
		want string
	}{
		{dns, "unreachable: lookup agent.invalid: no such host"},
		{&net.OpError{Op: "dial", Net: "tcp", Err: dns}, "unreachable: lookup agent.invalid: no such host"},
		{refused, "unreachable: dial: connection refused"},
		{&net.DNSError{Err: "read udp 172.17.0.2:49324->10.255.255.53:53: i/o timeout", Name: "agent.example", Server: "10.255.255.53:53", IsTimeout: true},
			"unreachable: lookup agent.example: the lookup timed out"},
		{&safefetch.ForbiddenError{IP: netip.MustParseAddr("10.0.0.1"), Why: "private (RFC 1918)"}, "the endpoint leads to an address that is private (RFC 1918)"},
	} {
		got := publicReason(asFetched(c.err)).Error()
		if !strings.HasSuffix(got, c.want) || strings.Contains(got, "10.255.255.53") || strings.Contains(got, "10.1.2.3") || strings.Contains(got, "10.0.0.1") {
			t.Errorf("%v: reason %q, want %q and no address", c.err, got, c.want)
		}
	}
}

// asFetched wraps err as the fetcher does a transport failure.
func asFetched(err error) error {
	var fe *safefetch.ForbiddenError
	if errors.As(err, &fe) {
		return err
	}
	return fmt.Errorf("%w: %w", safefetch.ErrUnreachable, err)
}
