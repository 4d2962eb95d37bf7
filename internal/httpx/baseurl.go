package httpx

import (
	"context"
	"net/http"
	"strings"
)

type baseURLKey struct{}

// WithBaseURL records the base URL (scheme and host) a client reached the
// node at, for answers that name addresses (agent handles, wall URLs).
func WithBaseURL(ctx context.Context, url string) context.Context {
	return context.WithValue(ctx, baseURLKey{}, strings.TrimRight(url, "/"))
}

// BaseURL is the base URL recorded for r, or def when none is.
func BaseURL(r *http.Request, def string) string {
	if u, ok := r.Context().Value(baseURLKey{}).(string); ok {
		return u
	}
	return def
}
