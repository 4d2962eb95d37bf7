package node

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ipfs/go-datastore"
	dsq "github.com/ipfs/go-datastore/query"
	dstest "github.com/ipfs/go-datastore/test"

	"github.com/agentmesh/mesh/registryapi"
)

// TestDiskValuesDatastore: the store of DHT values answers as go-datastore
// asks of any datastore (its own suite: gets, prefixes, queries with
// orders, filters, limits and sizes, batches), queries reading it a page
// at a time. The suite's queries run over 4 sets of suiteElems keys
// (under the root, /prefix, /prefix/sub and /capital): more than a page
// under the root and under /prefix, which is all the paging asks, in a
// quarter of the time of the suite's default 100 (37 s alone).
func TestDiskValuesDatastore(t *testing.T) {
	t.Parallel()
	db, err := openDHTValues(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	dstest.ElemCount = min(dstest.ElemCount, suiteElems) // only this test runs the suite (20 under -race)
	dstest.SubtestAll(t, diskValues{db})
}

// suiteElems: 2*suiteElems keys under /prefix fill more than one
// queryPage.
const suiteElems = queryPage/2 + 8

// TestDHTValuesOnDisk: a node with a data directory keeps the DHT values
// it holds in DATA/dht, closed with the node (the store opens again), and
// a node whose DATA/dht cannot be opened says which directory it is and
// that deleting it loses nothing.
func TestDHTValuesOnDisk(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	n := startNode(t, testConfig(t, dir))
	registerWithCards(t, n, "kept", 1, 8<<10)
	waitPuts(t, n, 2)
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := openDHTValues(dir, nil)
	if err != nil {
		t.Fatalf("DATA/dht after the node closed: %v", err)
	}
	for _, ns := range []string{registryapi.RecordNS, registryapi.IDIndexNS} {
		res, err := diskValues{db}.Query(t.Context(), dsq.Query{Prefix: "/" + ns, KeysOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		if keys, err := res.Rest(); err != nil || len(keys) != 1 {
			t.Fatalf("%s in DATA/dht: %d keys, %v", ns, len(keys), err)
		}
	}
	db.Close()

	manifest := filepath.Join(dir, "dht", "MANIFEST")
	if err := os.WriteFile(manifest, []byte("not a manifest"), 0o600); err != nil {
		t.Fatal(err)
	}
	broken, err := New(testConfig(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	defer broken.Close()
	err = broken.Start(t.Context())
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "dht")+" may be deleted") {
		t.Fatalf("a node whose DATA/dht is corrupt: %v", err)
	}
}

// TestDiskValuesBatchIsAtomic: a batch of DHT values lands whole or not at
// all: a batch whose last write Badger refuses (a key over its 65,000
// bytes) leaves the writes before it unwritten too.
func TestDiskValuesBatchIsAtomic(t *testing.T) {
	t.Parallel()
	db, err := openDHTValues(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	v := diskValues{db}
	b, err := v.Batch(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	b.Put(t.Context(), datastore.NewKey("/first"), []byte("value"))
	b.Put(t.Context(), datastore.NewKey("/"+strings.Repeat("k", 70_000)), []byte("value"))
	if err := b.Commit(t.Context()); err == nil {
		t.Fatal("a batch with a key Badger refuses was committed")
	}
	if has, err := v.Has(t.Context(), datastore.NewKey("/first")); has || err != nil {
		t.Fatalf("the write before the refused one: held %v, %v", has, err)
	}
}
