package admission

import (
	"log/slog"
	"net/http"
	"slices"
	"strings"

	"github.com/agentmesh/mesh/internal/httpx"
)

// CredentialFunc names the established credential r carries ("" for none)
// for the credential budget. It may read r's body, and must then put it
// back for the handler; an error (a body too large, say) is the answer.
type CredentialFunc func(w http.ResponseWriter, r *http.Request) (string, error)

// Surfaces names the write surfaces of a route table.
type Surfaces struct {
	mux   *http.ServeMux
	names map[string]string
	// methods are those of the patterns, each once: a request of another
	// method (a read: GET, HEAD) is no write without a lookup in mux (a
	// few comparisons, cheaper than a map's hash).
	methods []string
}

// NewSurfaces returns the surfaces of routes, each a map from a ServeMux
// pattern ("POST /v1/agents/register") to a surface name ("register").
// Every pattern names its method.
func NewSurfaces(routes ...map[string]string) *Surfaces {
	s := &Surfaces{mux: http.NewServeMux(), names: map[string]string{}}
	for _, m := range routes {
		for pattern, name := range m {
			s.mux.Handle(pattern, http.NotFoundHandler())
			s.names[pattern] = name
			if method, _, _ := strings.Cut(pattern, " "); !slices.Contains(s.methods, method) {
				s.methods = append(s.methods, method)
			}
		}
	}
	return s
}

// Match returns the surface of r and its route pattern; "" when r is not
// a write.
func (s *Surfaces) Match(r *http.Request) (name, pattern string) {
	if !slices.Contains(s.methods, r.Method) {
		return "", ""
	}
	_, pattern = s.mux.Handler(r)
	return s.names[pattern], pattern
}

// Writes meters the writes of next: a request on one of surfaces takes a
// token from its credential's budget, or its client address's (see
// Origin; also when its credential cannot be read), and is refused when
// none is left. What it admits carries its Origin in its context, and
// what it took (Charged), given back if the directory sheds the write.
//
// It belongs outside the route metrics (it hands on a copy of the
// request); what it refuses is counted in mesh_admission_refused_total.
func (a *Admitter) Writes(surfaces *Surfaces, credential CredentialFunc, log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, _ := surfaces.Match(r)
		if name == "" {
			next.ServeHTTP(w, r)
			return
		}
		o, forwarded := OriginOf(r.Context())
		if !forwarded {
			o = Origin{Client: httpx.AddrKey(httpx.ClientIP(r))}
		}
		o.Surface = name
		// A request whose credential cannot be read (a body too large, or
		// too slow) is charged to its address all the same, then answered
		// with why.
		cred, err := credential(w, r)
		o.Credential = cred
		keys := a.keys(o)
		aerr := a.Admit(name, keys...)
		if err == nil {
			err = aerr
		}
		if err != nil {
			httpx.WriteError(log, w, r, err)
			return
		}
		ctx := a.Charged(WithOrigin(r.Context(), o), keys...)
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}
