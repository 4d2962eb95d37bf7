package registryapi

import (
	"bytes"
	"fmt"
	"testing"
)

// TestRowCacheBoundedInBytes: rows with large cards fill the read cache
// up to its bound in bytes, not its bound in rows.
func TestRowCacheBoundedInBytes(t *testing.T) {
	c := newRowCache()
	card := bytes.Repeat([]byte("x"), 60<<10)
	for i := range 2 * maxCachedBytes / len(card) {
		c.fill(c.gen.Load(), &Agent{ID: fmt.Sprint(i), FullCard: card})
		if c.bytes > maxCachedBytes {
			t.Fatalf("after %d rows the cache holds %d bytes", i+1, c.bytes)
		}
	}
	var sum int64
	for _, a := range c.rows {
		sum += rowCost(a)
	}
	if sum != c.bytes || len(c.rows) < maxCachedBytes/len(card)/2 {
		t.Fatalf("%d rows, %d bytes counted, %d held", len(c.rows), c.bytes, sum)
	}
	c.drop([]string{"0", "1"})
	c.fill(c.gen.Load()-1, &Agent{ID: "stale"})
	if _, ok := c.get("stale"); ok {
		t.Fatal("a row read before a commit was kept")
	}
}
