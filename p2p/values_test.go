package p2p

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ipfs/go-datastore"
	dsq "github.com/ipfs/go-datastore/query"
	dssync "github.com/ipfs/go-datastore/sync"
	dstest "github.com/ipfs/go-datastore/test"
	"github.com/klauspost/compress/zstd"
	record "github.com/libp2p/go-libp2p-record"
	recpb "github.com/libp2p/go-libp2p-record/pb"
	"google.golang.org/protobuf/proto"

	"github.com/agentmesh/mesh/internal/testkit"
)

// TestCompressedValues: values come back as put, by Get and by Query,
// while the store holds them compressed.
func TestCompressedValues(t *testing.T) {
	ctx := context.Background()
	inner := dssync.MutexWrap(datastore.NewMapDatastore())
	c := newValues(inner)
	value := bytes.Repeat([]byte(`{"name":"echo","description":"says it again"}`), 500)
	for _, k := range []string{"/mesh-agent/a", "/mesh-aid/a", "/other/b"} {
		if err := c.Put(ctx, datastore.NewKey(k), value); err != nil {
			t.Fatal(err)
		}
	}
	key := datastore.NewKey("/mesh-agent/a")
	if got, err := c.Get(ctx, key); err != nil || !bytes.Equal(got, value) {
		t.Fatalf("get: %d bytes, %v", len(got), err)
	}
	if n, err := c.GetSize(ctx, key); err != nil || n != len(value) {
		t.Fatalf("size: %d, %v", n, err)
	}
	if stored, _ := inner.Get(ctx, key); len(stored) >= len(value)/10 {
		t.Fatalf("stored %d bytes of %d", len(stored), len(value))
	}
	res, err := c.Query(ctx, dsq.Query{Prefix: "/mesh-agent"})
	if err != nil {
		t.Fatal(err)
	}
	entries, _ := res.Rest()
	if len(entries) != 1 || entries[0].Key != "/mesh-agent/a" || !bytes.Equal(entries[0].Value, value) {
		t.Fatalf("query: %d entries", len(entries))
	}
	b, _ := c.Batch(ctx)
	b.Put(ctx, datastore.NewKey("/batch/x"), value)
	b.Commit(ctx)
	if got, err := c.Get(ctx, datastore.NewKey("/batch/x")); err != nil || !bytes.Equal(got, value) {
		t.Fatalf("a batch's value: %d bytes, %v", len(got), err)
	}
	// A frame naming 1 GiB (a header changed on disk): refused for it.
	inner.Put(ctx, key, []byte{0x28, 0xb5, 0x2f, 0xfd, 0xc0, 0x00, 0, 0, 0, 0x40, 0, 0, 0, 0, 0x09, 0x00, 0x00, 'x'})
	if _, err := c.Get(ctx, key); !errors.Is(err, zstd.ErrDecoderSizeExceeded) {
		t.Fatalf("a frame naming 1 GiB: %v", err)
	}
}

// TestCompressedValuesDatastore: compressed values answer as go-datastore
// asks of any datastore (its own suite), queries decompressing a value
// at a time.
func TestCompressedValuesDatastore(t *testing.T) {
	dstest.SubtestAll(t, newValues(dssync.MutexWrap(datastore.NewMapDatastore())))
}

// writeCounter counts the values written to the datastore it wraps.
type writeCounter struct {
	datastore.Batching
	puts atomic.Int64
}

func (w *writeCounter) Put(ctx context.Context, key datastore.Key, value []byte) error {
	w.puts.Add(1)
	return w.Batching.Put(ctx, key, value)
}

// Batch counts the values its batches write.
func (w *writeCounter) Batch(context.Context) (datastore.Batch, error) {
	return datastore.NewBasicBatch(w), nil
}

// TestDHTServerWritesARecordOnce: a peer that puts the same record to a
// DHT server again and again has it written once to the server's store
// of values (kad-dht takes a record the validator does not rank below
// the one held, and the same record is not below itself); a new record
// is written.
func TestDHTServerWritesARecordOnce(t *testing.T) {
	t.Parallel()
	validators := map[string]record.Validator{"t": testValidator{}}
	values := &writeCounter{Batching: dssync.MutexWrap(datastore.NewMapDatastore())}
	server := startHost(t, Config{DHTServer: true, Validators: validators, Values: values})
	peer := startHost(t, Config{Validators: validators})
	connect(t, peer, server)
	testkit.Eventually(t, 10*time.Second, func() bool { return peer.dht.RoutingTable().Find(server.ID()) != "" },
		"the server in the peer's routing table")
	for range 20 {
		if err := peer.PutValue(t.Context(), "/t/k", []byte("ok1")); err != nil {
			t.Fatal(err)
		}
	}
	if n := values.puts.Load(); n != 1 {
		t.Fatalf("one record put 20 times: %d writes", n)
	}
	if err := peer.PutValue(t.Context(), "/t/k", []byte("ok2")); err != nil {
		t.Fatal(err)
	}
	if got, err := server.LocalValue(t.Context(), "/t/k"); err != nil || string(got) != "ok2" || values.puts.Load() != 2 {
		t.Fatalf("a newer record: %q %v, %d writes", got, err, values.puts.Load())
	}
}

// TestRecordPutAgainRenewed: a record put again unchanged is written again
// (received anew) once the one held came renewAfter before, not sooner.
func TestRecordPutAgainRenewed(t *testing.T) {
	ctx := t.Context()
	values := &writeCounter{Batching: dssync.MutexWrap(datastore.NewMapDatastore())}
	c := newValues(values)
	key := datastore.NewKey("/t/k")
	stored := func(came time.Time) []byte {
		b, _ := proto.Marshal(&recpb.Record{Key: []byte("/t/k"), Value: []byte("ok1"), TimeReceived: came.UTC().Format(time.RFC3339Nano)})
		return b
	}
	now := time.Now()
	for _, step := range []struct {
		came   time.Time
		writes int64
	}{
		{now.Add(-renewAfter - time.Minute), 1}, // the first
		{now, 2},                                // held for longer than renewAfter: received anew
		{now.Add(time.Minute), 2},               // held since now: not written
	} {
		if err := c.Put(ctx, key, stored(step.came)); err != nil {
			t.Fatal(err)
		}
		if n := values.puts.Load(); n != step.writes {
			t.Fatalf("record received at %v: %d writes, want %d", step.came, n, step.writes)
		}
	}
	if got, _ := c.Get(ctx, key); !bytes.Equal(got, stored(now)) {
		t.Fatal("the record held is not the one received last")
	}
}
