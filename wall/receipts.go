package wall

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Receipts cross to a message's origin node in batches: per node, one
// request at a time carries every receipt queued while the one before was
// on its way. A burst of messages costs a few streams, not one each: a
// stream per receipt ran into libp2p's resource manager (by default 64
// inbound streams per protocol and peer), and a receipt refused there made
// an ack undercount.
const (
	maxReceiptBatch = 512 // receipts per request
	// maxReceiptReq bounds a receipt request: a receipt is about 90 bytes.
	maxReceiptReq = maxReceiptBatch * 160
	// maxQueuedReceipts bounds the receipts waiting for one node; past it
	// they are dropped (that node's acks then count fewer sockets).
	maxQueuedReceipts = 16 * maxReceiptBatch
)

// receiptBatch is a receipt request.
type receiptBatch struct {
	Receipts []receipt `json:"receipts"`
}

// receiptQueues holds the receipts waiting for each node. A node with an
// entry has a sender running.
type receiptQueues struct {
	mu sync.Mutex
	q  map[peer.ID][]receipt
}

// queueReceipt queues rc for node p and starts p's sender if none runs.
func (s *Service) queueReceipt(p peer.ID, rc receipt) {
	s.receipts.mu.Lock()
	q, running := s.receipts.q[p]
	if len(q) >= maxQueuedReceipts {
		s.receipts.mu.Unlock()
		s.log.Debug("receipt dropped", "cluster", rc.Cluster, "to", p)
		return
	}
	s.receipts.q[p] = append(q, rc)
	s.receipts.mu.Unlock()
	if !running && !s.goroutine(func() { s.sendReceipts(p) }) {
		s.receipts.mu.Lock() // closing: nobody sends them
		delete(s.receipts.q, p)
		s.receipts.mu.Unlock()
	}
}

// sendReceipts sends node p's queued receipts, in batches, until none is
// left.
func (s *Service) sendReceipts(p peer.ID) {
	for {
		s.receipts.mu.Lock()
		q := s.receipts.q[p]
		if len(q) == 0 || s.ctx.Err() != nil {
			delete(s.receipts.q, p)
			s.receipts.mu.Unlock()
			return
		}
		n := min(len(q), maxReceiptBatch)
		s.receipts.q[p] = q[n:]
		s.receipts.mu.Unlock()
		body, _ := json.Marshal(receiptBatch{Receipts: q[:n]})
		ctx, cancel := context.WithTimeout(s.ctx, s.cfg.AckWindow)
		if _, err := s.cfg.Host.Request(ctx, p, receiptProto, body, 16); err != nil {
			s.log.Debug("receipts not delivered", "to", p, "n", n, "err", err)
		}
		cancel()
	}
}

// serveReceipts takes a batch of receipts from node from.
func (s *Service) serveReceipts(_ context.Context, from peer.ID, raw []byte) ([]byte, error) {
	var b receiptBatch
	if err := json.Unmarshal(raw, &b); err != nil {
		return nil, err
	}
	if len(b.Receipts) > maxReceiptBatch {
		return nil, fmt.Errorf("%d receipts in one request (at most %d)", len(b.Receipts), maxReceiptBatch)
	}
	for _, rc := range b.Receipts {
		s.takeReceipt(from, rc)
	}
	return []byte{}, nil
}

// serveReceipt takes one receipt (receiptProtoV1) from node from.
func (s *Service) serveReceipt(_ context.Context, from peer.ID, raw []byte) ([]byte, error) {
	var rc receipt
	if err := json.Unmarshal(raw, &rc); err != nil {
		return nil, err
	}
	s.takeReceipt(from, rc)
	return []byte{}, nil
}

func (s *Service) takeReceipt(from peer.ID, rc receipt) {
	if r := s.room(rc.Cluster); r != nil {
		r.receipt(from, rc)
	}
}
