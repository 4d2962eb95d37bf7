package httpx

import (
	"bytes"
	"html/template"
	"log/slog"
	"net/http"
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
