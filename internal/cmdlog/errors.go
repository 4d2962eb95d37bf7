package cmdlog

import "errors"

var (
	// ErrOutOfOrder: an entry does not carry the next sequence number.
	ErrOutOfOrder = errors.New("cmdlog: entry out of order")
	// ErrUnknownKind: no Machine handles the entry's kind.
	ErrUnknownKind = errors.New("cmdlog: no machine for entry kind")
	// ErrOtherOrigin: the store holds the log of another directory; two
	// logs cannot be merged.
	ErrOtherOrigin = errors.New("cmdlog: another directory's log")
)

// StoreError is a commit the machine accepted and the store failed to
// write (a full disk, a closed store): the entry is not applied.
type StoreError struct{ Err error }

func (e *StoreError) Error() string { return "cmdlog: store: " + e.Err.Error() }
func (e *StoreError) Unwrap() error { return e.Err }
