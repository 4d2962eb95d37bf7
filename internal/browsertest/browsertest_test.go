package browsertest

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
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

// TestUntilLoadedLoadsAgain: a page without script that changes on its
// third load is waited for by loading it again.
func TestUntilLoadedLoadsAgain(t *testing.T) {
	var mu sync.Mutex
	loads := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		mu.Lock()
		loads++
		n := loads
		mu.Unlock()
		fmt.Fprintf(w, `<!doctype html><p id="p">load %d</p>`, n)
	}))
	defer srv.Close()
	tab := Tab(t, 30*time.Second)
	UntilLoaded(t, tab, srv.URL, `document.getElementById("p").textContent === "load 3"`, "the third load")
}
