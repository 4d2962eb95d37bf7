package httpx

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/agentmesh/mesh/internal/redact"
)

// HandlerFunc is an HTTP handler that returns an error instead of writing it.
type HandlerFunc func(w http.ResponseWriter, r *http.Request) error

// Handle adapts h to http.Handler: a returned *Error is written as JSON with
// its status; any other error is logged and answered with a bare 500.
func Handle(log *slog.Logger, h HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			WriteError(log, w, r, err)
		}
	})
}

// WriteError writes err as {"detail","code"} with its status. A request
// whose client went away is not an internal error: nobody reads the answer,
// and a client must not be able to fill the log at error level by hanging up.
func WriteError(log *slog.Logger, w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		if log != nil {
			log.Debug("client went away", "method", r.Method, "path", r.URL.Path)
		}
		return
	}
	e, ok := AsError(err)
	switch {
	case log == nil:
	case !ok:
		log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", redact.Error(err))
	case e.cause != nil:
		log.Warn("request failed upstream", "method", r.Method, "path", r.URL.Path, "code", e.Code, "err", redact.Error(e.cause))
	}
	if e.RetryAfter > 0 {
		RetryAfter(w, e.RetryAfter)
	}
	WriteJSON(w, e.Status, e)
}

// WriteJSON writes v as a JSON response with the given status. Nothing is
// escaped for HTML: answers are JSON, never embedded in a page (nosniff),
// and URLs such as ws addresses read as they are ("&", not "\u0026").
func WriteJSON(w http.ResponseWriter, status int, v any) {
	buf := jsonBuffers.Get().(*bytes.Buffer)
	defer putJSONBuffer(buf)
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		status = http.StatusInternalServerError
		buf.Reset()
		buf.WriteString(`{"detail":"internal error","code":"internal"}` + "\n")
	}
	h := w.Header()
	h["Content-Type"], h["X-Content-Type-Options"] = jsonContentType, noSniff
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

// The header values of every JSON answer, shared: net/http only reads them.
var (
	jsonContentType = []string{"application/json"}
	noSniff         = []string{"nosniff"}
)

// jsonBuffers hold answers being encoded, so that a read of the registry
// does not grow a new buffer each time.
var jsonBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// putJSONBuffer returns buf to the pool, unless an answer made it large.
func putJSONBuffer(buf *bytes.Buffer) {
	if buf.Cap() <= 64<<10 {
		buf.Reset()
		jsonBuffers.Put(buf)
	}
}

// DefaultBodyTimeout bounds how long a client may take to send a request
// body, so that a client that stalls mid-body does not hold a connection
// open; a server bounds its own clients by another (WithBodyTimeout).
const DefaultBodyTimeout = 30 * time.Second

type bodyTimeoutKey struct{}

// WithBodyTimeout returns ctx carrying d as the bound ReadBody puts on the
// bodies of requests served under it: the BaseContext of a server whose
// operator chose another than DefaultBodyTimeout. d <= 0 keeps the default.
func WithBodyTimeout(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, bodyTimeoutKey{}, d)
}

// BodyTimeout is the bound on the bodies of requests served under ctx.
func BodyTimeout(ctx context.Context) time.Duration {
	if d, _ := ctx.Value(bodyTimeoutKey{}).(time.Duration); d > 0 {
		return d
	}
	return DefaultBodyTimeout
}

// ReadBody reads the whole request body, refusing more than limit bytes
// and a client that takes longer than its BodyTimeout.
func ReadBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	rc := http.NewResponseController(w)
	timeout := BodyTimeout(r.Context())
	deadline := rc.SetReadDeadline(time.Now().Add(timeout)) == nil
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err == nil && deadline {
		// Lift it again for the rest of the exchange; after a failure it
		// stays, so the server's drain of an unread body cannot hang.
		rc.SetReadDeadline(time.Time{})
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return nil, ErrBodyTimeout.With("the request body did not arrive within %s", timeout)
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return nil, ErrTooLarge.With("request body exceeds %d bytes", limit)
	}
	if err != nil {
		return nil, ErrInvalid.With("the request body could not be read") // the connection failed: nothing for the log
	}
	return body, nil
}

// DecodeJSON decodes body, a single JSON object, into v. Unknown fields are
// ignored (clients of the old service send extras); wrong types, trailing
// data and empty bodies get a 400 naming the problem.
func DecodeJSON(body []byte, v any) error {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return ErrBadJSON.With("request body is empty; a JSON object is required")
	}
	if trimmed[0] != '{' {
		if kind := jsonKindOf(trimmed[0]); kind != "" && json.Valid(trimmed) {
			return ErrBadJSON.With("request body must be a JSON object, not %s", kind)
		}
		return ErrBadJSON.With("request body is not JSON; a JSON object is required")
	}
	if !ValidText(body) {
		return ErrBadJSON.With("request body is not valid UTF-8 text; invalid bytes or lone surrogate escapes are refused, not replaced")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return ErrBadJSON.With("request body has data after the JSON object")
	}
	return nil
}

// ValidText reports whether JSON text b is valid UTF-8 and holds no
// escaped lone surrogate (a "\ud800" not followed by its low half).
// encoding/json silently turns both into U+FFFD, so a name or capability
// would be stored other than sent: callers refuse such text instead.
func ValidText(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' || i+1 >= len(b) {
			continue
		}
		if b[i+1] != 'u' {
			i++ // skip the escaped character, which may be a backslash
			continue
		}
		r, ok := hex4(b, i+2)
		switch {
		case !ok || !utf16.IsSurrogate(r):
		case r >= 0xdc00:
			return false // a low half with no high half before it
		default:
			lo, ok := hex4(b, i+8)
			if !ok || b[i+6] != '\\' || b[i+7] != 'u' || lo < 0xdc00 || lo > 0xdfff {
				return false
			}
			i += 6
		}
		i += 5
	}
	return true
}

// hex4 reads four hex digits at b[i:].
func hex4(b []byte, i int) (rune, bool) {
	if i < 0 || i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

func jsonError(err error) error {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		if te.Field == "" {
			return ErrBadJSON.With("request body must be a JSON object, not %s", te.Value)
		}
		return ErrBadJSON.With("field %q must be %s, not %s", te.Field, jsonType(te.Type.Kind().String()), te.Value)
	case errors.As(err, &se):
		return ErrBadJSON.With("malformed JSON at byte %d: %v", se.Offset, se)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return ErrBadJSON.With("request body is truncated JSON")
	default:
		return ErrBadJSON.With("malformed JSON: %v", err)
	}
}

// jsonKindOf names the JSON value that starts with byte c.
func jsonKindOf(c byte) string {
	switch {
	case c == '[':
		return "an array"
	case c == '"':
		return "a string"
	case c == 'n':
		return "null"
	case c == 't' || c == 'f':
		return "a boolean"
	case c == '-' || c >= '0' && c <= '9':
		return "a number"
	}
	return ""
}

func jsonType(kind string) string {
	switch {
	case kind == "slice" || kind == "array":
		return "an array"
	case kind == "struct" || kind == "map":
		return "an object"
	case kind == "bool":
		return "a boolean"
	case kind == "string":
		return "a string"
	case strings.HasPrefix(kind, "int") || strings.HasPrefix(kind, "uint"):
		return "an integer"
	case strings.HasPrefix(kind, "float"):
		return "a number"
	}
	return kind
}

// Recover turns a panic in next into a 500, logged with the panic's stack,
// so that no request can take the node down.
func Recover(log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				if log != nil {
					log.Error("handler panic", "method", r.Method, "path", r.URL.Path, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
				}
				WriteJSON(w, http.StatusInternalServerError, ErrInternal)
			}
		}()
		next.ServeHTTP(w, r)
	})
}
