package httpx

import (
	"bufio"
	"net"
	"net/http"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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
	mux         *http.ServeMux
	mu          sync.Mutex
	patterns    []string
	segmentList []segmentRoute // HandleSegment's routes, under mu
	segments    atomic.Pointer[segmentRoutes]
}

// NewMux returns an empty Mux.
func NewMux() *Mux { return &Mux{mux: http.NewServeMux()} }

// Handle registers handler for pattern (http.ServeMux's syntax) and
// records the pattern.
func (m *Mux) Handle(pattern string, handler http.Handler) {
	m.mux.Handle(pattern, handler)
	m.mu.Lock()
	m.patterns = append(m.patterns, pattern)
	m.rebuildSegmentsLocked()
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
	if p := r.URL.Path; !isClean(p) && r.Method != http.MethodConnect {
		if clean := cleanPath(p); clean != p {
			// The mux would redirect to the canonical path (//x, /a/../b).
			u := *r.URL
			u.Path, u.RawPath = clean, ""
			w.Header().Set("Location", u.RequestURI())
			WriteJSON(w, http.StatusTemporaryRedirect, E(http.StatusTemporaryRedirect, "moved", "the canonical path is %s", clean))
			return
		}
	}
	if m.serveSegment(w, r) {
		return
	}
	// The mux routes once: it sets r.Pattern before it calls the handler
	// it found, so an answer written while r.Pattern is empty is its own
	// (404, 405, a redirect to add a slash), which the Answer puts in JSON.
	// An Answer an outer layer made (the route metrics') serves: one
	// wrapper a request, not one a layer.
	a := Record(w)
	outer, outerDone := a.mux, a.done
	a.mux, a.done = r, false
	m.mux.ServeHTTP(a, r)
	a.mux, a.done = outer, outerDone
}

// Answer passes an answer on to its ResponseWriter and records its
// status; while a Mux routes through it, it replaces the mux's own
// plain-text answers with JSON and passes on what a route's handler
// writes.
type Answer struct {
	http.ResponseWriter
	status int
	mux    *http.Request // what a Mux routes through this answer, while it does
	done   bool          // that mux's own answer was replaced
}

// Record returns w as an Answer: w itself when it is one.
func Record(w http.ResponseWriter) *Answer {
	if a, ok := w.(*Answer); ok {
		return a
	}
	return &Answer{ResponseWriter: w, status: http.StatusOK}
}

// Status is the status of the answer: 200 until another is written.
func (a *Answer) Status() int { return a.status }

// muxOwn reports whether what is written now is the mux's own answer.
func (a *Answer) muxOwn() bool { return a.mux != nil && a.mux.Pattern == "" }

func (a *Answer) WriteHeader(code int) {
	if !a.muxOwn() {
		a.status = code
		a.ResponseWriter.WriteHeader(code)
		return
	}
	if a.done {
		return
	}
	a.done, a.status = true, code
	h, r := a.Header(), a.mux
	allow, loc := h.Get("Allow"), h.Get("Location")
	clear(h)
	switch code {
	case http.StatusMethodNotAllowed:
		if allow != "" {
			h.Set("Allow", allow)
		}
		WriteJSON(a.ResponseWriter, code, ErrMethod.With("method %s not allowed on %s", r.Method, r.URL.Path))
	case http.StatusNotFound:
		WriteJSON(a.ResponseWriter, code, ErrNotFound.With("no endpoint %s %s", r.Method, r.URL.Path))
	default: // a redirect the mux chose (a missing trailing slash)
		h.Set("Location", loc)
		WriteJSON(a.ResponseWriter, code, E(code, "moved", "the canonical path is %s", loc))
	}
}

func (a *Answer) Write(b []byte) (int, error) {
	if !a.muxOwn() {
		return a.ResponseWriter.Write(b)
	}
	if !a.done {
		a.WriteHeader(http.StatusNotFound)
	}
	return len(b), nil // the mux's plain-text body
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (a *Answer) Unwrap() http.ResponseWriter { return a.ResponseWriter }

// Hijack hands the connection to the handler (a WebSocket upgrade), which
// answers on it itself, 101 Switching Protocols: the status recorded,
// though net/http never writes it (gobwas/ws takes the connection first).
func (a *Answer) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := http.NewResponseController(a.ResponseWriter).Hijack()
	if err == nil {
		a.status = http.StatusSwitchingProtocols
	}
	return conn, rw, err
}

// isClean reports whether p is in canonical form (cleanPath(p) == p)
// without making the canonical form: the path of most requests is.
func isClean(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	for i := range len(p) {
		if p[i] != '/' {
			continue
		}
		// The element after the slash: none (a trailing slash), or not
		// empty, . or ..
		switch rest := p[i+1:]; {
		case rest == "":
			return true
		case rest[0] == '/':
			return false
		case rest[0] == '.' && (len(rest) == 1 || rest[1] == '/'):
			return false
		case rest[0] == '.' && rest[1] == '.' && (len(rest) == 2 || rest[2] == '/'):
			return false
		}
	}
	return true
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
