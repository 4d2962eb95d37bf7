package testkit

import (
	"net"
	"strconv"
	"testing"
)

// TestPort: the port is free, below the ephemeral range where the system
// has one, and can be listened on.
func TestPort(t *testing.T) {
	p := Port(t)
	if low := ephemeralLow(); low > 11000 && (p < 10000 || p >= low) {
		t.Fatalf("port %d outside [10000, %d)", p, low)
	}
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
}
