// Package httpx is the HTTP plumbing every surface of the node shares: the
// JSON error shape {"detail", "code"}, handlers that return errors, bounded
// body reading (a size limit and a body timeout, WithBodyTimeout), JSON decoding with
// client-facing messages, a ServeMux whose own 404 and 405 answers are JSON
// (and whose redirects of unclean paths are JSON too), panic recovery, the
// base URL a client reached the node at (WithBaseURL, BaseURL), and the
// client's address behind trusted reverse proxies (TrustProxies, ClientIP).
//
// It holds no business rules; registryapi, wall and node build on it.
package httpx
