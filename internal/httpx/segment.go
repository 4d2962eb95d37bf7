package httpx

import (
	"net/http"
	"strings"
)

// SegmentFunc serves a route whose last path segment is its wildcard,
// given that segment (what r.PathValue would return).
type SegmentFunc func(w http.ResponseWriter, r *http.Request, segment string)

// segmentRoute is a route a Mux serves without its ServeMux (see
// Mux.HandleSegment).
type segmentRoute struct {
	pattern string // as registered: the route's name (r.Pattern)
	prefix  string // the path up to the wildcard, "/a/b/"
	h       SegmentFunc
	// literals are the segments other patterns name at the wildcard's
	// place after the same prefix: more specific routes, left to the
	// ServeMux.
	literals map[string]bool
}

// segmentRoutes are a Mux's segment routes, rebuilt (not changed) at each
// registration: requests read them without a lock.
type segmentRoutes struct {
	routes []segmentRoute
	off    bool // a pattern names a host: the ServeMux decides every request
}

// HandleSegment registers h for pattern, a GET route whose only wildcard
// is its last segment ("GET /a/b/{name}"), as Handle does: the ServeMux
// routes to it, h given the segment. The Mux also serves without routing
// the requests the ServeMux would route to it: a GET whose path is the
// prefix and one segment more, not escaped (no RawPath), and not a
// segment another pattern names there (a more specific route), while no
// pattern names a host. It sets r.Pattern as the ServeMux does, but no
// path value: h has the segment. Routing is most of what a read of one
// row pays beyond writing its answer (docs/architecture.md, Reads at the
// ceiling).
func (m *Mux) HandleSegment(pattern string, h SegmentFunc) {
	method, path, ok := strings.Cut(pattern, " ")
	prefix, name, wild := cutWildcard(path)
	if !ok || method != http.MethodGet || !wild {
		panic("httpx: HandleSegment wants GET /prefix/{name}, not " + pattern)
	}
	m.Handle(pattern, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h(w, r, r.PathValue(name)) }))
	m.mu.Lock()
	defer m.mu.Unlock()
	m.segmentList = append(m.segmentList, segmentRoute{pattern: pattern, prefix: prefix, h: h})
	m.rebuildSegmentsLocked()
}

// HandleSegment registers h on router: on a Mux as Mux.HandleSegment
// does, on another router through r.PathValue.
func HandleSegment(router Router, pattern string, h SegmentFunc) {
	if m, ok := router.(*Mux); ok {
		m.HandleSegment(pattern, h)
		return
	}
	_, name, _ := cutWildcard(pattern)
	router.Handle(pattern, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h(w, r, r.PathValue(name)) }))
}

// cutWildcard splits path "/a/b/{name}" into "/a/b/" and name; false when
// its last segment is not a single wildcard or another segment has one.
func cutWildcard(path string) (prefix, name string, ok bool) {
	i := strings.LastIndexByte(path, '/')
	prefix, last := path[:i+1], path[i+1:]
	name, ok = strings.CutPrefix(last, "{")
	name, ok2 := strings.CutSuffix(name, "}")
	if !ok || !ok2 || name == "" || strings.ContainsAny(name, "{}.") || strings.ContainsAny(prefix, "{}") || !strings.HasPrefix(prefix, "/") {
		return "", "", false
	}
	return prefix, name, true
}

// rebuildSegmentsLocked rebuilds m's segment routes from its patterns.
func (m *Mux) rebuildSegmentsLocked() {
	s := &segmentRoutes{}
	for _, sr := range m.segmentList {
		sr.literals = map[string]bool{}
		for _, p := range m.patterns {
			path := p
			if _, after, ok := strings.Cut(p, " "); ok {
				path = after
			}
			if !strings.HasPrefix(path, "/") {
				s.off = true
			}
			if rest, ok := strings.CutPrefix(path, sr.prefix); ok && p != sr.pattern {
				seg, _, _ := strings.Cut(rest, "/")
				sr.literals[seg] = true
			}
		}
		s.routes = append(s.routes, sr)
	}
	m.segments.Store(s)
}

// serveSegment serves r if it is a request of a segment route (see
// HandleSegment); false when the ServeMux is to route it.
func (m *Mux) serveSegment(w http.ResponseWriter, r *http.Request) bool {
	s := m.segments.Load()
	if s == nil || s.off || r.Method != http.MethodGet || r.URL.RawPath != "" {
		return false
	}
	p := r.URL.Path
	for i := range s.routes {
		sr := &s.routes[i]
		seg, ok := strings.CutPrefix(p, sr.prefix)
		if !ok || seg == "" || strings.IndexByte(seg, '/') >= 0 || sr.literals[seg] {
			continue
		}
		r.Pattern = sr.pattern
		sr.h(w, r, seg)
		return true
	}
	return false
}
