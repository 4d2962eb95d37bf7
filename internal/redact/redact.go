// Package redact takes credentials out of text bound for a log: the
// userinfo, query string and fragment of every URL in it (an RPC
// provider's api-key, a proxy's password). It holds no other rule; what a
// client is told is decided elsewhere (httpx.Error keeps causes out of
// answers), this only makes the log of a cause safe to keep.
package redact

import (
	"net/url"
	"regexp"
	"strings"
)

// urlPattern finds URLs in free text: a scheme, "://", then anything up
// to white space or a quote (Go's net/http quotes the URL it failed on).
var urlPattern = regexp.MustCompile(`(?i)\b[a-z][a-z0-9+.\-]*://[^\s"'<>` + "`" + `]+`)

// Marker stands in for what was taken out.
const Marker = "REDACTED"

// String is s with every URL's userinfo, query and fragment replaced by
// Marker.
func String(s string) string {
	if !strings.Contains(s, "://") {
		return s
	}
	return urlPattern.ReplaceAllStringFunc(s, URL)
}

// Error is err's text, redacted; "" for nil.
func Error(err error) string {
	if err == nil {
		return ""
	}
	return String(err.Error())
}

// URL is raw without its userinfo, query and fragment (each replaced by
// Marker). What does not parse as a URL is cut at its first '?' or '#',
// and loses everything before an '@'.
func URL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Opaque != "" {
		return cutRaw(raw)
	}
	if u.User != nil {
		u.User = url.User(Marker)
	}
	if u.RawQuery != "" || u.ForceQuery {
		u.RawQuery = Marker
	}
	if u.Fragment != "" {
		u.Fragment, u.RawFragment = Marker, ""
	}
	return u.String()
}

func cutRaw(raw string) string {
	scheme, rest, _ := strings.Cut(raw, "://")
	if i := strings.IndexAny(rest, "?#"); i >= 0 {
		rest = rest[:i+1] + Marker
	}
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		rest = Marker + rest[i:]
	}
	return scheme + "://" + rest
}
