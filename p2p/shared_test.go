package p2p

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ipfs/go-datastore"
	dsq "github.com/ipfs/go-datastore/query"
	dssync "github.com/ipfs/go-datastore/sync"
	recpb "github.com/libp2p/go-libp2p-record/pb"
	"google.golang.org/protobuf/proto"
)

// dhtRecord is a record as kad-dht stores it under key.
func dhtRecord(t *testing.T, key string, value []byte) []byte {
	t.Helper()
	b, err := proto.Marshal(&recpb.Record{Key: []byte(key), Value: value, TimeReceived: "2026-11-28T12:00:00Z"})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// keysIn lists what store holds, with the bytes of each.
func keysIn(t *testing.T, store datastore.Datastore) map[string]int {
	t.Helper()
	res, err := store.Query(context.Background(), dsq.Query{})
	if err != nil {
		t.Fatal(err)
	}
	all, err := res.Rest()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, e := range all {
		out[e.Key] = len(e.Value)
	}
	return out
}

// TestRecordValueStoredOnce: a record's value held under two keys (an
// agent's record under its did and its agent id) is stored once; each key
// reads its record whole, by Get and by Query (which shows no shared
// value of its own); the value stays while a key holds it and goes with
// the last; a key put anew with another value lets the old one go. A
// value stored compressed whole (before) reads as it was.
func TestRecordValueStoredOnce(t *testing.T) {
	ctx := context.Background()
	inner := dssync.MutexWrap(datastore.NewMapDatastore())
	c := newValues(inner)
	card := bytes.Repeat([]byte(`{"name":"echo","description":"says it again and again"},`), 400)
	did, id := datastore.NewKey("/did-key"), datastore.NewKey("/id-key")
	recs := map[datastore.Key][]byte{did: dhtRecord(t, "/mesh-agent/did", card), id: dhtRecord(t, "/mesh-aid/id", card)}
	for k, v := range recs {
		if err := c.Put(ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}
	held := keysIn(t, inner)
	shared, total := 0, 0
	for k, n := range held {
		total += n
		if strings.HasPrefix(k, sharedNS+"/") && strings.Count(k, "/") == 2 {
			shared++
		}
	}
	if shared != 1 || len(held) != 5 || total > len(card)/10 {
		t.Fatalf("the store holds %v", held)
	}
	for k, v := range recs {
		if got, err := c.Get(ctx, k); err != nil || !proto.Equal(unmarshalRecord(t, got), unmarshalRecord(t, v)) {
			t.Fatalf("get %s: %d bytes, %v", k, len(got), err)
		}
	}
	res, err := c.Query(ctx, dsq.Query{})
	if err != nil {
		t.Fatal(err)
	}
	entries, _ := res.Rest()
	if len(entries) != 2 {
		t.Fatalf("a query of every value: %d entries", len(entries))
	}
	for _, e := range entries {
		if !bytes.Equal(unmarshalRecord(t, e.Value).Value, card) {
			t.Fatalf("a query's %s: %d bytes", e.Key, len(e.Value))
		}
	}

	if err := c.Delete(ctx, did); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Get(ctx, id); err != nil || !bytes.Equal(unmarshalRecord(t, got).Value, card) {
		t.Fatalf("the other key, once one went: %d bytes, %v", len(got), err)
	}
	if err := c.Put(ctx, id, dhtRecord(t, "/mesh-aid/id", append(bytes.Clone(card), ' '))); err != nil {
		t.Fatal(err)
	}
	if held := keysIn(t, inner); len(held) != 3 {
		t.Fatalf("a key put anew with another value: the store holds %v", held)
	}
	if err := c.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	if held := keysIn(t, inner); len(held) != 0 {
		t.Fatalf("every key deleted: the store holds %v", held)
	}

	old := dhtRecord(t, "/mesh-agent/old", card)
	inner.Put(ctx, did, valueEncoder.EncodeAll(old, nil))
	if got, err := c.Get(ctx, did); err != nil || !bytes.Equal(got, old) {
		t.Fatalf("a value stored before: %d bytes, %v", len(got), err)
	}
}

func unmarshalRecord(t *testing.T, b []byte) *recpb.Record {
	t.Helper()
	var r recpb.Record
	if err := proto.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return &r
}

// faultyValues fails its write number failAt (a put, a delete or a
// batch's commit), as a crash would end a node's writes there; its
// batches land whole or not at all, as the node's store of values does.
type faultyValues struct {
	datastore.Batching
	n, failAt int
}

func (f *faultyValues) fail() error {
	if f.n++; f.n == f.failAt {
		return errors.New("crashed")
	}
	return nil
}

func (f *faultyValues) Put(ctx context.Context, key datastore.Key, value []byte) error {
	if err := f.fail(); err != nil {
		return err
	}
	return f.Batching.Put(ctx, key, value)
}

func (f *faultyValues) Delete(ctx context.Context, key datastore.Key) error {
	if err := f.fail(); err != nil {
		return err
	}
	return f.Batching.Delete(ctx, key)
}

func (f *faultyValues) Batch(ctx context.Context) (datastore.Batch, error) {
	return &faultyBatch{f: f, b: datastore.NewBasicBatch(f.Batching)}, nil
}

type faultyBatch struct {
	f *faultyValues
	b datastore.Batch
}

func (b *faultyBatch) Put(ctx context.Context, key datastore.Key, value []byte) error {
	return b.b.Put(ctx, key, value)
}

func (b *faultyBatch) Delete(ctx context.Context, key datastore.Key) error {
	return b.b.Delete(ctx, key)
}

func (b *faultyBatch) Commit(ctx context.Context) error {
	if err := b.f.fail(); err != nil {
		return err
	}
	return b.b.Commit(ctx)
}

// TestSharedValuesSurviveACrash: whichever write of a DHT server's puts
// and deletes of shared values fails (a crash there), the store holds no
// shared value without a mark, no mark whose key does not hold that value
// and no record whose value is gone.
func TestSharedValuesSurviveACrash(t *testing.T) {
	ctx := context.Background()
	card := bytes.Repeat([]byte(`{"name":"echo","description":"says it again and again"},`), 400)
	did, id := datastore.NewKey("/did-key"), datastore.NewKey("/id-key")
	steps := []func(c compressedValues) error{
		func(c compressedValues) error { return c.Put(ctx, did, dhtRecord(t, "/mesh-agent/did", card)) },
		func(c compressedValues) error { return c.Put(ctx, id, dhtRecord(t, "/mesh-aid/id", card)) },
		func(c compressedValues) error {
			return c.Put(ctx, did, dhtRecord(t, "/mesh-agent/did", append(bytes.Clone(card), ' ')))
		},
		func(c compressedValues) error { return c.Delete(ctx, id) },
		func(c compressedValues) error { return c.Delete(ctx, did) },
	}
	for failAt := 1; failAt <= 12; failAt++ {
		inner := dssync.MutexWrap(datastore.NewMapDatastore())
		c := newValues(&faultyValues{Batching: inner, failAt: failAt})
		for _, step := range steps {
			step(c)
		}
		if bad := strayShares(t, inner); bad != "" {
			t.Fatalf("a crash at write %d: %s", failAt, bad)
		}
	}
}

// strayShares names what store holds of shared values that no record
// holds, or a record whose shared value is gone; "" when none.
func strayShares(t *testing.T, store datastore.Datastore) string {
	t.Helper()
	held := keysIn(t, store)
	refs := map[string]bool{} // "<hash>/<key>"
	for k := range held {
		if strings.HasPrefix(k, sharedNS+"/") {
			continue
		}
		v, _ := store.Get(context.Background(), datastore.NewKey(k))
		if h, _, ok := sharedRef(v); ok {
			if _, ok := held[sharedKey(h).String()]; !ok {
				return k + " holds a shared value that is gone"
			}
			refs[sharedKey(h).String()+k] = true
		}
	}
	for k := range held {
		rest, ok := strings.CutPrefix(k, sharedNS+"/")
		if !ok {
			continue
		}
		if hash, key, isMark := strings.Cut(rest, "/"); isMark && !refs[k] {
			return "a mark of " + hash[:8] + " for /" + key + ", which does not hold it"
		} else if !isMark && !hasMark(held, k) {
			return "a shared value " + hash[:8] + " with no mark"
		}
	}
	return ""
}

func hasMark(held map[string]int, value string) bool {
	for k := range held {
		if strings.HasPrefix(k, value+"/") {
			return true
		}
	}
	return false
}
