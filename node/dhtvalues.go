package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"path/filepath"

	"github.com/ipfs/go-datastore"
	dsq "github.com/ipfs/go-datastore/query"

	"github.com/agentmesh/mesh/store"
)

// diskValues is where a node on disk keeps the DHT values it holds as a
// DHT server (p2p.Config.Values): a store of its own in DATA/dht, so that
// agents' records, which carry their full cards, are not held in memory
// as well as in the directory's rows. Its writes are not synced (a value
// lost in a crash is put again by its publisher), and never wait on the
// directory's own commits, nor these on them. Values persist across a
// restart; the DHT drops those received more than a day before (p2p).
type diskValues struct{ db *store.DB }

// openDHTValues opens the store of DHT values in dataDir; Badger's
// warnings and errors go to log.
func openDHTValues(dataDir string, log *slog.Logger) (*store.DB, error) {
	dir := filepath.Join(dataDir, "dht")
	db, err := store.Open(store.Options{Dir: dir, MemTableSize: dhtMemTable, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("node: DHT values (%s may be deleted while the node is stopped: the directory puts them again): %w", dir, err)
	}
	return db, nil
}

// dhtValues is where the host keeps DHT values: the node's store of them,
// or (nil) memory.
func (n *Node) dhtValues() datastore.Batching {
	if n.dht == nil {
		return nil
	}
	return diskValues{n.dht}
}

// dhtMemTable is the memtable of the values' store: values of 4 KiB and
// more go to its value log, the memtable holds the rest and the keys.
const dhtMemTable = 2 << 20

func (v diskValues) Get(_ context.Context, key datastore.Key) ([]byte, error) {
	var val []byte
	err := v.db.View(func(tx *store.Txn) error {
		var err error
		val, err = tx.Get(key.Bytes())
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		return nil, datastore.ErrNotFound
	}
	return val, err
}

func (v diskValues) Has(ctx context.Context, key datastore.Key) (bool, error) {
	var has bool
	err := v.db.View(func(tx *store.Txn) error {
		var err error
		has, err = tx.Has(key.Bytes())
		return err
	})
	return has, err
}

func (v diskValues) GetSize(ctx context.Context, key datastore.Key) (int, error) {
	return datastore.GetBackedSize(ctx, v, key)
}

func (v diskValues) Put(_ context.Context, key datastore.Key, value []byte) error {
	return v.db.Update(func(tx *store.Txn) error { return tx.Set(key.Bytes(), value) })
}

func (v diskValues) Delete(_ context.Context, key datastore.Key) error {
	return v.db.Update(func(tx *store.Txn) error { return tx.Delete(key.Bytes()) })
}

func (v diskValues) Sync(context.Context, datastore.Key) error { return nil }

// Close leaves the store open: the node closes it after its host.
func (v diskValues) Close() error { return nil }

// Batch writes its puts and deletes in one transaction when committed:
// the writes of one DHT value (its record, and the value and marks it
// shares with other keys: p2p) land together or not at all.
func (v diskValues) Batch(context.Context) (datastore.Batch, error) {
	return &valuesBatch{db: v.db}, nil
}

// valuesBatch is a batch of diskValues.
type valuesBatch struct {
	db  *store.DB
	ops []func(*store.Txn) error
}

func (b *valuesBatch) Put(_ context.Context, key datastore.Key, value []byte) error {
	b.ops = append(b.ops, func(tx *store.Txn) error { return tx.Set(key.Bytes(), value) })
	return nil
}

func (b *valuesBatch) Delete(_ context.Context, key datastore.Key) error {
	b.ops = append(b.ops, func(tx *store.Txn) error { return tx.Delete(key.Bytes()) })
	return nil
}

func (b *valuesBatch) Commit(context.Context) error {
	return b.db.Update(func(tx *store.Txn) error {
		for _, op := range b.ops {
			if err := op(tx); err != nil {
				return err
			}
		}
		return nil
	})
}

// queryPage is how many values a query reads from the store at a time.
const queryPage = 64

// Query reads the keys under q's prefix a page at a time, each page in a
// transaction of its own (a sweep of every value never holds them all),
// and applies the rest of q to them.
func (v diskValues) Query(ctx context.Context, q dsq.Query) (dsq.Results, error) {
	prefix := []byte(path.Clean("/"+q.Prefix) + "/")
	if string(prefix) == "//" {
		prefix = nil
	}
	var page []dsq.Entry
	start, done := prefix, false
	next := func() (dsq.Result, bool) {
		if len(page) == 0 && !done {
			var err error
			if page, err = v.page(prefix, start, q.KeysOnly); err != nil {
				done = true
				return dsq.Result{Error: err}, true
			}
			done = len(page) < queryPage
			if len(page) > 0 {
				start = append([]byte(page[len(page)-1].Key), 0)
			}
		}
		if len(page) == 0 || ctx.Err() != nil {
			return dsq.Result{}, false
		}
		e := page[0]
		page = page[1:]
		return dsq.Result{Entry: e}, true
	}
	res := dsq.ResultsFromIterator(q, dsq.Iterator{Next: next})
	q.Prefix = "" // read by prefix already
	return dsq.NaiveQueryApply(q, res), nil
}

// page reads up to queryPage entries under prefix from start on.
func (v diskValues) page(prefix, start []byte, keysOnly bool) ([]dsq.Entry, error) {
	var out []dsq.Entry
	err := v.db.View(func(tx *store.Txn) error {
		return tx.Scan(prefix, start, func(k, val []byte) (bool, error) {
			e := dsq.Entry{Key: string(k), Size: len(val)}
			if !keysOnly {
				e.Value = bytes.Clone(val)
			}
			out = append(out, e)
			return len(out) < queryPage, nil
		})
	})
	return out, err
}
