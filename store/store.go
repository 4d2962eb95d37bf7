package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

// Options configures Open.
type Options struct {
	// Dir is the Badger directory. Ignored when InMemory is set.
	Dir string
	// InMemory keeps everything in RAM; for tests and throw-away nodes.
	InMemory bool
	// SyncWrites makes every commit wait for fsync, so an acknowledged write
	// survives power loss, not only a process crash.
	SyncWrites bool
	// Logger receives Badger's warnings and errors. Nil discards them.
	Logger *slog.Logger
	// MemTableSize is the size of a memtable (Badger allocates it at
	// once); 0 is DefaultMemTable (16 MiB with InMemory).
	MemTableSize int64
}

// compactors is how many compaction workers a store runs.
const compactors = 2

// valueThreshold is the size from which a value goes to the value log.
const valueThreshold = 4 << 10

// DefaultMemTable is the memtable of a store on disk. Badger allocates it
// at once, in the heap, with room for a transaction besides (30% more),
// and the collector lets the heap grow to twice what is live: each MiB
// of it costs a node some two of resident memory, however little it
// stores. Values of valueThreshold and more go to the value log, so it
// holds keys, value pointers and small values; a transaction may take
// 15% of it (Badger's ErrTxnTooBig past that): 600 KiB, which the
// largest of the log's entries fits twice (an expiry of sweepBatch
// registrations, some 300 KiB: TestAFullExpirySweepFitsADiskStore).
const DefaultMemTable = 4 << 20

// DB is an open store. It is safe for concurrent use.
type DB struct {
	bdb *badger.DB
}

// Open opens (creating if needed) the store described by opts.
func Open(opts Options) (*DB, error) {
	bo := badger.DefaultOptions(opts.Dir).
		WithInMemory(opts.InMemory).
		WithSyncWrites(opts.SyncWrites).
		WithLogger(badgerLogger{opts.Logger}).
		// The registry holds small records (larger values go to the value
		// log, below): modest tables keep a node's footprint low enough to
		// run many nodes on one machine.
		WithMemTableSize(DefaultMemTable).
		WithBlockCacheSize(32 << 20).
		WithIndexCacheSize(16 << 20).
		WithNumVersionsToKeep(1).
		// Each compaction worker wakes 20 times a second to look for work
		// (Badger's fixed tick), whether or not there is any: Badger's 4
		// were most of an idle node's CPU (a node opens two stores, a
		// quorum member three). Two, the fewest Badger runs, compact
		// L0 (one of them always picks it first) and the levels below
		// together, which a registry's writes keep up with.
		WithNumCompactors(compactors)
	if opts.InMemory {
		// No value log: Badger keeps every value in its tables, and
		// refuses one over the threshold (left at its 1 MiB); a
		// transaction, values and all, holds at most 15% of a memtable,
		// so the memtables stay as large as before values went to the
		// value log on disk (a group commit of entries with cards).
		bo.Dir, bo.ValueDir = "", ""
		bo = bo.WithMemTableSize(16 << 20)
	} else {
		// Values past a few KiB (rows with an agent's full card, log
		// entries that carry one) go to the value log, read from the
		// file when needed: kept in the LSM tree they would fill the
		// memtables and be copied, several times their size, into the
		// heap of every table build.
		bo = bo.WithValueThreshold(valueThreshold)
	}
	if opts.MemTableSize > 0 {
		bo = bo.WithMemTableSize(opts.MemTableSize)
	}
	if !opts.InMemory {
		bo = bo.WithMemTableSize(max(bo.MemTableSize, walMemTable(opts.Dir)))
	}
	bdb, err := badger.Open(bo)
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", opts.Dir, err)
	}
	return &DB{bdb: bdb}, nil
}

// walMemTable is the memtable the write-ahead logs in dir were written
// for (Badger makes each twice its memtable), 0 for none. Badger replays
// a log left by a crash into a memtable of the size it opens with, and
// exits the process when it does not fit: a store whose logs a larger
// memtable wrote (a release before, 8 MiB) opens with memtables of their
// size, until it is opened again (a closed store leaves no log).
func walMemTable(dir string) int64 {
	logs, _ := filepath.Glob(filepath.Join(dir, "*.mem"))
	var most int64
	for _, f := range logs {
		if fi, err := os.Stat(f); err == nil {
			most = max(most, fi.Size()/2)
		}
	}
	return most
}

// Close flushes and closes the store. It is safe to call more than once.
func (db *DB) Close() error {
	if db.bdb.IsClosed() {
		return nil
	}
	return db.bdb.Close()
}

// View runs fn in a read-only transaction.
func (db *DB) View(fn func(*Txn) error) error {
	err := db.bdb.View(func(t *badger.Txn) error { return fn(&Txn{t: t}) })
	if errors.Is(err, badger.ErrDBClosed) {
		return ErrClosed
	}
	return err
}

// Update runs fn in a read-write transaction and commits it when fn returns
// nil. Conflicting concurrent transactions fail with badger.ErrConflict;
// callers that serialise their writes never see it.
func (db *DB) Update(fn func(*Txn) error) error {
	err := db.bdb.Update(func(t *badger.Txn) error { return fn(&Txn{t: t}) })
	if errors.Is(err, badger.ErrDBClosed) {
		return ErrClosed
	}
	return err
}

// ReadTxn opens a read-only transaction that sees the store as of now,
// whatever is written after, until Discard: for reading a consistent
// image while writes go on (snapshots).
func (db *DB) ReadTxn() *Txn { return &Txn{t: db.bdb.NewTransaction(false)} }

// Discard ends a transaction from ReadTxn.
func (tx *Txn) Discard() { tx.t.Discard() }

// DropPrefix deletes every key with one of the prefixes. Writes wait
// while it runs.
func (db *DB) DropPrefix(prefixes ...[]byte) error { return db.bdb.DropPrefix(prefixes...) }

// Batch writes many keys quickly, in as many transactions as they need:
// for loading a snapshot, not for changes that must be atomic.
type Batch struct{ wb *badger.WriteBatch }

// NewBatch starts a Batch; Flush it, or Cancel it.
func (db *DB) NewBatch() *Batch { return &Batch{wb: db.bdb.NewWriteBatch()} }

// Set stores val at key; expiresAt (Unix seconds) 0 keeps it for ever.
func (b *Batch) Set(key, val []byte, expiresAt uint64) error {
	e := entry(key, val)
	e.ExpiresAt = expiresAt
	return b.wb.SetEntry(e)
}

// Flush writes what the batch holds and waits for it.
func (b *Batch) Flush() error { return b.wb.Flush() }

// Cancel drops the batch.
func (b *Batch) Cancel() { b.wb.Cancel() }

// RunGC reclaims space in the value log every interval until ctx is done.
func (db *DB) RunGC(ctx context.Context, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			for db.bdb.RunValueLogGC(0.5) == nil {
			}
		}
	}
}

// Txn is a transaction handed to View and Update callbacks.
type Txn struct {
	t *badger.Txn
}

// Get returns a copy of the value at key, or ErrNotFound.
func (tx *Txn) Get(key []byte) ([]byte, error) {
	it, err := tx.t.Get(key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	return valueCopy(it)
}

// GetJSON decodes the JSON value at key into v, or returns ErrNotFound.
func (tx *Txn) GetJSON(key []byte, v any) error {
	it, err := tx.t.Get(key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return ErrNotFound
	}
	if err != nil {
		return err
	}
	_, err = value(it, nil, func(b []byte) error { return json.Unmarshal(b, v) })
	return err
}

// Has reports whether key exists.
func (tx *Txn) Has(key []byte) (bool, error) {
	_, err := tx.t.Get(key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return false, nil
	}
	return err == nil, err
}

// Set stores val at key.
func (tx *Txn) Set(key, val []byte) error { return tx.t.SetEntry(entry(key, val)) }

// SetJSON stores the JSON encoding of v at key.
func (tx *Txn) SetJSON(key []byte, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return tx.Set(key, b)
}

// SetTTL stores val at key; the key disappears after ttl. Expiry follows
// the local clock, so it suits garbage collection, not replicated decisions.
func (tx *Txn) SetTTL(key, val []byte, ttl time.Duration) error {
	return tx.t.SetEntry(entry(key, val).WithTTL(ttl))
}

// Delete removes key.
func (tx *Txn) Delete(key []byte) error { return tx.t.Delete(key) }

// Scan calls fn for each key with the given prefix, in ascending key order,
// starting at the first key >= start (start may be nil). fn returns false to
// stop. The slices passed to fn are only valid during the call.
func (tx *Txn) Scan(prefix, start []byte, fn func(key, val []byte) (bool, error)) error {
	opts := badger.DefaultIteratorOptions
	opts.Prefix = prefix
	it := tx.t.NewIterator(opts)
	defer it.Close()
	if bytes.Compare(start, prefix) < 0 {
		start = prefix
	}
	var buf []byte
	for it.Seek(start); it.ValidForPrefix(prefix); it.Next() {
		item := it.Item()
		var more bool
		var err error
		buf, err = value(item, buf, func(v []byte) error {
			var err error
			more, err = fn(item.Key(), v)
			return err
		})
		if err != nil || !more {
			return err
		}
	}
	return nil
}

// Last returns a copy of the last key with the given prefix, in key order,
// and of its value, or ErrNotFound when no key has the prefix.
func (tx *Txn) Last(prefix []byte) (key, val []byte, err error) {
	opts := badger.DefaultIteratorOptions
	opts.Prefix, opts.Reverse, opts.PrefetchValues = prefix, true, false
	it := tx.t.NewIterator(opts)
	defer it.Close()
	// Reverse iteration seeks to the last key <= the seek key: past every
	// key with the prefix, unless one goes on with nine 0xff bytes, which
	// no key of the mesh does (numbers in keys are 8 bytes).
	it.Seek(append(bytes.Clone(prefix), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff))
	if !it.ValidForPrefix(prefix) {
		return nil, nil, ErrNotFound
	}
	item := it.Item()
	val, err = valueCopy(item)
	return item.KeyCopy(nil), val, err
}

// ScanExpiry is Scan with each key's expiry (Unix seconds, 0 for none).
func (tx *Txn) ScanExpiry(prefix []byte, fn func(key, val []byte, expiresAt uint64) error) error {
	opts := badger.DefaultIteratorOptions
	opts.Prefix = prefix
	it := tx.t.NewIterator(opts)
	defer it.Close()
	var buf []byte
	for it.Seek(prefix); it.ValidForPrefix(prefix); it.Next() {
		item := it.Item()
		var err error
		buf, err = value(item, buf, func(v []byte) error { return fn(item.Key(), v, item.ExpiresAt()) })
		if err != nil {
			return err
		}
	}
	return nil
}

// Key joins parts with '/' into a key. Parts must not contain '/' where
// prefix scans depend on the boundary.
func Key(parts ...string) []byte {
	n := len(parts)
	for _, p := range parts {
		n += len(p)
	}
	b := make([]byte, 0, n)
	for i, p := range parts {
		if i > 0 {
			b = append(b, '/')
		}
		b = append(b, p...)
	}
	return b
}

// U64 encodes n as 8 big-endian bytes so that keys sort numerically.
func U64(n uint64) string {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], n)
	return string(b[:])
}

// ParseU64 decodes a U64 key part.
func ParseU64(s string) (uint64, bool) {
	if len(s) != 8 {
		return 0, false
	}
	return binary.BigEndian.Uint64([]byte(s)), true
}

// badgerLogger routes Badger's logs to slog, demoting its chatty info lines.
type badgerLogger struct{ l *slog.Logger }

func (b badgerLogger) log(level slog.Level, f string, a ...any) {
	// Badger logs at debug four times a write batch: formatted only when
	// someone reads it.
	if b.l != nil && b.l.Enabled(context.Background(), level) {
		b.l.Log(context.Background(), level, "badger: "+strings.TrimSpace(fmt.Sprintf(f, a...)))
	}
}
func (b badgerLogger) Errorf(f string, a ...any)   { b.log(slog.LevelError, f, a...) }
func (b badgerLogger) Warningf(f string, a ...any) { b.log(slog.LevelWarn, f, a...) }
func (b badgerLogger) Infof(f string, a ...any)    { b.log(slog.LevelDebug, f, a...) }
func (b badgerLogger) Debugf(f string, a ...any)   { b.log(slog.LevelDebug-4, f, a...) }
