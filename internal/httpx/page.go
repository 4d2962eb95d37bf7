package httpx

import (
	"bytes"
	"html/template"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"strings"
)

// RenderPage sends template name of t, executed with data, as an HTML page
// with status, under the Content-Security-Policy csp, never sniffed, sending
// no referrer and revalidated before reuse. A template that fails is
// logged and answers a plain 500: nothing half-rendered goes out.
func RenderPage(log *slog.Logger, w http.ResponseWriter, status int, csp string, t *template.Template, name string, data any) {
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, name, data); err != nil {
		if log != nil {
			log.Error("page template failed", "template", name, "err", err)
		}
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

// WantsJSON reports whether r's Accept header ranks JSON above HTML (by
// q): application/json, a +json type or application/* above text/html or
// application/xhtml+xml. A browser (text/html first), */* and no header
// get the page.
func WantsJSON(r *http.Request) bool {
	var jsonQ, htmlQ float64
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		q := 1.0
		if s, ok := params["q"]; ok {
			if f, err := strconv.ParseFloat(s, 64); err == nil {
				q = f
			}
		}
		switch {
		case mt == "application/json" || mt == "application/*" || strings.HasSuffix(mt, "+json"):
			jsonQ = max(jsonQ, q)
		case mt == "text/html" || mt == "application/xhtml+xml":
			htmlQ = max(htmlQ, q)
		}
	}
	return jsonQ > 0 && jsonQ > htmlQ
}
