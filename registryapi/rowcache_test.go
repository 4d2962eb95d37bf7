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
		c.fill(c.gen.Load(), &cachedAgent{a: &Agent{ID: fmt.Sprint(i), FullCard: card}})
		if c.bytes > maxCachedBytes {
			t.Fatalf("after %d rows the cache holds %d bytes", i+1, c.bytes)
		}
	}
	var sum int64
	held := 0
	for i := range c.shards {
		for _, e := range c.shards[i].rows {
			sum += rowCost(e.a)
			held++
		}
	}
	if sum != c.bytes || held != c.n || held < maxCachedBytes/len(card)/2 {
		t.Fatalf("%d rows (%d counted), %d bytes counted, %d held", held, c.n, c.bytes, sum)
	}
	c.drop([]string{"0", "1"})
	c.fill(c.gen.Load()-1, &cachedAgent{a: &Agent{ID: "stale"}})
	if _, ok := c.get("stale"); ok {
		t.Fatal("a row read before a commit was kept")
	}
}
