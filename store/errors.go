package store

import "errors"

// ErrNotFound is returned by Get when the key does not exist (or has expired).
var ErrNotFound = errors.New("store: key not found")

// ErrClosed is returned by operations on a closed DB.
var ErrClosed = errors.New("store: closed")
