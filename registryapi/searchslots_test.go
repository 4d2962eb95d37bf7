package registryapi

import (
	"context"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentmesh/mesh/internal/storetest"
)

// TestSearchSlotsNewestFirst: past the bound a search waits; a freed slot
// goes to the newest waiting, and one that waited past the wait is
// refused with ErrSearchBusy.
func TestSearchSlotsNewestFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSearchSlots(1, time.Second)
		ctx := context.Background()
		if err := s.acquire(ctx); err != nil {
			t.Fatal(err)
		}
		got := make(chan string, 2)
		for _, name := range []string{"older", "newer"} {
			go func() {
				if err := s.acquire(ctx); err != nil {
					got <- name + ": " + err.Error()
					return
				}
				got <- name
			}()
			synctest.Wait()
		}
		time.Sleep(500 * time.Millisecond)
		s.release()
		if first := <-got; first != "newer" {
			t.Fatalf("the freed slot went to %s", first)
		}
		if second := <-got; second != "older: "+ErrSearchBusy.Error() {
			t.Fatalf("the older search: %s", second)
		}
		s.release()
		if err := s.acquire(ctx); err != nil || s.busy != 1 {
			t.Fatalf("a free slot: %v, %d busy", err, s.busy)
		}
	})
}

// TestSearchBusyPastTheNodeBound: while the node ranks as many searches
// as it may, another waits, then is refused with 503 search_busy and a
// Retry-After; once a slot frees, searches are answered again.
func TestSearchBusyPastTheNodeBound(t *testing.T) {
	h := newHarnessOn(t, storetest.DB(t), func(c *Config) { c.SearchConcurrency, c.SearchWait = 2, 20*time.Millisecond })
	h.registerPlain("echo-1")
	for range 2 {
		if err := h.api.slots.acquire(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	r := h.want(h.do("POST", "/v1/search", `{"query":"echo"}`), 503, "search_busy")
	if wait, _ := strconv.Atoi(r.hdr.Get("Retry-After")); wait < 1 {
		t.Fatalf("Retry-After %q", r.hdr.Get("Retry-After"))
	}
	h.api.slots.release()
	if r := h.want(h.do("POST", "/v1/search", `{"query":"echo"}`), 200, ""); len(r.body["results"].([]any)) != 1 {
		t.Fatalf("search: %s", r.raw)
	}
}
