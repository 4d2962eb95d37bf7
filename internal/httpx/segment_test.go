package httpx

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
)

// segmentMux is a Mux with segment routes among routes that take some of
// their paths: literals at the wildcard's place, registered before and
// after, a deeper route, another method. Each answer names the route and
// the segment, and whether it came without routing (no path value).
func segmentMux() *Mux {
	m := NewMux()
	answer := func(w http.ResponseWriter, r *http.Request, seg string) {
		WriteJSON(w, http.StatusOK, map[string]any{"pattern": r.Pattern, "seg": seg, "direct": r.PathValue("id") == ""})
	}
	plain := func(w http.ResponseWriter, r *http.Request) {
		WriteJSON(w, http.StatusOK, map[string]any{"pattern": r.Pattern, "seg": r.PathValue("id"), "direct": false})
	}
	m.HandleFunc("GET /items/me", plain)
	m.HandleSegment("GET /items/{id}", answer)
	m.HandleSegment("GET /old/{id}", answer)
	m.HandleFunc("POST /items/{id}", plain)
	m.HandleFunc("GET /items/{id}/sub", plain)
	m.HandleFunc("GET /items/later", plain)
	return m
}

// routed is what m answers to method target: status, route, segment, and
// whether the route was served without routing.
func routed(t *testing.T, m *Mux, method, target string) (status int, pattern, seg string, direct bool) {
	t.Helper()
	rec := httptest.NewRecorder()
	m.ServeHTTP(rec, httptest.NewRequest(method, target, nil))
	var body struct {
		Pattern, Seg string
		Direct       bool
	}
	json.Unmarshal(rec.Body.Bytes(), &body)
	return rec.Code, body.Pattern, body.Seg, body.Direct
}

// TestSegmentRoutes: a segment route serves, without routing, the plain
// GETs of one segment under its prefix, and leaves to the ServeMux what
// another route takes (a literal there, registered before or after it, a
// deeper path, another method) and what it cannot tell by the path alone
// (an escaped path, HEAD), which it routes as ever.
func TestSegmentRoutes(t *testing.T) {
	m := segmentMux()
	for _, c := range []struct {
		method, target string
		status         int
		pattern, seg   string
		direct         bool
	}{
		{"GET", "/items/a-1", 200, "GET /items/{id}", "a-1", true},
		{"GET", "/old/a-1", 200, "GET /old/{id}", "a-1", true},
		{"GET", "/items/me", 200, "GET /items/me", "", false},
		{"GET", "/items/later", 200, "GET /items/later", "", false},
		{"GET", "/items/a-1/sub", 200, "GET /items/{id}/sub", "a-1", false},
		{"POST", "/items/a-1", 200, "POST /items/{id}", "a-1", false},
		{"GET", "/items/a%2Fb", 200, "GET /items/{id}", "a/b", false},
		{"GET", "/items/a%20b", 200, "GET /items/{id}", "a b", true},
		{"HEAD", "/items/a-1", 200, "GET /items/{id}", "a-1", false},
		{"GET", "/items/", 404, "", "", false},
		{"GET", "/items/a-1/", 404, "", "", false},
	} {
		status, pattern, seg, direct := routed(t, m, c.method, c.target)
		if status != c.status || pattern != c.pattern || seg != c.seg || direct != c.direct {
			t.Errorf("%s %s: %d %q %q direct %v, want %d %q %q direct %v", c.method, c.target, status, pattern, seg, direct,
				c.status, c.pattern, c.seg, c.direct)
		}
	}
}

// TestSegmentRouteAllocatesNothing: a request a segment route serves costs
// no allocation (the ServeMux makes a list of path values for each).
func TestSegmentRouteAllocatesNothing(t *testing.T) {
	m := NewMux()
	m.HandleSegment("GET /items/{id}", func(w http.ResponseWriter, r *http.Request, seg string) { w.WriteHeader(http.StatusNoContent) })
	r := httptest.NewRequest("GET", "/items/a-1", nil)
	w := Record(httptest.NewRecorder())
	if n := testing.AllocsPerRun(100, func() { m.ServeHTTP(w, r) }); n != 0 || w.Status() != http.StatusNoContent {
		t.Fatalf("%v allocations a request, status %d", n, w.Status())
	}
}

// TestSegmentRoutesOffWithAHost: once a pattern names a host, the
// ServeMux decides every request (a host's route comes first).
func TestSegmentRoutesOffWithAHost(t *testing.T) {
	m := segmentMux()
	m.HandleFunc("example.com/items/{id}", func(w http.ResponseWriter, r *http.Request) {
		WriteJSON(w, http.StatusOK, map[string]any{"pattern": r.Pattern, "seg": r.PathValue("id")})
	})
	if _, pattern, seg, direct := routed(t, m, "GET", "/items/a-1"); pattern != "example.com/items/{id}" || seg != "a-1" || direct {
		t.Fatalf("GET example.com/items/a-1: %q %q direct %v", pattern, seg, direct)
	}
}

// FuzzSegmentRoute: whatever the method and path, a request a segment
// route serves is one the ServeMux routes to it, with the same segment.
func FuzzSegmentRoute(f *testing.F) {
	for _, s := range []string{"/items/x", "/items/me", "/items/later", "/items/x/sub", "/items/%2F", "/items/%41", "/old/x", "/items/", "/items/.", "/x"} {
		f.Add("GET", s)
	}
	m := segmentMux()
	f.Fuzz(func(t *testing.T, method, target string) {
		r, err := http.NewRequest(method, "http://example.org/", nil)
		if err != nil {
			return
		}
		u, err := url.Parse(target)
		if err != nil || u.Host != "" || !isClean(u.Path) {
			return
		}
		r.URL = u
		rec := httptest.NewRecorder()
		m.ServeHTTP(rec, r)
		var body struct {
			Pattern, Seg string
			Direct       bool
		}
		if json.Unmarshal(rec.Body.Bytes(), &body) != nil || !body.Direct {
			return
		}
		_, pattern := m.Handler(r)
		routedReq := r.Clone(r.Context())
		m.mux.ServeHTTP(httptest.NewRecorder(), routedReq)
		if pattern != body.Pattern || routedReq.PathValue("id") != body.Seg {
			t.Fatalf("%s %q: served by %q with %q; the ServeMux routes it to %q with %q", method, target, body.Pattern, body.Seg, pattern, routedReq.PathValue("id"))
		}
	})
}
