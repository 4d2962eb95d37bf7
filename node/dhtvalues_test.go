package node

import (
	"testing"

	dstest "github.com/ipfs/go-datastore/test"
)

// TestDiskValuesDatastore: the store of DHT values answers as go-datastore
// asks of any datastore (its own suite: gets, prefixes, queries with
// orders, filters, limits and sizes, batches), queries reading it a page
// at a time.
func TestDiskValuesDatastore(t *testing.T) {
	t.Parallel()
	db, err := openDHTValues(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	dstest.SubtestAll(t, diskValues{db})
}
