package node

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/openapi"
)

// The OpenAPI document (internal/openapi) is kept true here: every route
// a node registers is in it and every operation in it is served
// (TestOpenAPIDescribesEveryRoute), and each documented operation's
// example requests, sent to real nodes, are valid or invalid as they are
// meant to be and get answers the document describes (TestOpenAPIAnswers,
// whose cases are in openapi_cases_test.go).
//
// To document a new endpoint: add its path to internal/openapi/openapi.yaml
// and at least one h.run(apiCase{...}) for it in openapi_cases_test.go.

// apiCase is one example request and what its answer must be.
type apiCase struct {
	name         string
	node         *Node  // where to send it; the harness's default node when nil
	method, path string // path with its query
	body         string
	hdr          []string           // header name, value pairs
	sign         ed25519.PrivateKey // signs the request (Mesh-Sig) when set
	status       int
	// code is the error code the answer must carry: an Error's code, or
	// a JSON-RPC error's (as a decimal string).
	code string
	// invalid marks a request that breaks the document on purpose (a
	// missing credential or field, a value out of range): the validator
	// must refuse it, and the node must answer it as documented.
	invalid bool
}

// apiHarness sends apiCases and validates them against the document.
type apiHarness struct {
	t         *testing.T
	m         *mesh
	node      *Node
	doc       *openapi3.T
	router    routers.Router
	exercised map[string]bool // documented operations sent, as "METHOD /path"
}

func newAPIHarness(t *testing.T, m *mesh, n *Node) *apiHarness {
	t.Helper()
	doc := loadAPIDoc(t)
	r, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	return &apiHarness{t: t, m: m, node: n, doc: doc, router: r, exercised: map[string]bool{}}
}

// loadAPIDoc loads the document a node serves and validates it.
// The pages and their files are text the validator takes as it is.
func init() {
	for _, ct := range []string{"text/html", "text/css", "text/javascript", "image/svg+xml"} {
		openapi3filter.RegisterBodyDecoder(ct, openapi3filter.PlainBodyDecoder)
	}
}

func loadAPIDoc(t *testing.T) *openapi3.T {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(openapi.JSON())
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return doc
}

// docOps is every operation of doc, as "METHOD /path".
func docOps(doc *openapi3.T) map[string]bool {
	ops := map[string]bool{}
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			ops[method+" "+path] = true
		}
	}
	return ops
}

// run sends c, checks its answer and validates both against the document,
// and returns the answer's JSON body (nil when it has none).
// noRedirects is a client that answers a redirect with it, as the
// document describes it.
var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func (h *apiHarness) run(c apiCase) map[string]any {
	h.t.Helper()
	n := c.node
	if n == nil {
		n = h.node
	}
	hdr := http.Header{}
	for i := 0; i+1 < len(c.hdr); i += 2 {
		hdr.Set(c.hdr[i], c.hdr[i+1])
	}
	if c.body != "" {
		hdr.Set("Content-Type", "application/json")
	}
	if c.sign != nil {
		hdr.Set(identity.SigHeaderName, identity.Sign(c.sign, c.method, c.path, []byte(c.body), h.m.clock.Now()))
	}
	build := func() *http.Request {
		req, err := http.NewRequest(c.method, n.URL()+c.path, strings.NewReader(c.body))
		if err != nil {
			h.t.Fatal(err)
		}
		req.Header = hdr.Clone()
		return req
	}
	resp, err := noRedirects.Do(build())
	if err != nil {
		h.t.Fatalf("%s: %v", c.name, err)
	}
	var raw []byte
	if resp.StatusCode != http.StatusSwitchingProtocols { // its body is the socket
		raw, _ = io.ReadAll(resp.Body)
	}
	resp.Body.Close()
	h.validate(c, build(), resp, raw)
	var v map[string]any
	json.Unmarshal(raw, &v)
	return v
}

// validate checks the answer to c against c and the document.
func (h *apiHarness) validate(c apiCase, req *http.Request, resp *http.Response, raw []byte) {
	h.t.Helper()
	if resp.StatusCode != c.status {
		h.t.Errorf("%s: status %d, want %d: %s", c.name, resp.StatusCode, c.status, raw)
		return
	}
	if got := answerCode(raw); got != c.code {
		h.t.Errorf("%s: code %q, want %q: %s", c.name, got, c.code, raw)
	}
	route, params, err := h.router.FindRoute(req)
	if err != nil {
		h.t.Errorf("%s: %s %s is not in the document: %v", c.name, c.method, c.path, err)
		return
	}
	h.exercised[route.Method+" "+route.Path] = true
	if route.Operation.Responses.Status(resp.StatusCode) == nil {
		h.t.Errorf("%s: status %d is not documented for %s %s", c.name, resp.StatusCode, route.Method, route.Path)
	}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: credentialPresent}}
	switch err := openapi3filter.ValidateRequest(context.Background(), in); {
	case c.invalid && err == nil:
		h.t.Errorf("%s: the document takes a request meant to break it", c.name)
	case !c.invalid && err != nil:
		h.t.Errorf("%s: request does not match the document: %v", c.name, err)
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode,
		Header: resp.Header, Body: io.NopCloser(bytes.NewReader(raw)),
		Options: &openapi3filter.Options{IncludeResponseStatus: true}}
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		h.t.Errorf("%s: answer %d does not match the document: %v\n%s", c.name, resp.StatusCode, err, raw)
	}
	h.allDocumented(c, route, resp.StatusCode, raw)
}

// allDocumented fails when a JSON answer carries a field its schema does
// not name.
func (h *apiHarness) allDocumented(c apiCase, route *routers.Route, status int, raw []byte) {
	h.t.Helper()
	ref := route.Operation.Responses.Status(status)
	if ref == nil || ref.Value == nil {
		return
	}
	mt := ref.Value.Content.Get("application/json")
	var v any
	if mt == nil || mt.Schema == nil || json.Unmarshal(raw, &v) != nil {
		return
	}
	if extra := undocumented(mt.Schema.Value, v, ""); len(extra) > 0 {
		slices.Sort(extra)
		h.t.Errorf("%s: answer %d has fields the document does not name: %v", c.name, status, extra)
	}
}

// answerCode is the code of an error answer: an Error's, or a JSON-RPC
// error's.
func answerCode(raw []byte) string {
	var v struct {
		Code  string `json:"code"`
		Error *struct {
			Code int `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(raw, &v) != nil {
		return ""
	}
	if v.Error != nil {
		return fmt.Sprint(v.Error.Code)
	}
	return v.Code
}

// credentialPresent stands for the node's own checks of credentials: the
// document is satisfied when the request carries the scheme's credential.
func credentialPresent(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	r, s := in.RequestValidationInput.Request, in.SecurityScheme
	ok := false
	switch {
	case s.Type == "http":
		ok = strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ")
	case s.In == "header":
		ok = r.Header.Get(s.Name) != ""
	case s.In == "query":
		ok = r.URL.Query().Has(s.Name)
	}
	if !ok {
		return fmt.Errorf("no %s credential", in.SecuritySchemeName)
	}
	return nil
}

// checkCoverage fails for each documented operation no case exercised.
func (h *apiHarness) checkCoverage() {
	h.t.Helper()
	for _, op := range slices.Sorted(maps.Keys(docOps(h.doc))) {
		if !h.exercised[op] {
			h.t.Errorf("documented operation %s: no example request exercised it", op)
		}
	}
}

// routeOp is the documented operation a route pattern registered on a
// node's mux stands for: the pattern without the mux's {$}, and each of
// the embedded agent's skills as POST /v1/{skill}.
func routeOp(pattern string, skills []string) string {
	method, path, _ := strings.Cut(pattern, " ")
	path = strings.TrimSuffix(path, "{$}")
	if s, ok := strings.CutPrefix(path, "/v1/"); ok && method == http.MethodPost && slices.Contains(skills, s) {
		path = "/v1/{skill}"
	}
	return method + " " + path
}
