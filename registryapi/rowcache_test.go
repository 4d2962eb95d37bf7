package registryapi

import (
	"bytes"
	"fmt"
	"testing"
)

// TestRowCacheBoundedInBytes: large rows fill the read cache up to its
// bound in bytes, not its bound in rows, and rows are kept without their
// full card, whose texts they keep.
func TestRowCacheBoundedInBytes(t *testing.T) {
	const maxBytes, rest = 4 << 20, 60 << 10
	c := newRowCache(maxBytes)
	card := []byte(`{"name":"Big","description":"` + string(bytes.Repeat([]byte("x"), 60<<10)) + `"}`)
	for i := range 2 * maxBytes / rest {
		c.fill(c.gen.Load(), cachedOf(&Agent{ID: fmt.Sprint(i), FullCard: card}, rest))
		if c.bytes > maxBytes {
			t.Fatalf("after %d rows the cache holds %d bytes", i+1, c.bytes)
		}
	}
	var sum int64
	held := 0
	for i := range c.shards {
		for _, s := range c.shards[i].rows.slots {
			e := s.e
			if s.hash == 0 {
				continue
			}
			if e.a.FullCard != nil || !e.card || e.name != "Big" {
				t.Fatalf("row %s kept as %+v", e.a.ID, e)
			}
			sum += e.cost
			held++
		}
	}
	if sum != c.bytes || held != c.n || held < maxBytes/(2*rest+len(card))/2 {
		t.Fatalf("%d rows (%d counted), %d bytes counted, %d held", held, c.n, c.bytes, sum)
	}
	c.drop([]string{"0", "1"})
	c.fill(c.gen.Load()-1, cachedOf(&Agent{ID: "stale"}, 0))
	if _, ok := c.get("stale"); ok {
		t.Fatal("a row read before a commit was kept")
	}
}
