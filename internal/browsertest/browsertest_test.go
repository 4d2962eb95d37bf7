package browsertest

import (
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

// TestTabRunsThePageScript: two tabs of the one browser load a page whose
// script changes it a moment later; Until waits for the change in each.
func TestTabRunsThePageScript(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`<!doctype html><p id="p">before</p><script src="/later.js"></script>`))
	})
	mux.HandleFunc("GET /later.js", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/javascript")
		w.Write([]byte(`setTimeout(() => { document.getElementById("p").textContent = "after"; }, 200);`))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for range 2 {
		tab := Tab(t, 30*time.Second)
		if err := chromedp.Do(tab, chromedp.Navigate(srv.URL)); err != nil {
			t.Fatal(err)
		}
		Until(t, tab, `document.getElementById("p").textContent === "after"`, "the script's change")
	}
}
