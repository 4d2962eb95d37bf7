package httpx

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// decodeError checks that rec holds a JSON error with the given status and
// code, and returns it.
func decodeError(t *testing.T, rec *httptest.ResponseRecorder, status int, code string) *Error {
	t.Helper()
	if rec.Code != status {
		t.Fatalf("status = %d, want %d (body %q)", rec.Code, status, rec.Body.String())
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type = %q, want application/json", ct)
	}
	var body map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("body %q is not JSON: %v", rec.Body.String(), err)
	}
	if len(body) != 2 {
		t.Fatalf("body = %v, want exactly code and detail", body)
	}
	gotCode, _ := body["code"].(string)
	detail, ok := body["detail"].(string)
	if gotCode != code || !ok || detail == "" {
		t.Fatalf("body = %v, want code %q and a detail", body, code)
	}
	return &Error{Status: rec.Code, Code: gotCode, Detail: detail}
}

func newTestMux() *Mux {
	m := NewMux()
	m.HandleFunc("GET /items/{id}", func(w http.ResponseWriter, r *http.Request) {
		WriteJSON(w, http.StatusOK, map[string]string{"id": r.PathValue("id"), "pattern": r.Pattern})
	})
	m.HandleFunc("POST /items/{id}", func(w http.ResponseWriter, r *http.Request) {
		WriteJSON(w, http.StatusCreated, map[string]string{"id": r.PathValue("id"), "pattern": r.Pattern})
	})
	m.HandleFunc("GET /files/{path...}", func(w http.ResponseWriter, r *http.Request) {
		WriteJSON(w, http.StatusOK, map[string]string{"path": r.PathValue("path"), "pattern": r.Pattern})
	})
	m.HandleFunc("/any", func(w http.ResponseWriter, r *http.Request) {
		WriteJSON(w, http.StatusOK, map[string]string{"pattern": r.Pattern})
	})
	return m
}

func TestMuxNotFound(t *testing.T) {
	m := newTestMux()
	for _, target := range []string{"/", "/nope", "/items", "/items/1/extra"} {
		t.Run(target, func(t *testing.T) {
			rec := httptest.NewRecorder()
			m.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
			e := decodeError(t, rec, http.StatusNotFound, "not_found")
			if !strings.Contains(e.Detail, target) {
				t.Errorf("detail %q does not name the path %q", e.Detail, target)
			}
			if rec.Header().Get("X-Content-Type-Options") != "nosniff" {
				t.Errorf("missing X-Content-Type-Options: nosniff")
			}
			if _, pattern := m.Handler(httptest.NewRequest(http.MethodGet, target, nil)); pattern != "" {
				t.Errorf("pattern for %s = %q", target, pattern)
			}
		})
	}
}

func TestMuxRedirectIsJSON(t *testing.T) {
	m := newTestMux()
	for _, target := range []string{"//items/1", "/files/../items/1"} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.URL.Path = target
		m.ServeHTTP(rec, req)
		var e Error
		if rec.Code/100 != 3 || rec.Header().Get("Location") != "/items/1" || json.Unmarshal(rec.Body.Bytes(), &e) != nil || e.Code != "moved" {
			t.Fatalf("%s: %d %v %q", target, rec.Code, rec.Header(), rec.Body)
		}
	}
}

// TestMuxThroughAnOuterAnswer: a Mux reached through the Answer an outer
// layer made (the route metrics') answers through that one, not a wrapper
// of its own, and the Answer records every status: the route's, and the
// mux's own answers, which it still puts in JSON; so does a Mux reached
// through another's route (the forward stream's).
func TestMuxThroughAnOuterAnswer(t *testing.T) {
	m := newTestMux()
	var seen http.ResponseWriter
	m.HandleFunc("GET /seen", func(w http.ResponseWriter, r *http.Request) { seen = w })
	outer := NewMux()
	outer.Handle("/", m)
	for _, c := range []struct {
		method, target string
		status         int
	}{{"GET", "/items/42", 200}, {"POST", "/items/abc", 201}, {"DELETE", "/items/7", 405}, {"GET", "/nope", 404}} {
		for _, h := range []http.Handler{m, outer} {
			rec := httptest.NewRecorder()
			a := Record(rec)
			h.ServeHTTP(a, httptest.NewRequest(c.method, c.target, nil))
			if a.Status() != c.status || rec.Code != c.status || rec.Header().Get("Content-Type") != "application/json" || !json.Valid(rec.Body.Bytes()) {
				t.Fatalf("%s %s: recorded %d, answered %d %q", c.method, c.target, a.Status(), rec.Code, rec.Body)
			}
			if c.status == 405 && rec.Header().Get("Allow") == "" {
				t.Fatalf("%s %s: no Allow", c.method, c.target)
			}
		}
	}
	a := Record(httptest.NewRecorder())
	outer.ServeHTTP(a, httptest.NewRequest("GET", "/seen", nil))
	if seen != a || Record(a) != a {
		t.Fatalf("the route was handed %T, not the outer Answer", seen)
	}
}

// FuzzIsClean: the quick check tells a path in canonical form exactly
// when making its canonical form gives it back.
func FuzzIsClean(f *testing.F) {
	for _, p := range []string{"", "/", "/v1/agents/a-1", "/a/", "//a", "/a//b", "/a/.", "/a/./b", "/a/..", "/a/../b", "/.a/..b/...", "a/b", "/a/.b."} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if got, want := isClean(p), cleanPath(p) == p; got != want {
			t.Fatalf("isClean(%q) = %v, want %v (canonical %q)", p, got, want, cleanPath(p))
		}
	})
}

func TestWriteJSONDoesNotEscapeHTML(t *testing.T) {
	rec := httptest.NewRecorder()
	WriteJSON(rec, http.StatusOK, map[string]string{"ws": "ws://x/ws?a=<1>&b=2"})
	if got := rec.Body.String(); got != `{"ws":"ws://x/ws?a=<1>&b=2"}`+"\n" {
		t.Fatalf("body %q", got)
	}
}

func TestMuxMethodNotAllowed(t *testing.T) {
	m := newTestMux()
	rec := httptest.NewRecorder()
	m.ServeHTTP(rec, httptest.NewRequest(http.MethodDelete, "/items/7", nil))
	e := decodeError(t, rec, http.StatusMethodNotAllowed, "method_not_allowed")
	if !strings.Contains(e.Detail, "DELETE") || !strings.Contains(e.Detail, "/items/7") {
		t.Errorf("detail %q does not name method and path", e.Detail)
	}
	allow := rec.Header().Get("Allow")
	for _, method := range []string{"GET", "HEAD", "POST"} {
		if !strings.Contains(allow, method) {
			t.Errorf("Allow = %q, missing %s", allow, method)
		}
	}
	if strings.Contains(allow, "DELETE") {
		t.Errorf("Allow = %q contains DELETE", allow)
	}
}

func TestMuxMatched(t *testing.T) {
	m := newTestMux()
	tests := []struct {
		method, target string
		status         int
		want           map[string]string
	}{
		{"GET", "/items/42", http.StatusOK, map[string]string{"id": "42", "pattern": "GET /items/{id}"}},
		{"POST", "/items/abc", http.StatusCreated, map[string]string{"id": "abc", "pattern": "POST /items/{id}"}},
		{"GET", "/items/a%2Fb", http.StatusOK, map[string]string{"id": "a/b", "pattern": "GET /items/{id}"}},
		{"GET", "/files/x/y/z.txt", http.StatusOK, map[string]string{"path": "x/y/z.txt", "pattern": "GET /files/{path...}"}},
		{"PUT", "/any", http.StatusOK, map[string]string{"pattern": "/any"}},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.target, func(t *testing.T) {
			req := httptest.NewRequest(tt.method, tt.target, nil)
			if _, got := m.Handler(req); got != tt.want["pattern"] {
				t.Errorf("pattern = %q, want %q", got, tt.want["pattern"])
			}
			rec := httptest.NewRecorder()
			m.ServeHTTP(rec, req)
			if rec.Code != tt.status {
				t.Fatalf("status = %d, want %d (body %q)", rec.Code, tt.status, rec.Body.String())
			}
			var got map[string]string
			if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("body = %v, want %v", got, tt.want)
			}
			for k, v := range tt.want {
				if got[k] != v {
					t.Errorf("%s = %q, want %q", k, got[k], v)
				}
			}
		})
	}
}

func TestMuxRedirectPassesThrough(t *testing.T) {
	m := newTestMux()
	rec := httptest.NewRecorder()
	m.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/items/../items/5", nil))
	// ServeMux redirects cleaned paths (301 or 307 depending on the Go
	// version); Mux must pass the redirect through rather than turn it into
	// a JSON 404.
	if rec.Code != http.StatusMovedPermanently && rec.Code != http.StatusTemporaryRedirect {
		t.Fatalf("status = %d, want a redirect", rec.Code)
	}
	if loc := rec.Header().Get("Location"); loc != "/items/5" {
		t.Fatalf("Location = %q, want /items/5", loc)
	}
}

type target struct {
	A string `json:"a"`
	N int    `json:"n"`
	S struct {
		B bool `json:"b"`
	} `json:"s"`
	L []string `json:"l"`
}

func TestDecodeJSON(t *testing.T) {
	tests := []struct {
		name   string
		body   string
		ok     bool
		detail []string // substrings the detail must contain
	}{
		{name: "valid", body: `{"a":"x","n":3}`, ok: true},
		{name: "unknown fields ignored", body: `{"a":"x","extra":1,"more":{"z":[1,2]}}`, ok: true},
		{name: "trailing whitespace", body: "{\"a\":\"x\"}\n\t ", ok: true},
		{name: "leading whitespace", body: "\n {\"a\":\"x\"}", ok: true},
		{name: "surrogate pair and escapes", body: `{"a":"x","z":"\ud83d\ude00 \\ud800 \u00e9 \"\\"}`, ok: true},
		{name: "wrong type string", body: `{"a":5}`, detail: []string{`"a"`, "a string", "number"}},
		{name: "wrong type int", body: `{"n":"five"}`, detail: []string{`"n"`, "an integer", "string"}},
		{name: "wrong type nested", body: `{"s":{"b":"yes"}}`, detail: []string{`"s.b"`, "a boolean"}},
		{name: "wrong type array", body: `{"l":"x"}`, detail: []string{`"l"`, "an array"}},
		{name: "not an object", body: `[1,2]`, detail: []string{"JSON object", "array"}},
		{name: "empty", body: "", detail: []string{"empty"}},
		{name: "whitespace only", body: " \n\t", detail: []string{"empty"}},
		{name: "trailing data", body: `{"a":"x"} {"a":"y"}`, detail: []string{"after the JSON object"}},
		{name: "trailing garbage", body: `{"a":"x"}xyz`, detail: []string{"after the JSON object"}},
		{name: "trailing close brace", body: `{"a":"x"}}`, detail: []string{"after the JSON object"}},
		{name: "trailing close bracket", body: `{"a":"x"}]`, detail: []string{"after the JSON object"}},
		{name: "truncated", body: `{"a":"x"`, detail: []string{"truncated"}},
		{name: "truncated mid string", body: `{"a":"x`, detail: []string{"truncated"}},
		{name: "syntax error", body: `{"a" "x"}`, detail: []string{"malformed", "byte"}},
		{name: "form encoded", body: `a=x&n=3`, detail: []string{"not JSON"}},
		{name: "a word", body: `nope`, detail: []string{"not JSON"}},
		{name: "a number then junk", body: `5 apples`, detail: []string{"not JSON"}},
		{name: "invalid UTF-8", body: "{\"a\":\"x\xffy\"}", detail: []string{"UTF-8"}},
		{name: "overlong UTF-8", body: "{\"a\":\"\xc0\xafx\"}", detail: []string{"UTF-8"}},
		{name: "lone high surrogate", body: `{"a":"\ud800x"}`, detail: []string{"UTF-8"}},
		{name: "lone low surrogate", body: `{"a":"\udc00"}`, detail: []string{"UTF-8"}},
		{name: "reversed surrogates", body: `{"a":"\udc00\ud800"}`, detail: []string{"UTF-8"}},
		{name: "high surrogate at end", body: `{"a":"\ud83d"}`, detail: []string{"UTF-8"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var v target
			err := DecodeJSON([]byte(tt.body), &v)
			if tt.ok {
				if err != nil {
					t.Fatalf("DecodeJSON(%q) = %v", tt.body, err)
				}
				if v.A != "x" {
					t.Fatalf("A = %q, want x", v.A)
				}
				return
			}
			if !errors.Is(err, ErrBadJSON) {
				t.Fatalf("DecodeJSON(%q) = %v, want ErrBadJSON", tt.body, err)
			}
			var e *Error
			if !errors.As(err, &e) || e.Status != http.StatusBadRequest || e.Code != "invalid_json" {
				t.Fatalf("err = %#v, want a 400 invalid_json *Error", err)
			}
			for _, s := range tt.detail {
				if !strings.Contains(e.Detail, s) {
					t.Errorf("detail %q does not contain %q", e.Detail, s)
				}
			}
		})
	}
}

// FuzzValidText: whatever text a client sends, a string that DecodeJSON
// accepts holds U+FFFD only where the client wrote one; nothing is
// replaced behind its back.
func FuzzValidText(f *testing.F) {
	for _, s := range []string{`"x"`, `"\ud83d\ude00"`, `"\ud800"`, `"\\ud800"`, "\"\xff\"", `"\ufffd"`, "\"\xef\xbf\xbd\""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var v struct{ A string }
		body := `{"A":` + s + `}`
		if DecodeJSON([]byte(body), &v) != nil {
			return
		}
		sent := strings.Contains(s, "\ufffd") || strings.Contains(strings.ToLower(s), `\ufffd`)
		if strings.ContainsRune(v.A, '\ufffd') && !sent {
			t.Fatalf("%q decoded to %q: a replacement character the client did not send", body, v.A)
		}
	})
}

func TestReadBody(t *testing.T) {
	tests := []struct {
		name  string
		body  string
		limit int64
		err   *Error
	}{
		{name: "under limit", body: "hello", limit: 10},
		{name: "at limit", body: "hello", limit: 5},
		{name: "empty", body: "", limit: 5},
		{name: "over limit", body: "hello!", limit: 5, err: ErrTooLarge},
		{name: "far over limit", body: strings.Repeat("x", 1<<20), limit: 1024, err: ErrTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(tt.body))
			got, err := ReadBody(rec, req, tt.limit)
			if tt.err == nil {
				if err != nil || string(got) != tt.body {
					t.Fatalf("ReadBody = %q, %v; want %q", got, err, tt.body)
				}
				return
			}
			if got != nil {
				t.Errorf("ReadBody returned %d bytes with an error", len(got))
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("err = %v, want *Error", err)
			}
			if e.Status != http.StatusRequestEntityTooLarge || e.Code != "body_too_large" || !errors.Is(err, ErrTooLarge) {
				t.Fatalf("err = %#v, want 413 body_too_large", e)
			}
			if !strings.Contains(e.Detail, fmt.Sprint(tt.limit)) {
				t.Errorf("detail %q does not name the limit %d", e.Detail, tt.limit)
			}
		})
	}
}

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("connection reset") }

func TestReadBodyReadError(t *testing.T) {
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/", io.NopCloser(failingReader{}))
	_, err := ReadBody(rec, req, 100)
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("err = %v, want ErrInvalid", err)
	}
}

func TestHandle(t *testing.T) {
	var logBuf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logBuf, nil))
	const secret = "db password is hunter2"

	tests := []struct {
		name   string
		err    error
		status int
		code   string
		logged bool
	}{
		{name: "client error", err: ErrInvalid.With("field x is required"), status: http.StatusBadRequest, code: "invalid_request"},
		{name: "custom error", err: E(http.StatusConflict, "conflict", "agent %s exists", "a1"), status: http.StatusConflict, code: "conflict"},
		{name: "wrapped client error", err: fmt.Errorf("ctx: %w", ErrTooLarge), status: http.StatusRequestEntityTooLarge, code: "body_too_large"},
		{name: "plain error", err: errors.New(secret), status: http.StatusInternalServerError, code: "internal", logged: true},
		{name: "wrapped plain error", err: fmt.Errorf("wrap: %w", errors.New(secret)), status: http.StatusInternalServerError, code: "internal", logged: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			logBuf.Reset()
			h := Handle(log, func(w http.ResponseWriter, r *http.Request) error { return tt.err })
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/x", nil))
			e := decodeError(t, rec, tt.status, tt.code)
			if tt.logged {
				if strings.Contains(e.Detail, "hunter2") || strings.Contains(rec.Body.String(), "hunter2") {
					t.Errorf("response %q leaks the internal error", rec.Body.String())
				}
				if !strings.Contains(logBuf.String(), "hunter2") {
					t.Errorf("internal error not logged: %q", logBuf.String())
				}
			} else {
				if want := tt.err.Error(); !strings.HasSuffix(want, e.Detail) {
					t.Errorf("detail = %q, want %q", e.Detail, want)
				}
				if logBuf.Len() != 0 {
					t.Errorf("client error logged: %q", logBuf.String())
				}
			}
		})
	}

	t.Run("nil error writes nothing extra", func(t *testing.T) {
		h := Handle(nil, func(w http.ResponseWriter, r *http.Request) error {
			w.WriteHeader(http.StatusNoContent)
			return nil
		})
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/x", nil))
		if rec.Code != http.StatusNoContent || rec.Body.Len() != 0 {
			t.Fatalf("got %d %q, want 204 and no body", rec.Code, rec.Body.String())
		}
	})

	t.Run("client gone is not an error", func(t *testing.T) {
		logBuf.Reset()
		h := Handle(log, func(w http.ResponseWriter, r *http.Request) error {
			return fmt.Errorf("proposing: %w", r.Context().Err())
		})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/x", nil).WithContext(ctx))
		if strings.Contains(logBuf.String(), "level=ERROR") {
			t.Fatalf("a client hanging up was logged as an error: %q", logBuf.String())
		}
	})

	t.Run("nil logger", func(t *testing.T) {
		h := Handle(nil, func(w http.ResponseWriter, r *http.Request) error { return errors.New(secret) })
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/x", nil))
		decodeError(t, rec, http.StatusInternalServerError, "internal")
	})
}

func TestWriteJSONUnencodable(t *testing.T) {
	rec := httptest.NewRecorder()
	WriteJSON(rec, http.StatusOK, map[string]any{"c": make(chan int)})
	decodeError(t, rec, http.StatusInternalServerError, "internal")
}

func TestRecover(t *testing.T) {
	var logBuf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logBuf, nil))

	h := Recover(log, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		panic("kaboom")
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/p", nil))
	e := decodeError(t, rec, http.StatusInternalServerError, "internal")
	if strings.Contains(e.Detail, "kaboom") {
		t.Errorf("detail %q leaks the panic value", e.Detail)
	}
	if !strings.Contains(logBuf.String(), "kaboom") || !strings.Contains(logBuf.String(), "httpx.TestRecover.func1") {
		t.Errorf("panic not logged with the stack of the handler that panicked: %q", logBuf.String())
	}

	// Without a panic the handler's answer is untouched.
	h = Recover(nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusTeapot)
	}))
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/p", nil))
	if rec.Code != http.StatusTeapot {
		t.Fatalf("status = %d, want 418", rec.Code)
	}

	// A nil logger is fine.
	h = Recover(nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		panic(errors.New("boom"))
	}))
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/p", nil))
	decodeError(t, rec, http.StatusInternalServerError, "internal")
}

func TestRecoverRepanicsAbortHandler(t *testing.T) {
	h := Recover(nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		panic(http.ErrAbortHandler)
	}))
	defer func() {
		if p := recover(); p != http.ErrAbortHandler {
			t.Fatalf("recovered %v, want http.ErrAbortHandler", p)
		}
	}()
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/p", nil))
	t.Fatal("ServeHTTP returned normally")
}

func TestErrorIsAndWith(t *testing.T) {
	specific := ErrNotFound.With("agent %q not found", "a1")
	if specific.Status != ErrNotFound.Status || specific.Code != ErrNotFound.Code {
		t.Fatalf("With = %#v, want status/code of ErrNotFound", specific)
	}
	if specific.Detail != `agent "a1" not found` {
		t.Fatalf("With detail = %q", specific.Detail)
	}
	if specific == ErrNotFound || ErrNotFound.Detail != "no such endpoint" {
		t.Fatal("With modified the sentinel")
	}
	if specific.Error() != specific.Detail {
		t.Fatalf("Error() = %q, want the detail", specific.Error())
	}

	tests := []struct {
		name   string
		err    error
		target error
		want   bool
	}{
		{"same sentinel", ErrNotFound, ErrNotFound, true},
		{"With of sentinel", specific, ErrNotFound, true},
		{"wrapped With", fmt.Errorf("lookup: %w", specific), ErrNotFound, true},
		{"same code other status", E(http.StatusGone, "not_found", "gone"), ErrNotFound, true},
		{"different code", ErrInvalid, ErrNotFound, false},
		{"different code same status", ErrBadJSON, ErrInvalid, false},
		{"plain error target", ErrNotFound, errors.New("no such endpoint"), false},
		{"plain error", errors.New("not_found"), ErrNotFound, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := errors.Is(tt.err, tt.target); got != tt.want {
				t.Fatalf("errors.Is(%v, %v) = %v, want %v", tt.err, tt.target, got, tt.want)
			}
		})
	}
}

func TestAsError(t *testing.T) {
	e, ok := AsError(fmt.Errorf("x: %w", ErrUnavailable))
	if !ok || e != ErrUnavailable {
		t.Fatalf("AsError(wrapped) = %v, %v", e, ok)
	}
	e, ok = AsError(errors.New("secret"))
	if ok || e != ErrInternal {
		t.Fatalf("AsError(plain) = %v, %v; want ErrInternal, false", e, ok)
	}
}

// TestReadBodyTimeout: a client that announces a body and stalls is
// answered 408 once the server's body timeout passes, and its connection
// is not held.
func TestReadBodyTimeout(t *testing.T) {
	srv := httptest.NewUnstartedServer(Handle(nil, func(w http.ResponseWriter, r *http.Request) error {
		_, err := ReadBody(w, r, 1<<10)
		return err
	}))
	srv.Config.BaseContext = func(net.Listener) context.Context {
		return WithBodyTimeout(context.Background(), 200*time.Millisecond)
	}
	srv.Start()
	defer srv.Close()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"a\":")
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a stalled body: %v", err)
	}
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Fatalf("status %d", resp.StatusCode)
	}
}

// TestMuxRecordsItsRoutes: every route registered on a Mux, by Handle or
// HandleFunc, is in Patterns, once, sorted.
func TestMuxRecordsItsRoutes(t *testing.T) {
	m := NewMux()
	m.Handle("POST /b", http.NotFoundHandler())
	m.HandleFunc("GET /a/{id}", func(http.ResponseWriter, *http.Request) {})
	var r Router = m
	r.Handle("DELETE /c", http.NotFoundHandler())
	if got, want := strings.Join(m.Patterns(), ","), "DELETE /c,GET /a/{id},POST /b"; got != want {
		t.Fatalf("patterns %s, want %s", got, want)
	}
}

// TestWriteErrorCause: an upstream failure attached with Because reaches
// the log, its URLs' credentials redacted, and never the answer.
func TestWriteErrorCause(t *testing.T) {
	var log bytes.Buffer
	cause := errors.New(`Post "https://u:pw@rpc.example/?api-key=s3cret": dial tcp 10.0.0.1:443: connection refused`)
	w := httptest.NewRecorder()
	WriteError(slog.New(slog.NewTextHandler(&log, nil)), w, httptest.NewRequest("GET", "/", nil), ErrUnavailable.Because(cause))
	if w.Code != 503 || strings.TrimSpace(w.Body.String()) != `{"code":"unavailable","detail":"service unavailable"}` {
		t.Fatalf("answer: %d %s", w.Code, w.Body)
	}
	if l := log.String(); strings.Contains(l, "s3cret") || strings.Contains(l, "pw") || !strings.Contains(l, "10.0.0.1:443") {
		t.Fatalf("log: %s", l)
	}
	if e := ErrUnavailable.Because(cause).With("other detail"); e.Cause() != cause || strings.Contains(e.Error(), "s3cret") {
		t.Fatalf("With lost the cause, or Error() is unredacted: %v", e)
	}
}
