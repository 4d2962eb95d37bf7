package httpx

import (
	"net/http"
	"path"
	"slices"
	"strings"
	"sync"
)

// Router is where a surface registers its routes: an *http.ServeMux, or a
// Mux, which also records them.
type Router interface {
	Handle(pattern string, handler http.Handler)
}

// Mux is a ServeMux whose own "404 page not found" and "405 method not
// allowed" answers are JSON errors like every other answer. It records the
// patterns registered on it (Patterns), so that what a node serves can be
// checked against what its API document describes; its ServeMux is
// unexported, so no route can be added past the record.
type Mux struct {
	mux      *http.ServeMux
	mu       sync.Mutex
	patterns []string
}

// NewMux returns an empty Mux.
func NewMux() *Mux { return &Mux{mux: http.NewServeMux()} }

// Handle registers handler for pattern (http.ServeMux's syntax) and
// records the pattern.
func (m *Mux) Handle(pattern string, handler http.Handler) {
	m.mux.Handle(pattern, handler)
	m.mu.Lock()
	m.patterns = append(m.patterns, pattern)
	m.mu.Unlock()
}

// HandleFunc registers f for pattern, as Handle does.
func (m *Mux) HandleFunc(pattern string, f func(http.ResponseWriter, *http.Request)) {
	m.Handle(pattern, http.HandlerFunc(f))
}

// Handler returns the handler and pattern r would be served by, as
// http.ServeMux.Handler does.
func (m *Mux) Handler(r *http.Request) (http.Handler, string) { return m.mux.Handler(r) }

// Patterns returns the patterns registered on m, sorted.
func (m *Mux) Patterns() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Sorted(slices.Values(m.patterns))
}

func (m *Mux) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if clean := cleanPath(r.URL.Path); clean != r.URL.Path && r.Method != http.MethodConnect {
		// The mux would redirect to the canonical path (//x, /a/../b).
		u := *r.URL
		u.Path, u.RawPath = clean, ""
		w.Header().Set("Location", u.RequestURI())
		WriteJSON(w, http.StatusTemporaryRedirect, E(http.StatusTemporaryRedirect, "moved", "the canonical path is %s", clean))
		return
	}
	h, pattern := m.Handler(r)
	if pattern != "" {
		// Serve through the mux itself so that it sets r.Pattern and the
		// path values.
		m.mux.ServeHTTP(w, r)
		return
	}
	// The mux answers by itself: learn its status (and Allow header) and
	// replace the plain-text body with JSON.
	rec := &statusOnly{header: http.Header{}}
	h.ServeHTTP(rec, r)
	switch rec.status {
	case http.StatusMethodNotAllowed:
		if allow := rec.header.Get("Allow"); allow != "" {
			w.Header().Set("Allow", allow)
		}
		WriteJSON(w, rec.status, ErrMethod.With("method %s not allowed on %s", r.Method, r.URL.Path))
	case http.StatusNotFound, 0:
		WriteJSON(w, http.StatusNotFound, ErrNotFound.With("no endpoint %s %s", r.Method, r.URL.Path))
	default: // a redirect the mux chose (a missing trailing slash)
		loc := rec.header.Get("Location")
		w.Header().Set("Location", loc)
		WriteJSON(w, rec.status, E(rec.status, "moved", "the canonical path is %s", loc))
	}
}

// cleanPath is p in canonical form, as the mux wants it: no empty, . or
// .. elements, the trailing slash kept.
func cleanPath(p string) string {
	if p == "" || p[0] != '/' {
		p = "/" + p
	}
	clean := path.Clean(p)
	if strings.HasSuffix(p, "/") && clean != "/" {
		clean += "/"
	}
	return clean
}

// statusOnly records the status and headers of the mux's own answer.
type statusOnly struct {
	header http.Header
	status int
}

func (s *statusOnly) Header() http.Header { return s.header }
func (s *statusOnly) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return len(b), nil
}
func (s *statusOnly) WriteHeader(code int) { s.status = code }
