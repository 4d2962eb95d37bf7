package cmdlog

import "errors"

var (
	// ErrOutOfOrder: an entry does not carry the next sequence number.
	ErrOutOfOrder = errors.New("cmdlog: entry out of order")
	// ErrUnknownKind: no Machine handles the entry's kind.
	ErrUnknownKind = errors.New("cmdlog: no machine for entry kind")
)
