package httpx

import (
	"net/http"
	"testing"
)

func TestWantsJSON(t *testing.T) {
	for accept, want := range map[string]bool{
		"":                               false,
		"*/*":                            false,
		"application/json":               true,
		"application/*":                  true,
		"application/*, text/html;q=0.9": true,
		"application/ld+json;q=0.9, text/html;q=0.5":                      true,
		"text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8": false,
		"application/json;q=0.5, text/html":                               false,
		"application/json, text/html":                                     false,
		"application/json;q=0, */*":                                       false,
		"text/plain, application/json;q=0.2":                              true,
		"garbage;;;, application/json":                                    true,
		"application/json;q=nonsense":                                     true,
	} {
		r, _ := http.NewRequest("GET", "/", nil)
		r.Header.Set("Accept", accept)
		if got := WantsJSON(r); got != want {
			t.Errorf("Accept %q: JSON %v, want %v", accept, got, want)
		}
	}
}
