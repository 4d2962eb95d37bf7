package store

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/klauspost/compress/zstd"
)

// card is a value as the registry writes one: JSON of words, many times
// compressFrom.
func card(n int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"skills":[`)
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, `{"id":"s%d","description":"answers questions on topic %d of the catalogue, with examples"},`, i, i%97)
	}
	b.WriteString(`{"id":"last"}]}`)
	return b.Bytes()
}

// stored is what Badger holds at key: its size (with the value log's
// header, when there) and whether it is compressed.
func stored(t *testing.T, db *DB, key string) (int64, bool) {
	t.Helper()
	var size int64
	var meta byte
	err := db.bdb.View(func(tx *badger.Txn) error {
		it, err := tx.Get([]byte(key))
		if err != nil {
			return err
		}
		size, meta = it.ValueSize(), it.UserMeta()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return size, meta&metaZstd != 0
}

// TestLargeValuesStoredCompressed: a value of compressFrom bytes and more
// that compresses is stored compressed, several times smaller, and every
// reader (Get, GetJSON, Scan, ScanExpiry, Last, a batch's writes) sees it
// as it was set; smaller values, and values that do not compress (random
// bytes, or compressed already), are stored as they are.
func TestLargeValuesStoredCompressed(t *testing.T) {
	disk, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { disk.Close() })
	big := card(30 << 10)
	noise := make([]byte, 8<<10)
	rand.Read(noise)
	small := big[:compressFrom-1]
	zstd := append(bytes.Clone(zstdMagic), big...) // as if compressed
	for name, db := range map[string]*DB{"in memory": openMem(t), "on disk": disk} {
		err := db.Update(func(tx *Txn) error {
			return errorsOf(tx.Set([]byte("v/big"), big), tx.SetJSON([]byte("v/json"), json.RawMessage(big)),
				tx.Set([]byte("v/noise"), noise), tx.Set([]byte("v/small"), small), tx.Set([]byte("v/zstd"), zstd))
		})
		if err != nil {
			t.Fatal(err)
		}
		b := db.NewBatch()
		if err := errorsOf(b.Set([]byte("v/zbatch"), big, 0), b.Flush()); err != nil {
			t.Fatal(err)
		}
		want := map[string][]byte{"v/big": big, "v/json": big, "v/noise": noise, "v/small": small, "v/zbatch": big, "v/zstd": zstd}
		for key, compressed := range map[string]bool{"v/big": true, "v/json": true, "v/zbatch": true, "v/noise": false, "v/small": false, "v/zstd": false} {
			size, z := stored(t, db, key)
			if z != compressed || compressed && size*3 > int64(len(want[key])) || !compressed && size < int64(len(want[key])) {
				t.Fatalf("%s: %s is stored in %d bytes (compressed %v) for %d", name, key, size, z, len(want[key]))
			}
			if got, err := get(t, db, key); err != nil || !bytes.Equal(got, want[key]) {
				t.Fatalf("%s: Get %s: %d bytes, %v", name, key, len(got), err)
			}
		}
		var raw json.RawMessage
		scanned := map[string][]byte{}
		err = db.View(func(tx *Txn) error {
			if err := tx.GetJSON([]byte("v/json"), &raw); err != nil {
				return err
			}
			err := tx.Scan([]byte("v/"), nil, func(k, v []byte) (bool, error) {
				scanned[string(k)] = bytes.Clone(v)
				return true, nil
			})
			if err != nil {
				return err
			}
			err = tx.ScanExpiry([]byte("v/"), func(k, v []byte, _ uint64) error {
				if !bytes.Equal(v, want[string(k)]) {
					return fmt.Errorf("ScanExpiry %s: %d bytes", k, len(v))
				}
				return nil
			})
			if err != nil {
				return err
			}
			k, v, err := tx.Last([]byte("v/"))
			if err == nil && (string(k) != "v/zstd" || !bytes.Equal(v, zstd)) {
				err = fmt.Errorf("Last: %s, %d bytes", k, len(v))
			}
			return err
		})
		if err != nil || !bytes.Equal(raw, big) {
			t.Fatalf("%s: %v (GetJSON: %d bytes)", name, err, len(raw))
		}
		for key, v := range want {
			if !bytes.Equal(scanned[key], v) {
				t.Fatalf("%s: Scan %s: %d bytes, want %d", name, key, len(scanned[key]), len(v))
			}
		}
	}
}

// TestValuesStoredBeforeCompression: a store written by the release
// before, whose large values Badger holds as they were set, opens and
// reads them as they are, and a value set again is compressed.
func TestValuesStoredBeforeCompression(t *testing.T) {
	dir := t.TempDir()
	old, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	big := card(30 << 10)
	err = old.bdb.Update(func(tx *badger.Txn) error { // as the release before wrote it
		return errorsOf(tx.Set([]byte("a/old"), big), tx.Set([]byte("a/other"), big))
	})
	if err != nil {
		t.Fatal(err)
	}
	old.Close()
	db, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if size, z := stored(t, db, "a/old"); z || size < int64(len(big)) {
		t.Fatalf("the old value: %d bytes, compressed %v", size, z)
	}
	if got, err := get(t, db, "a/old"); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("Get a/old: %d bytes, %v", len(got), err)
	}
	set(t, db, map[string]string{"a/other": string(big)})
	if size, z := stored(t, db, "a/other"); !z || size*3 > int64(len(big)) {
		t.Fatalf("a value set again: %d bytes, compressed %v", size, z)
	}
	n := 0
	err = db.View(func(tx *Txn) error {
		return tx.Scan([]byte("a/"), nil, func(_, v []byte) (bool, error) {
			if !bytes.Equal(v, big) {
				return false, fmt.Errorf("scanned %d bytes", len(v))
			}
			n++
			return true, nil
		})
	})
	if err != nil || n != 2 {
		t.Fatalf("Scan: %d values, %v", n, err)
	}
}

// errorsOf is the first error of errs.
func errorsOf(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// TestCorruptCompressedValue: a compressed value whose bytes changed on
// disk (zstd's frames carry a checksum) is an error naming its key, for
// Get, GetJSON and Scan alike, never a panic nor other bytes.
func TestCorruptCompressedValue(t *testing.T) {
	db := openMem(t)
	big := card(30 << 10)
	z := entry([]byte("v/bad"), big).Value
	z[len(z)/2] ^= 0xff
	err := db.bdb.Update(func(tx *badger.Txn) error {
		return tx.SetEntry(badger.NewEntry([]byte("v/bad"), z).WithMeta(metaZstd))
	})
	if err != nil {
		t.Fatal(err)
	}
	var v json.RawMessage
	for name, read := range map[string]func(*Txn) error{
		"Get":     func(tx *Txn) error { _, err := tx.Get([]byte("v/bad")); return err },
		"GetJSON": func(tx *Txn) error { return tx.GetJSON([]byte("v/bad"), &v) },
		"Scan": func(tx *Txn) error {
			return tx.Scan([]byte("v/"), nil, func(_, _ []byte) (bool, error) { return true, nil })
		},
	} {
		err := db.View(read)
		if err == nil || !bytes.Contains([]byte(err.Error()), []byte(`"v/bad"`)) {
			t.Fatalf("%s of a corrupt value: %v", name, err)
		}
	}
}

// TestCompressedValueOfAnUntrueSize: a compressed value whose frame names
// a size no stored value has (its header changed on disk) is refused for
// it, naming its key, rather than decompressed into as many bytes as it
// names; a value larger than compressTo is stored as it is, so every
// value stored compressed reads back.
func TestCompressedValueOfAnUntrueSize(t *testing.T) {
	db := openMem(t)
	// A frame: magic, a header naming an 8-byte content size and a 1 KiB
	// window, the size (1 GiB), and a last raw block of one byte.
	frame := append(bytes.Clone(zstdMagic), 0xc0, 0x00, 0, 0, 0, 0x40, 0, 0, 0, 0, 0x09, 0x00, 0x00, 'x')
	err := db.bdb.Update(func(tx *badger.Txn) error {
		return tx.SetEntry(badger.NewEntry([]byte("v/huge"), frame).WithMeta(metaZstd))
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := get(t, db, "v/huge"); !errors.Is(err, zstd.ErrDecoderSizeExceeded) || !strings.Contains(err.Error(), `"v/huge"`) {
		t.Fatalf("a frame naming 1 GiB: %v", err)
	}

	disk, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { disk.Close() })
	large := card(compressTo + 1)
	set(t, disk, map[string]string{"v/large": string(large)})
	if size, z := stored(t, disk, "v/large"); z || size < int64(len(large)) {
		t.Fatalf("a value over compressTo: %d bytes, compressed %v", size, z)
	}
	if got, err := get(t, disk, "v/large"); err != nil || !bytes.Equal(got, large) {
		t.Fatalf("a value over compressTo: %d bytes, %v", len(got), err)
	}
}
