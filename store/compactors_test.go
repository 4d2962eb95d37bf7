package store

import "testing"

// A store runs two compaction workers, not Badger's four: each wakes 20
// times a second, work or not, and they were most of what an idle node
// spent.
func TestAStoreRunsTwoCompactors(t *testing.T) {
	for _, o := range []Options{{Dir: t.TempDir()}, {InMemory: true}} {
		db, err := Open(o)
		if err != nil {
			t.Fatal(err)
		}
		if n := db.bdb.Opts().NumCompactors; n != 2 {
			t.Errorf("the store (in memory: %v) runs %d compaction workers, want 2", o.InMemory, n)
		}
		set(t, db, map[string]string{"k": "v"}) // and it works
		if v, err := get(t, db, "k"); err != nil || string(v) != "v" {
			t.Errorf("get: %q, %v", v, err)
		}
		db.Close()
	}
}
