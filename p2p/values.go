package p2p

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/ipfs/go-datastore"
	dsq "github.com/ipfs/go-datastore/query"
	"github.com/klauspost/compress/zstd"
	recpb "github.com/libp2p/go-libp2p-record/pb"
	"google.golang.org/protobuf/proto"
)

// compressedValues keeps the DHT values this node holds compressed
// (zstd): the mesh's agent records carry their agent's signed
// registration, with the full card it may hand over (up to 64 KiB of
// JSON, which compresses some threefold), and a DHT server holds one
// under every key it is close to. Values are compressed as they are
// stored and read back whole; the DHT sees the bytes it put. A record's
// value held under several keys (the mesh publishes an agent's record
// under its did and under its agent id) is stored once (shared.go).
//
// A record put again unchanged is not written again unless the one held
// came more than renewAfter before: kad-dht stores what a peer puts unless
// the validator prefers the record held, which it does not over the same
// record, so any peer could otherwise have a DHT server write one valid
// record to disk as fast as it sends it.
type compressedValues struct {
	datastore.Batching
	// mu orders the writes of shared values (Put, Delete) before the
	// reads of them.
	mu *sync.RWMutex
}

// newValues keeps the DHT's values in store.
func newValues(store datastore.Batching) compressedValues {
	return compressedValues{Batching: store, mu: new(sync.RWMutex)}
}

// renewAfter: a record put again unchanged is taken as received anew (its
// 24 h, maxRecordAge, start again) once the one held is this old.
const renewAfter = maxRecordAge / 2

// maxValue is kad-dht's largest message, which no value put is larger
// than: a stored value whose frame names more (its header changed on
// disk) is refused rather than decompressed into as many bytes.
const maxValue = 4 << 20

var (
	valueEncoder, _ = zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithLowerEncoderMem(true))
	valueDecoder, _ = zstd.NewReader(nil, zstd.WithDecoderConcurrency(2), zstd.WithDecoderLowmem(true), zstd.WithDecoderMaxMemory(maxValue))
)

func (c compressedValues) Put(ctx context.Context, key datastore.Key, value []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.holds(ctx, key, value) {
		return nil
	}
	b, err := c.Batching.Batch(ctx)
	if err != nil {
		return err
	}
	old := c.sharedOf(ctx, key)
	stored, err := c.share(ctx, b, key, value)
	if err != nil {
		return err
	}
	if stored == nil {
		// A copy of its own size: the encoder's buffer is as large as value.
		stored = bytes.Clone(valueEncoder.EncodeAll(value, nil))
	}
	if err := b.Put(ctx, key, stored); err != nil {
		return err
	}
	if err := c.release(ctx, b, key, old, stored); err != nil {
		return err
	}
	return b.Commit(ctx)
}

func (c compressedValues) Delete(ctx context.Context, key datastore.Key) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, err := c.Batching.Batch(ctx)
	if err != nil {
		return err
	}
	if err := b.Delete(ctx, key); err != nil {
		return err
	}
	if err := c.release(ctx, b, key, c.sharedOf(ctx, key), nil); err != nil {
		return err
	}
	return b.Commit(ctx)
}

// holds reports whether key holds the DHT record value (kad-dht's stored
// form: the record and when it was received), received less than
// renewAfter ago.
func (c compressedValues) holds(ctx context.Context, key datastore.Key, value []byte) bool {
	var put, held recpb.Record
	if proto.Unmarshal(value, &put) != nil || len(put.Key) == 0 {
		return false
	}
	stored, err := c.get(ctx, key)
	if err != nil || proto.Unmarshal(stored, &held) != nil {
		return false
	}
	came, err := time.Parse(time.RFC3339Nano, held.TimeReceived)
	if err != nil || time.Since(came) >= renewAfter {
		return false
	}
	put.TimeReceived, held.TimeReceived = "", ""
	return proto.Equal(&put, &held)
}

func (c compressedValues) Get(ctx context.Context, key datastore.Key) ([]byte, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.get(ctx, key)
}

// get is Get under c.mu.
func (c compressedValues) get(ctx context.Context, key datastore.Key) ([]byte, error) {
	stored, err := c.Batching.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	return c.expand(ctx, stored)
}

// expand is the value put of what the store holds.
func (c compressedValues) expand(ctx context.Context, stored []byte) ([]byte, error) {
	if h, stub, ok := sharedRef(stored); ok {
		return c.unshare(ctx, h, stub)
	}
	return valueDecoder.DecodeAll(stored, nil)
}

func (c compressedValues) GetSize(ctx context.Context, key datastore.Key) (int, error) {
	return datastore.GetBackedSize(ctx, c, key)
}

// Query answers q with the values as they were put: the stored ones are
// read by prefix, and decompressed one at a time as the caller takes them
// (the DHT's daily sweep reads every value), and what else q asks
// (filters, orders) applies to them once decompressed.
func (c compressedValues) Query(ctx context.Context, q dsq.Query) (dsq.Results, error) {
	res, err := c.Batching.Query(ctx, dsq.Query{Prefix: q.Prefix, KeysOnly: q.KeysOnly})
	if err != nil {
		return nil, err
	}
	next := func() (dsq.Result, bool) {
		for {
			r, ok := res.NextSync()
			if ok && r.Error == nil && strings.HasPrefix(r.Key, sharedNS+"/") {
				continue // a value shared by keys: read with them
			}
			if ok && r.Error == nil && !q.KeysOnly {
				c.mu.RLock()
				r.Value, r.Error = c.expand(ctx, r.Value)
				c.mu.RUnlock()
				if errors.Is(r.Error, datastore.ErrNotFound) {
					continue // deleted meanwhile
				}
				r.Size = len(r.Value)
			}
			return r, ok
		}
	}
	return dsq.NaiveQueryApply(q, dsq.ResultsFromIterator(q, dsq.Iterator{Next: next, Close: res.Close})), nil
}

func (c compressedValues) Batch(context.Context) (datastore.Batch, error) {
	return datastore.NewBasicBatch(c), nil
}
