package httpx

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/agentmesh/mesh/internal/redact"
)

// Error is an error a client may see: an HTTP status, a stable snake_case
// code for programs and a human detail. Two Errors match under errors.Is
// when their codes are equal, so a sentinel can be re-issued with a more
// specific detail and still be recognised.
//
// The detail is all a client is told. An upstream failure behind an Error
// (a chain RPC, a libp2p call, a file) is attached with Because: it names
// URLs, addresses and paths, so it goes only to the log (WriteError), with
// the credentials of URLs taken out (package redact).
type Error struct {
	Status int    `json:"-"`
	Code   string `json:"code"`
	Detail string `json:"detail"`
	// RetryAfter, when positive, is sent as the Retry-After header (whole
	// seconds, rounded up): when a refused client may try again.
	RetryAfter time.Duration `json:"-"`
	cause      error
}

// Error is the detail, followed by the cause (redacted) when there is
// one: the text for logs and for Go callers, never for an answer, which
// carries Detail alone.
func (e *Error) Error() string {
	if e.cause == nil {
		return e.Detail
	}
	return e.Detail + ": " + redact.Error(e.cause)
}

// Because returns a copy of e that keeps cause for the log; the client
// is told e's detail only.
func (e *Error) Because(cause error) *Error {
	c := *e
	c.cause = cause
	return &c
}

// Cause is the upstream failure attached with Because, or nil.
func (e *Error) Cause() error { return e.cause }

// Is reports whether target is an *Error with the same code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// With returns a copy of e with a new detail.
func (e *Error) With(format string, args ...any) *Error {
	return &Error{Status: e.Status, Code: e.Code, Detail: fmt.Sprintf(format, args...), RetryAfter: e.RetryAfter, cause: e.cause}
}

// After returns a copy of e that tells the client to retry after d.
func (e *Error) After(d time.Duration) *Error {
	c := *e
	c.RetryAfter = d
	return &c
}

// RetryAfterSeconds is d in whole seconds for a Retry-After header:
// rounded up, at least one.
func RetryAfterSeconds(d time.Duration) int64 {
	return max(1, int64(math.Ceil(d.Seconds())))
}

// E builds an Error.
func E(status int, code, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Detail: fmt.Sprintf(format, args...)}
}

// Errors shared by every surface.
var (
	ErrBadJSON     = E(http.StatusBadRequest, "invalid_json", "request body is not valid JSON")
	ErrInvalid     = E(http.StatusBadRequest, "invalid_request", "invalid request")
	ErrTooLarge    = E(http.StatusRequestEntityTooLarge, "body_too_large", "request body too large")
	ErrBodyTimeout = E(http.StatusRequestTimeout, "body_timeout", "the request body did not arrive in time")
	ErrNotFound    = E(http.StatusNotFound, "not_found", "no such endpoint")
	ErrMethod      = E(http.StatusMethodNotAllowed, "method_not_allowed", "method not allowed")
	ErrInternal    = E(http.StatusInternalServerError, "internal", "internal error")
	ErrUnavailable = E(http.StatusServiceUnavailable, "unavailable", "service unavailable")
	ErrRateLimited = E(http.StatusTooManyRequests, "rate_limited", "too many requests; retry after Retry-After seconds")
)

// AsError returns err as a client-facing *Error; anything else becomes
// ErrInternal, whose detail reveals nothing of the cause.
func AsError(err error) (*Error, bool) {
	var e *Error
	if errors.As(err, &e) {
		return e, true
	}
	return ErrInternal, false
}
