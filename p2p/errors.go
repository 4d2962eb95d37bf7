package p2p

import "errors"

var (
	// ErrTooLarge is returned for a message over the protocol's size limit.
	ErrTooLarge = errors.New("p2p: message too large")
	// ErrNotStarted is returned by calls made before Start or after Close.
	ErrNotStarted = errors.New("p2p: host not running")
	// ErrNoPeer is returned when no suitable peer is connected.
	ErrNoPeer = errors.New("p2p: no reachable peer")
	// ErrStreamClosed is returned by a write to a stream already closed or
	// reset.
	ErrStreamClosed = errors.New("p2p: stream closed")
)
