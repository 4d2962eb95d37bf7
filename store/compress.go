package store

import (
	"bytes"
	"fmt"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/klauspost/compress/zstd"
)

// Values of compressFrom bytes and more (rows with an agent's full card,
// log entries that carry one) are stored compressed (zstd) when that saves
// at least an eighth of them, and read back as they were set: the JSON of
// a card compresses some threefold, and Badger writes its value log
// through a memory map, so that every byte it writes stays in the node's
// resident set until the kernel takes the page back. Badger's UserMeta
// byte marks a compressed value (metaZstd): values written before (meta 0)
// read as they are.
const compressFrom = 4 << 10

// compressTo bounds the values stored compressed (the mesh's largest, a
// Raft entry or a log entry of a catalog import, are some 2 MiB); larger
// ones are stored as they are. A compressed value's frame names its size,
// which decompressing allocates at once: one that names more than this
// (its header changed on disk) is refused, rather than tried in as many
// bytes as it names (up to zstd's 64 GiB).
const compressTo = 16 << 20

// metaZstd is the UserMeta bit of a value stored compressed.
const metaZstd byte = 1

// zstdMagic begins a value compressed already (the DHT's values), which
// is not compressed again.
var zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}

var (
	// The fastest level: the log's commits compress under its lock.
	encoder, _ = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(2), zstd.WithLowerEncoderMem(true))
	decoder, _ = zstd.NewReader(nil, zstd.WithDecoderConcurrency(4), zstd.WithDecoderLowmem(true), zstd.WithDecoderMaxMemory(compressTo))
)

// entry is the Badger entry that stores val at key, compressed when that
// pays.
func entry(key, val []byte) *badger.Entry {
	e := badger.NewEntry(key, val)
	if len(val) >= compressFrom && len(val) <= compressTo && !bytes.HasPrefix(val, zstdMagic) {
		if z := encoder.EncodeAll(val, make([]byte, 0, len(val)/2)); len(z) <= len(val)-len(val)/8 {
			e.Value, e.UserMeta = z, metaZstd
		}
	}
	return e
}

// value calls fn with item's value as it was set, decompressed into buf
// (reused when large enough) if stored compressed; it returns buf, grown.
func value(item *badger.Item, buf []byte, fn func([]byte) error) ([]byte, error) {
	if item.UserMeta()&metaZstd == 0 {
		return buf, item.Value(fn)
	}
	err := item.Value(func(z []byte) error {
		var err error
		if buf, err = decoder.DecodeAll(z, buf[:0]); err != nil {
			return fmt.Errorf("store: value at %q: %w", item.Key(), err)
		}
		return fn(buf)
	})
	return buf, err
}

// valueCopy returns a copy of item's value as it was set.
func valueCopy(item *badger.Item) ([]byte, error) {
	if item.UserMeta()&metaZstd == 0 {
		return item.ValueCopy(nil)
	}
	var out []byte
	_, err := value(item, nil, func(v []byte) error { out = v; return nil })
	return out, err
}
