package p2p

import (
	"bytes"
	"context"
	"testing"

	"github.com/ipfs/go-datastore"
	dsq "github.com/ipfs/go-datastore/query"
	dssync "github.com/ipfs/go-datastore/sync"
	dstest "github.com/ipfs/go-datastore/test"
)

// TestCompressedValues: values come back as put, by Get and by Query,
// while the store holds them compressed.
func TestCompressedValues(t *testing.T) {
	ctx := context.Background()
	inner := dssync.MutexWrap(datastore.NewMapDatastore())
	c := compressedValues{inner}
	value := bytes.Repeat([]byte(`{"name":"echo","description":"says it again"}`), 500)
	for _, k := range []string{"/mesh-agent/a", "/mesh-aid/a", "/other/b"} {
		if err := c.Put(ctx, datastore.NewKey(k), value); err != nil {
			t.Fatal(err)
		}
	}
	key := datastore.NewKey("/mesh-agent/a")
	if got, err := c.Get(ctx, key); err != nil || !bytes.Equal(got, value) {
		t.Fatalf("get: %d bytes, %v", len(got), err)
	}
	if n, err := c.GetSize(ctx, key); err != nil || n != len(value) {
		t.Fatalf("size: %d, %v", n, err)
	}
	if stored, _ := inner.Get(ctx, key); len(stored) >= len(value)/10 {
		t.Fatalf("stored %d bytes of %d", len(stored), len(value))
	}
	res, err := c.Query(ctx, dsq.Query{Prefix: "/mesh-agent"})
	if err != nil {
		t.Fatal(err)
	}
	entries, _ := res.Rest()
	if len(entries) != 1 || entries[0].Key != "/mesh-agent/a" || !bytes.Equal(entries[0].Value, value) {
		t.Fatalf("query: %d entries", len(entries))
	}
	b, _ := c.Batch(ctx)
	b.Put(ctx, datastore.NewKey("/batch/x"), value)
	b.Commit(ctx)
	if got, err := c.Get(ctx, datastore.NewKey("/batch/x")); err != nil || !bytes.Equal(got, value) {
		t.Fatalf("a batch's value: %d bytes, %v", len(got), err)
	}
}

// TestCompressedValuesDatastore: compressed values answer as go-datastore
// asks of any datastore (its own suite), queries decompressing a value
// at a time.
func TestCompressedValuesDatastore(t *testing.T) {
	dstest.SubtestAll(t, compressedValues{dssync.MutexWrap(datastore.NewMapDatastore())})
}
