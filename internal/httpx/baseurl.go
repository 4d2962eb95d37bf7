package httpx

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"
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

// CheckBaseURL reports what is wrong with s as a base URL that answers
// build addresses on: it must be an absolute http or https URL with a
// host, and no credentials, query, fragment or control characters.
// Another node names its own (forwarded requests) and is held to it.
func CheckBaseURL(s string) error {
	if len(s) > maxBaseURL {
		return fmt.Errorf("longer than %d bytes", maxBaseURL)
	}
	if strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f || r == utf8.RuneError }) {
		return errors.New("control characters or invalid UTF-8")
	}
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return err
	case u.Scheme != "http" && u.Scheme != "https":
		return errors.New("not an http or https URL")
	case u.Host == "" || u.Opaque != "":
		return errors.New("no host")
	case u.User != nil:
		return errors.New("credentials in a base URL")
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.ContainsAny(s, "?#"):
		return errors.New("a query or fragment in a base URL")
	}
	return nil
}

// maxBaseURL bounds a base URL (agent ids add at most 128 bytes to it).
const maxBaseURL = 1024
