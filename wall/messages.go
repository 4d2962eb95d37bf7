package wall

import (
	"context"
	"encoding/json"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// pendingAck is a message sent from here whose ack waits for receipts from
// the nodes that served the cluster when it was sent.
type pendingAck struct {
	expect   map[peer.ID]bool
	got      map[peer.ID]bool
	remote   int           // deliveries the receipts report
	complete chan struct{} // closed once every expected node answered
}

func (p *pendingAck) answered() bool {
	for n := range p.expect {
		if !p.got[n] {
			return false
		}
	}
	return true
}

// handleSend acts on a frame from socket s: queues it to the addressed
// sockets here, publishes it to the cluster's other nodes, and acks it
// once every node reported its deliveries (or AckWindow passed).
func (r *room) handleSend(s *socket, data []byte) {
	snd, err := decodeFrame(data)
	if err != nil {
		fe := err.(*frameError)
		s.send(outFrame{data: errorFrameBytes(fe.code, "%s", fe.detail)})
		return
	}
	w := wireMsg{T: wireMessage, ID: newMsgID(), From: s.handle, FromDID: s.did, To: snd.To,
		TS: r.svc.cfg.Now().UnixMilli(), Payload: snd.Payload}
	local := newDelivery()
	p := &pendingAck{expect: map[peer.ID]bool{}, got: map[peer.ID]bool{}, complete: make(chan struct{})}
	r.mu.Lock()
	for n := range r.remote {
		p.expect[n] = true
	}
	if len(p.expect) == 0 {
		close(p.complete)
	}
	r.pending[w.ID] = p
	r.fanOutLocked(&w, s, local)
	r.mu.Unlock()
	local.seal()
	r.svc.metrics.messages.Inc()
	r.publish(w)
	r.goroutine(func() { r.awaitAck(s, snd.AckTo, w.ID, local, p) })
}

// fanOutLocked queues message w to the local sockets it addresses, but
// skip, counting deliveries to non-ghost sockets in d.
func (r *room) fanOutLocked(w *wireMsg, skip *socket, d *delivery) {
	frame := func(to *string) outFrame {
		return outFrame{data: encodeFrame(messageFrame{Kind: KindMessage, From: w.From, FromDID: w.FromDID,
			To: to, TS: w.TS, Payload: w.Payload})}
	}
	queue := func(s *socket, f outFrame) {
		if s == skip {
			return
		}
		if !s.ghost() {
			d.add()
			f.d = d
		}
		s.send(f)
	}
	if w.To == nil {
		f := frame(nil)
		for s := range r.sockets {
			queue(s, f)
		}
		return
	}
	// Direct: each addressed handle gets the frame with "to" naming it.
	// Scanning the sockets once per message keeps this O(sockets).
	frames := make(map[string]outFrame, len(w.To))
	for s := range r.sockets {
		if !slices.Contains(w.To, s.handle) {
			continue
		}
		f, ok := frames[s.handle]
		if !ok {
			f = frame(&s.handle)
			frames[s.handle] = f
		}
		queue(s, f)
	}
}

// awaitAck sends s the ack of message id: local deliveries plus what the
// other nodes' receipts report, once all are in or AckWindow has passed.
func (r *room) awaitAck(s *socket, ackTo any, id string, local *delivery, p *pendingAck) {
	window := time.NewTimer(r.svc.cfg.AckWindow)
	defer window.Stop()
	for _, done := range []<-chan struct{}{local.done, p.complete} {
		select {
		case <-done:
		case <-window.C:
		case <-r.ctx.Done():
			return
		}
	}
	r.mu.Lock()
	delete(r.pending, id)
	n := int(local.received.Load()) + p.remote
	r.mu.Unlock()
	s.send(outFrame{data: encodeFrame(ackFrame{Kind: KindAck, To: ackTo, Delivered: n})})
}

// deliverRemote queues a message from another node to the sockets here
// and sends that node a receipt of how many received it.
func (r *room) deliverRemote(origin peer.ID, w *wireMsg) {
	d := newDelivery()
	r.mu.Lock()
	r.nodeLocked(origin)
	r.fanOutLocked(w, nil, d)
	r.mu.Unlock()
	d.seal()
	r.goroutine(func() {
		wait := time.NewTimer(r.svc.cfg.AckWindow / 2)
		defer wait.Stop()
		select {
		case <-d.done:
		case <-wait.C:
		case <-r.ctx.Done():
			return
		}
		rc, _ := json.Marshal(receipt{Cluster: r.cl.ID, ID: w.ID, Delivered: int(d.received.Load())})
		ctx, cancel := context.WithTimeout(r.ctx, r.svc.cfg.AckWindow)
		defer cancel()
		if _, err := r.svc.cfg.Host.Request(ctx, origin, receiptProto, rc, 16); err != nil {
			r.svc.log.Debug("receipt not delivered", "cluster", r.cl.ID, "to", origin, "err", err)
		}
	})
}

// receipt records node from's deliveries of a message sent from here.
func (r *room) receipt(from peer.ID, rc receipt) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.pending[rc.ID]
	if p == nil || p.got[from] || rc.Delivered < 0 || rc.Delivered > maxSocketsPerNode {
		return
	}
	p.got[from] = true
	p.remote += rc.Delivered
	if p.expect[from] && p.answered() {
		close(p.complete)
	}
}

// maxSocketsPerNode bounds what a receipt may claim.
const maxSocketsPerNode = 1 << 20
