package pages

import (
	"bytes"
	"compress/gzip"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"testing"
)

// maxPeerGzip bounds the page's peer (peer.js) as a browser fetches it,
// gzipped: what a phone downloads when its visitor joins.
const maxPeerGzip = 250_000

// TestPeerBundleServedGzipped: the bundle the node embeds goes to a
// browser gzipped, within maxPeerGzip, and as it is to a client that
// takes no gzip. (.ci/run checks that it is what its sources build.)
func TestPeerBundleServedGzipped(t *testing.T) {
	raw, err := fs.ReadFile(staticFS, "peer.js")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /assets/wall/{file}", serveStatic)
	get := func(enc string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("GET", "/assets/wall/peer.js", nil)
		if enc != "" {
			req.Header.Set("Accept-Encoding", enc)
		}
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		return rec
	}
	rec := get("gzip, deflate, br")
	if rec.Code != 200 || rec.Header().Get("Content-Encoding") != "gzip" || rec.Header().Get("Content-Type") != "text/javascript; charset=utf-8" {
		t.Fatalf("%d %v", rec.Code, rec.Header())
	}
	t.Logf("peer.js: %d bytes, %d gzipped", len(raw), rec.Body.Len())
	if rec.Body.Len() > maxPeerGzip {
		t.Fatalf("peer.js is %d bytes gzipped, over %d", rec.Body.Len(), maxPeerGzip)
	}
	zr, err := gzip.NewReader(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(zr); err != nil || !bytes.Equal(b, raw) {
		t.Fatalf("the gzipped bundle does not open to the bundle: %v", err)
	}
	if rec := get(""); rec.Header().Get("Content-Encoding") != "" || !bytes.Equal(rec.Body.Bytes(), raw) {
		t.Fatalf("without gzip: %v, %d bytes", rec.Header(), rec.Body.Len())
	}
}
