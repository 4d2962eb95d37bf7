package wall

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/testkit"
	"github.com/agentmesh/mesh/p2p"
)

// TestReceiptsAreBatched: a burst of receipts for one node reaches it
// whole, in a few requests rather than a stream each (which libp2p's
// resource manager would refuse past 64 at once).
func TestReceiptsAreBatched(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	origin, err := p2p.New(p2p.Config{Key: identity.GenerateKey(), Listen: []string{"/ip4/127.0.0.1/tcp/0"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := origin.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { origin.Close() })
	var requests, receipts atomic.Int64
	origin.HandleRequests(receiptProto, maxReceiptReq, func(_ context.Context, _ peer.ID, raw []byte) ([]byte, error) {
		var b receiptBatch
		if err := json.Unmarshal(raw, &b); err != nil {
			return nil, err
		}
		requests.Add(1)
		receipts.Add(int64(len(b.Receipts)))
		return []byte{}, nil
	})
	if err := h.host.Connect(context.Background(), peer.AddrInfo{ID: origin.ID(), Addrs: origin.Libp2p().Addrs()}); err != nil {
		t.Fatal(err)
	}
	const n = 2000
	for i := range n {
		h.svc.queueReceipt(origin.ID(), receipt{Cluster: "c_x", ID: newMsgID(), Delivered: i % 3})
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return receipts.Load() == n }, "not every receipt arrived")
	if r := requests.Load(); r > n/10 {
		t.Fatalf("%d receipts took %d requests", n, r)
	}
	t.Logf("%d receipts in %d requests", n, requests.Load())
}

// TestReceiptBatchBounds: a receipt request over the batch bound is
// refused whole; a single receipt of the earlier protocol is taken.
func TestReceiptBatchBounds(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	big, _ := json.Marshal(receiptBatch{Receipts: make([]receipt, maxReceiptBatch+1)})
	if _, err := h.svc.serveReceipts(context.Background(), "", big); err == nil {
		t.Fatal("an oversized batch was taken")
	}
	for _, raw := range []string{`{"receipts":[{"cluster":"c_x","id":"m","delivered":1}]}`, `{"receipts":[]}`, `{}`} {
		if _, err := h.svc.serveReceipts(context.Background(), "", []byte(raw)); err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
	}
	if _, err := h.svc.serveReceipt(context.Background(), "", []byte(`{"cluster":"c_x","id":"m","delivered":1}`)); err != nil {
		t.Fatal(err)
	}
	for _, raw := range []string{`[`, `{"receipts":{}}`} {
		if _, err := h.svc.serveReceipts(context.Background(), "", []byte(raw)); err == nil {
			t.Fatalf("%s was taken", raw)
		}
	}
}
