package store

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/agentmesh/mesh/internal/testkit"
)

func openMem(t *testing.T) *DB {
	t.Helper()
	db, err := Open(Options{InMemory: true})
	if err != nil {
		t.Fatalf("Open in-memory: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func set(t *testing.T, db *DB, kv map[string]string) {
	t.Helper()
	err := db.Update(func(tx *Txn) error {
		for k, v := range kv {
			if err := tx.Set([]byte(k), []byte(v)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
}

func get(t *testing.T, db *DB, key string) ([]byte, error) {
	t.Helper()
	var val []byte
	err := db.View(func(tx *Txn) error {
		var err error
		val, err = tx.Get([]byte(key))
		return err
	})
	return val, err
}

func TestGetMissing(t *testing.T) {
	db := openMem(t)
	if _, err := get(t, db, "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get missing: err = %v, want ErrNotFound", err)
	}
	err := db.View(func(tx *Txn) error {
		var v struct{}
		return tx.GetJSON([]byte("nope"), &v)
	})
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("GetJSON missing: err = %v, want ErrNotFound", err)
	}
	err = db.View(func(tx *Txn) error {
		ok, err := tx.Has([]byte("nope"))
		if err != nil {
			return err
		}
		if ok {
			return errors.New("Has(missing) = true")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestSetGetHasDelete(t *testing.T) {
	db := openMem(t)
	key := []byte("k")
	set(t, db, map[string]string{"k": "v1"})

	got, err := get(t, db, "k")
	if err != nil || string(got) != "v1" {
		t.Fatalf("Get = %q, %v; want v1", got, err)
	}

	// Overwrite, and check the value is visible inside the same txn.
	err = db.Update(func(tx *Txn) error {
		if err := tx.Set(key, []byte("v2")); err != nil {
			return err
		}
		v, err := tx.Get(key)
		if err != nil {
			return err
		}
		if string(v) != "v2" {
			return fmt.Errorf("Get in txn = %q, want v2", v)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	err = db.View(func(tx *Txn) error {
		ok, err := tx.Has(key)
		if err != nil || !ok {
			return fmt.Errorf("Has = %v, %v; want true", ok, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	if err := db.Update(func(tx *Txn) error { return tx.Delete(key) }); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := get(t, db, "k"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get after Delete: err = %v, want ErrNotFound", err)
	}
	err = db.View(func(tx *Txn) error {
		ok, err := tx.Has(key)
		if err != nil || ok {
			return fmt.Errorf("Has after Delete = %v, %v; want false", ok, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestGetReturnsCopy(t *testing.T) {
	db := openMem(t)
	set(t, db, map[string]string{"k": "value"})
	got, err := get(t, db, "k")
	if err != nil {
		t.Fatal(err)
	}
	got[0] = 'X'
	again, err := get(t, db, "k")
	if err != nil || string(again) != "value" {
		t.Fatalf("Get after mutating a previous result = %q, %v; want value", again, err)
	}
}

func TestFailedUpdateDoesNotCommit(t *testing.T) {
	db := openMem(t)
	boom := errors.New("boom")
	err := db.Update(func(tx *Txn) error {
		if err := tx.Set([]byte("k"), []byte("v")); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Update err = %v, want boom", err)
	}
	if _, err := get(t, db, "k"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get after failed Update: err = %v, want ErrNotFound", err)
	}
}

func TestJSONRoundTrip(t *testing.T) {
	type rec struct {
		Name string            `json:"name"`
		N    int               `json:"n"`
		Tags []string          `json:"tags"`
		M    map[string]uint64 `json:"m"`
	}
	db := openMem(t)
	in := rec{Name: "agent", N: 42, Tags: []string{"a", "b"}, M: map[string]uint64{"x": 1 << 40}}
	key := Key("rec", "1")
	if err := db.Update(func(tx *Txn) error { return tx.SetJSON(key, in) }); err != nil {
		t.Fatalf("SetJSON: %v", err)
	}

	var out rec
	if err := db.View(func(tx *Txn) error { return tx.GetJSON(key, &out) }); err != nil {
		t.Fatalf("GetJSON: %v", err)
	}
	if out.Name != in.Name || out.N != in.N || !slices.Equal(out.Tags, in.Tags) || out.M["x"] != in.M["x"] {
		t.Fatalf("GetJSON = %+v, want %+v", out, in)
	}

	// The stored bytes are plain JSON.
	raw, err := get(t, db, string(key))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(raw, []byte(`{"name":"agent"`)) {
		t.Fatalf("raw value = %s, want JSON", raw)
	}

	// SetJSON of an unencodable value fails and writes nothing.
	bad := Key("bad")
	err = db.Update(func(tx *Txn) error { return tx.SetJSON(bad, make(chan int)) })
	if err == nil {
		t.Fatal("SetJSON(chan) succeeded")
	}
	if _, err := get(t, db, string(bad)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get after failed SetJSON: err = %v, want ErrNotFound", err)
	}

	// GetJSON of a non-JSON value reports the decode error.
	set(t, db, map[string]string{"notjson": "{"})
	err = db.View(func(tx *Txn) error { return tx.GetJSON([]byte("notjson"), &out) })
	if err == nil || errors.Is(err, ErrNotFound) {
		t.Fatalf("GetJSON(invalid) err = %v, want a decode error", err)
	}
}

func TestScan(t *testing.T) {
	db := openMem(t)
	set(t, db, map[string]string{
		"a/1":  "x",
		"b/1":  "b1",
		"b/3":  "b3",
		"b/2":  "b2",
		"b/10": "b10",
		"b":    "no-slash",
		"bb/1": "other",
		"c/1":  "y",
	})

	type kv struct{ k, v string }
	scan := func(prefix, start []byte, limit int) []kv {
		t.Helper()
		var got []kv
		err := db.View(func(tx *Txn) error {
			return tx.Scan(prefix, start, func(k, v []byte) (bool, error) {
				got = append(got, kv{string(k), string(v)})
				return limit <= 0 || len(got) < limit, nil
			})
		})
		if err != nil {
			t.Fatalf("Scan(%q, %q): %v", prefix, start, err)
		}
		return got
	}

	tests := []struct {
		name          string
		prefix, start string
		nilStart      bool
		limit         int
		want          []kv
	}{
		{
			name: "all with prefix", prefix: "b/", nilStart: true,
			want: []kv{{"b/1", "b1"}, {"b/10", "b10"}, {"b/2", "b2"}, {"b/3", "b3"}},
		},
		{
			name: "start inside range", prefix: "b/", start: "b/2",
			want: []kv{{"b/2", "b2"}, {"b/3", "b3"}},
		},
		{
			name: "start between keys", prefix: "b/", start: "b/11",
			want: []kv{{"b/2", "b2"}, {"b/3", "b3"}},
		},
		{
			name: "start past range", prefix: "b/", start: "b/4",
			want: nil,
		},
		{
			name: "start before prefix", prefix: "b/", start: "a",
			want: []kv{{"b/1", "b1"}, {"b/10", "b10"}, {"b/2", "b2"}, {"b/3", "b3"}},
		},
		{
			name: "stop early", prefix: "b/", nilStart: true, limit: 2,
			want: []kv{{"b/1", "b1"}, {"b/10", "b10"}},
		},
		{
			name: "stop after one", prefix: "b/", start: "b/3", limit: 1,
			want: []kv{{"b/3", "b3"}},
		},
		{
			name: "no match", prefix: "z/", nilStart: true,
			want: nil,
		},
		{
			name: "bare prefix includes siblings", prefix: "b", nilStart: true,
			want: []kv{{"b", "no-slash"}, {"b/1", "b1"}, {"b/10", "b10"}, {"b/2", "b2"}, {"b/3", "b3"}, {"bb/1", "other"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var start []byte
			if !tt.nilStart {
				start = []byte(tt.start)
			}
			got := scan([]byte(tt.prefix), start, tt.limit)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("Scan = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestScanError(t *testing.T) {
	db := openMem(t)
	set(t, db, map[string]string{"p/1": "1", "p/2": "2", "p/3": "3"})
	boom := errors.New("boom")
	calls := 0
	err := db.View(func(tx *Txn) error {
		return tx.Scan([]byte("p/"), nil, func(k, v []byte) (bool, error) {
			calls++
			if string(k) == "p/2" {
				return true, boom
			}
			return true, nil
		})
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Scan err = %v, want boom", err)
	}
	if calls != 2 {
		t.Fatalf("fn called %d times, want 2 (stop at the error)", calls)
	}
}

func TestU64(t *testing.T) {
	for _, n := range []uint64{0, 1, 255, 256, 65535, 1 << 32, 1 << 40, 1<<64 - 1} {
		s := U64(n)
		if len(s) != 8 {
			t.Errorf("len(U64(%d)) = %d, want 8", n, len(s))
		}
		got, ok := ParseU64(s)
		if !ok || got != n {
			t.Errorf("ParseU64(U64(%d)) = %d, %v", n, got, ok)
		}
	}

	for _, s := range []string{"", "1234567", "123456789", "255"} {
		if _, ok := ParseU64(s); ok {
			t.Errorf("ParseU64(%q) ok, want !ok", s)
		}
	}

	// Byte order is numeric order.
	nums := []uint64{0, 1, 255, 256, 1 << 40, 1<<64 - 1}
	for i := 1; i < len(nums); i++ {
		a, b := U64(nums[i-1]), U64(nums[i])
		if a >= b {
			t.Errorf("U64(%d) >= U64(%d) in byte order", nums[i-1], nums[i])
		}
		ka, kb := Key("seq", a), Key("seq", b)
		if bytes.Compare(ka, kb) >= 0 {
			t.Errorf("Key(seq, U64(%d)) >= Key(seq, U64(%d))", nums[i-1], nums[i])
		}
	}
}

func TestU64KeysScanNumerically(t *testing.T) {
	db := openMem(t)
	want := []uint64{3, 255, 256, 1000, 1 << 40}
	err := db.Update(func(tx *Txn) error {
		// Insert in reverse to make sure order comes from the keys.
		for i := len(want) - 1; i >= 0; i-- {
			if err := tx.Set(Key("seq", U64(want[i])), nil); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	prefix := Key("seq", "")
	var got []uint64
	err = db.View(func(tx *Txn) error {
		return tx.Scan(prefix, Key("seq", U64(255)), func(k, _ []byte) (bool, error) {
			n, ok := ParseU64(string(k[len(prefix):]))
			if !ok {
				return false, fmt.Errorf("bad key %q", k)
			}
			got = append(got, n)
			return true, nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want[1:]) {
		t.Fatalf("scan from 255 = %v, want %v", got, want[1:])
	}
}

func TestKey(t *testing.T) {
	tests := []struct {
		parts []string
		want  string
	}{
		{nil, ""},
		{[]string{"a"}, "a"},
		{[]string{"a", "b"}, "a/b"},
		{[]string{"agents", "id", "caps"}, "agents/id/caps"},
		{[]string{"a", ""}, "a/"},
		{[]string{"", "b"}, "/b"},
		{[]string{"a", "", "c"}, "a//c"},
	}
	for _, tt := range tests {
		got := Key(tt.parts...)
		if string(got) != tt.want {
			t.Errorf("Key(%q) = %q, want %q", tt.parts, got, tt.want)
		}
	}
}

func TestSetTTL(t *testing.T) {
	db := openMem(t)
	err := db.Update(func(tx *Txn) error {
		if err := tx.SetTTL([]byte("tmp"), []byte("v"), time.Second); err != nil {
			return err
		}
		return tx.Set([]byte("keep"), []byte("v"))
	})
	if err != nil {
		t.Fatalf("SetTTL: %v", err)
	}
	if v, err := get(t, db, "tmp"); err != nil || string(v) != "v" {
		t.Fatalf("Get before expiry = %q, %v; want v", v, err)
	}

	testkit.Eventually(t, 10*time.Second, func() bool {
		_, err := get(t, db, "tmp")
		if err != nil && !errors.Is(err, ErrNotFound) {
			t.Fatalf("Get: %v", err)
		}
		return err != nil
	}, "the TTL key is still there")

	err = db.View(func(tx *Txn) error {
		if ok, err := tx.Has([]byte("tmp")); err != nil || ok {
			return fmt.Errorf("Has(expired) = %v, %v; want false", ok, err)
		}
		var seen []string
		if err := tx.Scan(nil, nil, func(k, _ []byte) (bool, error) {
			seen = append(seen, string(k))
			return true, nil
		}); err != nil {
			return err
		}
		if !slices.Equal(seen, []string{"keep"}) {
			return fmt.Errorf("Scan after expiry = %q, want [keep]", seen)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestPersistence(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(Options{Dir: dir, SyncWrites: true})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	err = db.Update(func(tx *Txn) error {
		if err := tx.Set([]byte("a"), []byte("1")); err != nil {
			return err
		}
		if err := tx.SetJSON([]byte("j"), map[string]int{"n": 7}); err != nil {
			return err
		}
		return tx.Set([]byte("gone"), []byte("x"))
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *Txn) error { return tx.Delete([]byte("gone")) }); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	db, err = Open(Options{Dir: dir})
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	if v, err := get(t, db, "a"); err != nil || string(v) != "1" {
		t.Fatalf("Get(a) after reopen = %q, %v; want 1", v, err)
	}
	var m map[string]int
	if err := db.View(func(tx *Txn) error { return tx.GetJSON([]byte("j"), &m) }); err != nil || m["n"] != 7 {
		t.Fatalf("GetJSON(j) after reopen = %v, %v; want n=7", m, err)
	}
	if _, err := get(t, db, "gone"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get(gone) after reopen: err = %v, want ErrNotFound", err)
	}
}

func TestOpenError(t *testing.T) {
	// A regular file where the directory should be.
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if db, err := Open(Options{Dir: file}); err == nil {
		db.Close()
		t.Fatal("Open over a regular file succeeded")
	}
}

func TestCloseTwiceAndUseAfterClose(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts func(t *testing.T) Options
	}{
		{"memory", func(*testing.T) Options { return Options{InMemory: true} }},
		{"disk", func(t *testing.T) Options { return Options{Dir: t.TempDir()} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db, err := Open(tc.opts(t))
			if err != nil {
				t.Fatal(err)
			}
			if err := db.Close(); err != nil {
				t.Fatalf("first Close: %v", err)
			}
			if err := db.Close(); err != nil {
				t.Fatalf("second Close: %v", err)
			}
			called := false
			err = db.Update(func(tx *Txn) error {
				called = true
				return tx.Set([]byte("k"), []byte("v"))
			})
			if !errors.Is(err, ErrClosed) {
				t.Fatalf("Update after Close: err = %v, want ErrClosed", err)
			}
			if called {
				t.Fatal("Update after Close ran its callback")
			}
		})
	}
}

// TestLargeValues: values well past the size from which a store on disk
// puts them in its value log (512 KiB) are kept and read back whole, on
// disk and in memory (which has no value log), four in one transaction
// as a group commit of entries with cards writes them.
func TestLargeValues(t *testing.T) {
	disk, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { disk.Close() })
	big := bytes.Repeat([]byte("0123456789abcdef"), 512<<10/16)
	for name, db := range map[string]*DB{"in memory": openMem(t), "on disk": disk} {
		err := db.Update(func(tx *Txn) error {
			for i := range 4 {
				if err := tx.Set(fmt.Appendf(nil, "big%d", i), big); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%s: Set 4 values of %d bytes: %v", name, len(big), err)
		}
		for i := range 4 {
			if got, err := get(t, db, fmt.Sprintf("big%d", i)); err != nil || !bytes.Equal(got, big) {
				t.Fatalf("%s: Get big%d: %d bytes, %v", name, i, len(got), err)
			}
		}
	}
}

// TestAStoreOnDiskOpensInLittleHeap: opening a store on disk takes at
// most 8 MiB of heap in use (11.6 MiB with the 8 MiB memtables before):
// Badger allocates its memtable at once, and the collector lets the
// resident heap grow to twice what is live, so that every node paid some
// two times it however little it stored.
func TestAStoreOnDiskOpensInLittleHeap(t *testing.T) {
	base := testkit.HeapInUse()
	db, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if grown := testkit.HeapInUse() - base; grown > 8<<20 {
		t.Fatalf("opening a store on disk took %.1f MiB of heap", float64(grown)/(1<<20))
	}
}

// TestAStoreLeftByACrashWithLargerMemtables: a store that a crash left
// with a write-ahead log fuller than this release's memtable (written by
// the release before, whose memtables were 8 MiB) opens, and holds what
// was committed: Badger replays the log into a memtable, and exits the
// process when it does not fit.
func TestAStoreLeftByACrashWithLargerMemtables(t *testing.T) {
	dir := t.TempDir()
	old, err := Open(Options{Dir: dir, MemTableSize: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	val := bytes.Repeat([]byte("v"), 1000) // in the memtable, not the value log
	const n = 6000                         // some 6.5 MiB of it: more than 4 MiB's, less than 8's
	for i := 0; i < n; i += 500 {
		err := old.Update(func(tx *Txn) error {
			for j := i; j < i+500; j++ {
				if err := tx.Set(fmt.Appendf(nil, "k%05d", j), val); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	crashed := t.TempDir() // the files as they are while it runs
	files, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if filepath.Ext(f.Name()) == ".vlog" {
			continue // empty: the values are small (and the file 2 GiB, sparse)
		}
		b, err := os.ReadFile(filepath.Join(dir, f.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(crashed, f.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	db, err := Open(Options{Dir: crashed})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, k := range []string{"k00000", fmt.Sprintf("k%05d", n-1)} {
		if got, err := get(t, db, k); err != nil || !bytes.Equal(got, val) {
			t.Fatalf("%s after the crash: %d bytes, %v", k, len(got), err)
		}
	}
}
