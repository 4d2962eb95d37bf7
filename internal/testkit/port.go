package testkit

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// Port is a free loopback TCP port for a listener a test closes and opens
// again on the same port (a node restarting where its peers know it).
// It lies below the system's ephemeral range when it can: a port from
// that range, once free, may be taken by any outgoing connection of the
// tests running meanwhile, and the restart then fails with "address
// already in use".
func Port(t testing.TB) int {
	t.Helper()
	low := ephemeralLow()
	for range 100 {
		port := 0
		if low > 11000 {
			port = 10000 + rand.IntN(low-10000)
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue
		}
		port = l.Addr().(*net.TCPAddr).Port
		l.Close()
		return port
	}
	t.Fatal("no free loopback port")
	return 0
}

// ephemeralLow is the first port of the range the system gives outgoing
// connections (Linux's ip_local_port_range), 0 when unknown.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	low, _ := strconv.Atoi(f[0])
	return low
}
