package p2p

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"

	"github.com/ipfs/go-datastore"
	dsq "github.com/ipfs/go-datastore/query"
	recpb "github.com/libp2p/go-libp2p-record/pb"
	"google.golang.org/protobuf/proto"
)

// A DHT record whose value is sharedFrom bytes or more is stored apart
// from its value, which is stored once for every key whose record holds
// it: at sharedKey(h) the value compressed (h is its SHA-256), at
// sharedKey(h)/<key> a mark for each key that holds it, and at the key
// sharedMark, h and the record without its value. The value goes with
// the last key that holds it. The writes of one Put or Delete go in one
// batch (the node's store of values commits a batch in one transaction),
// so that a crash leaves no value without a mark nor a mark without its
// record. A value stored before (compressed whole) reads as it was.
const sharedFrom = 1 << 10

// sharedNS is where shared values are kept; queries of the DHT's values
// leave it out.
const sharedNS = "/mesh-shared"

// sharedMark begins a record stored without its value (a compressed
// value begins with zstd's magic number, never with a zero byte).
var sharedMark = []byte("\x00shared1")

func sharedKey(h []byte) datastore.Key {
	return datastore.NewKey(sharedNS + "/" + hex.EncodeToString(h))
}

// markKey is the mark that key holds shared value h.
func markKey(h []byte, key datastore.Key) datastore.Key {
	return sharedKey(h).Child(key)
}

// sharedRef reads a record stored without its value: the value's hash
// and the rest of the record.
func sharedRef(stored []byte) (h, stub []byte, ok bool) {
	rest, ok := bytes.CutPrefix(stored, sharedMark)
	if !ok || len(rest) < sha256.Size {
		return nil, nil, false
	}
	return rest[:sha256.Size], rest[sha256.Size:], true
}

// sharedOf is the hash of the shared value key holds, nil for none.
func (c compressedValues) sharedOf(ctx context.Context, key datastore.Key) []byte {
	stored, err := c.Batching.Get(ctx, key)
	if err != nil {
		return nil
	}
	h, _, _ := sharedRef(stored)
	return h
}

// share stores (in b) the value of the DHT record put at key as a shared
// value, marked as held by key, and returns what to store at key; nil
// when the value is no record or too small to share.
func (c compressedValues) share(ctx context.Context, b datastore.Batch, key datastore.Key, value []byte) ([]byte, error) {
	var rec recpb.Record
	if len(value) < sharedFrom || proto.Unmarshal(value, &rec) != nil || len(rec.Value) < sharedFrom {
		return nil, nil
	}
	sum := sha256.Sum256(rec.Value)
	h := sum[:]
	has, err := c.Batching.Has(ctx, sharedKey(h))
	if err == nil && !has {
		err = b.Put(ctx, sharedKey(h), valueEncoder.EncodeAll(rec.Value, nil))
	}
	if err == nil {
		err = b.Put(ctx, markKey(h, key), nil)
	}
	if err != nil {
		return nil, err
	}
	rec.Value = nil
	stub, err := proto.Marshal(&rec)
	return append(append(bytes.Clone(sharedMark), h...), stub...), err
}

// unshare is the record stub with shared value h.
func (c compressedValues) unshare(ctx context.Context, h, stub []byte) ([]byte, error) {
	var rec recpb.Record
	if err := proto.Unmarshal(stub, &rec); err != nil {
		return nil, err
	}
	z, err := c.Batching.Get(ctx, sharedKey(h))
	if err != nil {
		return nil, err
	}
	if rec.Value, err = valueDecoder.DecodeAll(z, nil); err != nil {
		return nil, err
	}
	return proto.Marshal(&rec)
}

// release drops (in b) key's mark on shared value h (nil for none),
// unless key still holds it (stored is what key holds now), and the value
// once no other key holds it.
func (c compressedValues) release(ctx context.Context, b datastore.Batch, key datastore.Key, h, stored []byte) error {
	if h == nil {
		return nil
	}
	if now, _, ok := sharedRef(stored); ok && bytes.Equal(now, h) {
		return nil
	}
	mark := markKey(h, key)
	if err := b.Delete(ctx, mark); err != nil {
		return err
	}
	res, err := c.Batching.Query(ctx, dsq.Query{Prefix: sharedKey(h).String(), KeysOnly: true, Limit: 2})
	if err != nil {
		return err
	}
	marks, err := res.Rest()
	if err != nil {
		return err
	}
	for _, m := range marks {
		if m.Key != mark.String() {
			return nil // another key holds it
		}
	}
	return b.Delete(ctx, sharedKey(h))
}
