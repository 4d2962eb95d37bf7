package registryapi

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
)

// BenchmarkGetAgent measures GET /v1/agents/<id> through the real handler.
func BenchmarkGetAgent(b *testing.B) {
	h := newHarness(b)
	for i := range 1000 {
		h.registerPlain(fmt.Sprintf("agent-%d", i))
	}
	handler := h.srv.Config.Handler
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			rec := httptest.NewRecorder()
			handler.ServeHTTP(rec, httptest.NewRequest("GET", fmt.Sprintf("/v1/agents/agent-%d", i%1000), nil))
			if rec.Code != 200 {
				b.Fatalf("status %d", rec.Code)
			}
			i++
		}
	})
}

// BenchmarkRegister measures POST /v1/agents/register (new ids) through
// the real handler, with the in-memory store.
func BenchmarkRegister(b *testing.B) {
	h := newHarness(b)
	handler := h.srv.Config.Handler
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		body := fmt.Sprintf(`{"agent_id":"bench-%d","capabilities":["echo","search"],"endpoint":"https://a.example"}`, i)
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/agents/register", strings.NewReader(body)))
		if rec.Code != 201 {
			b.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
		i++
	}
}
