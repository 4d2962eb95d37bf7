package coord

import (
	"crypto/subtle"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"path"
	"strconv"
	"strings"
	"sync"

	"github.com/agentmesh/mesh/internal/httpx"
)

// Refusals of the guard, before any handler.
var (
	errBadHost     = httpx.E(http.StatusMisdirectedRequest, "bad_host", "this daemon does not serve that Host")
	errOrigin      = httpx.E(http.StatusForbidden, "origin_not_allowed", "pages of that origin may not do this")
	errCrossSite   = httpx.E(http.StatusForbidden, "cross_site", "a cross-site request from a browser may not change anything")
	errNoToken     = httpx.E(http.StatusForbidden, "token_required", "a write from a page needs the daemon's token")
	errBadToken    = httpx.E(http.StatusForbidden, "bad_token", "the token is not this daemon's")
	errContentType = httpx.E(http.StatusUnsupportedMediaType, "unsupported_media_type", "the body must be application/json")
)

// guard checks what every request must satisfy before a handler runs:
//
//   - its Host names this daemon (a page of a rebound name cannot reach
//     it);
//   - a request that changes something (any method but GET, HEAD and
//     OPTIONS), or asks to switch protocols (the /events upgrade), from a
//     browser comes from an allowed
//     origin: a foreign or opaque ("null") Origin, or no Origin with a
//     cross-site or same-site Sec-Fetch-Site, is refused;
//   - such a write from a browser (or from anyone, with requireToken)
//     carries the daemon's token;
//   - its body, if it has one, is application/json, which no form and no
//     no-cors request can send.
//
// Allowed origins also get their CORS headers and preflights answered.
type guard struct {
	hosts        []string   // host name patterns (path.Match), lower case
	listen       netip.Addr // the address listened on
	anyIP        bool       // listening on every address: any IP is ours
	origins      []string   // origin host patterns (path.Match)
	token        string
	requireToken bool
	log          *slog.Logger
	debug        func(fields map[string]any)
	tokenName    string // where the token is, as told to clients
	seen         onceSet
}

func (g *guard) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !g.hostAllowed(r.Host) {
			g.refuse(w, r, errBadHost.With("Host %q is not one this daemon serves (add it with --allow-host)", clip(r.Host)), r.Host)
			return
		}
		origin := r.Header.Get("Origin")
		allowed := origin != "" && g.originAllowed(r, origin)
		if allowed {
			h := w.Header()
			h.Add("Vary", "Origin")
			h.Set("Access-Control-Allow-Origin", origin)
		}
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			g.preflight(w, r, origin, allowed)
			return
		}
		if err := g.check(r, origin, allowed); err != nil {
			g.refuse(w, r, err, origin+" "+r.Header.Get("Sec-Fetch-Site"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// preflight answers a CORS preflight: an allowed origin may send JSON and
// the token; any other is refused.
func (g *guard) preflight(w http.ResponseWriter, r *http.Request, origin string, allowed bool) {
	if !allowed {
		g.refuse(w, r, errOrigin.With("Origin %q is not allowed (--allow-origin)", clip(origin)), origin)
		return
	}
	h := w.Header()
	h.Set("Access-Control-Allow-Methods", "GET, POST")
	h.Set("Access-Control-Allow-Headers", "Content-Type, Authorization")
	h.Set("Access-Control-Max-Age", "600")
	w.WriteHeader(http.StatusNoContent)
}

// check is the guard's verdict on a request whose Host is ours.
func (g *guard) check(r *http.Request, origin string, allowed bool) *httpx.Error {
	write := r.Method != http.MethodGet && r.Method != http.MethodHead && r.Method != http.MethodOptions
	// Any request to switch protocols: the WebSocket library takes
	// "websocket" anywhere in the list ("h2c, websocket").
	upgrade := len(r.Header.Values("Upgrade")) > 0
	if !write && !upgrade {
		return nil // reads: a page of another origin gets no CORS headers
	}
	site := r.Header.Get("Sec-Fetch-Site")
	browser := origin != "" || site != ""
	switch {
	case origin == "null":
		return errOrigin.With("Origin null (a sandboxed page, a local file, a redirect) is never allowed")
	case origin != "" && !allowed:
		return errOrigin.With("Origin %q is not allowed (--allow-origin)", clip(origin))
	case origin == "" && site != "" && site != "none" && site != "same-origin":
		return errCrossSite.With("a %s request without an Origin is refused", clip(site))
	case !write:
		return nil // the event socket only sends: no token, no body
	}
	if err := g.checkToken(r, browser || g.requireToken); err != nil {
		return err
	}
	return checkJSONBody(r)
}

// checkToken compares the request's bearer token, when it sends one or
// must, with the daemon's.
func (g *guard) checkToken(r *http.Request, must bool) *httpx.Error {
	auth := r.Header.Get("Authorization")
	if auth == "" && !must {
		return nil
	}
	scheme, tok, _ := strings.Cut(auth, " ")
	switch {
	case auth == "":
		return errNoToken.With("send the token of %s as Authorization: Bearer <token>", g.tokenName)
	case !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare([]byte(strings.TrimSpace(tok)), []byte(g.token)) != 1:
		return errBadToken.With("Authorization: Bearer <token> must hold the token of %s", g.tokenName)
	}
	return nil
}

// checkJSONBody refuses a body that is not declared application/json: a
// request with a body but no Content-Type, or another type.
func checkJSONBody(r *http.Request) *httpx.Error {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		if r.ContentLength == 0 {
			return nil // an action without a body (self-update, cancel)
		}
		return errContentType.With("a body needs Content-Type: application/json")
	}
	if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
		return errContentType.With("Content-Type %q: only application/json is taken", clip(ct))
	}
	return nil
}

// hostAllowed reports whether a Host header names this daemon: a loopback
// address, the address it listens on (any address when it listens on
// all), localhost, its certificate's names or a name given with
// --allow-host. The port is not compared: a tunnel may reach the daemon
// under another one, and a page cannot choose the Host its browser sends
// other than by its name.
func (g *guard) hostAllowed(host string) bool {
	name := host
	if h, port, err := net.SplitHostPort(host); err == nil {
		if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			return false
		}
		name = h
	} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		name = host[1 : len(host)-1]
	}
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	if name == "" {
		return false
	}
	if a, err := netip.ParseAddr(name); err == nil {
		a = a.Unmap()
		return a.Zone() == "" && (a.IsLoopback() || g.anyIP || a == g.listen)
	}
	for _, p := range g.hosts {
		if ok, _ := path.Match(p, name); ok {
			return true
		}
	}
	return false
}

// originAllowed matches the origin's host (with its port) against the
// allowed patterns, as the WebSocket library does for /events; the
// daemon's own origin (its scheme and Host) is allowed too.
func (g *guard) originAllowed(r *http.Request, origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	host := strings.ToLower(u.Host)
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	if u.Scheme == scheme && host == strings.ToLower(r.Host) {
		return true
	}
	for _, p := range g.origins {
		if ok, _ := path.Match(strings.ToLower(p), host); ok {
			return true
		}
	}
	return false
}

// refuse answers err and logs it at warn (and in the debug log) the
// first time this client sent this value (a Host, an Origin); later ones
// at debug only, so that a page that retries cannot fill the logs.
func (g *guard) refuse(w http.ResponseWriter, r *http.Request, err *httpx.Error, value string) {
	client, _, _ := net.SplitHostPort(r.RemoteAddr)
	kv := []any{"code", err.Code, "client", client, "method", r.Method, "path", clip(r.URL.Path), "host", clip(r.Host),
		"origin", clip(r.Header.Get("Origin")), "sec_fetch_site", clip(r.Header.Get("Sec-Fetch-Site"))}
	if g.seen.first(err.Code + " " + client + " " + clip(value)) {
		g.log.Warn("request refused", kv...)
		fields := make(map[string]any, len(kv)/2)
		for i := 0; i < len(kv); i += 2 {
			fields[kv[i].(string)] = kv[i+1]
		}
		g.debug(fields)
	} else {
		g.log.Debug("request refused", kv...)
	}
	httpx.WriteJSON(w, err.Status, err)
}

// clip bounds a client's header value in answers and logs.
func clip(s string) string {
	const max = 200
	if len(s) > max {
		return s[:max] + "..."
	}
	return s
}

// onceSet remembers the last onceMax keys it was asked about, so that a
// refusal is logged at warn once per client, in bounded memory: when full
// the oldest key is forgotten (and may be logged again).
type onceSet struct {
	mu    sync.Mutex
	keys  map[string]struct{}
	order []string // a ring of the keys, oldest at next
	next  int
}

const onceMax = 1024

// first reports whether key is new, and remembers it.
func (s *onceSet) first(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.keys[key]; ok {
		return false
	}
	if s.keys == nil {
		s.keys = map[string]struct{}{}
	}
	if len(s.order) < onceMax {
		s.order = append(s.order, key)
	} else {
		delete(s.keys, s.order[s.next])
		s.order[s.next] = key
		s.next = (s.next + 1) % onceMax
	}
	s.keys[key] = struct{}{}
	return true
}
