package wall

import (
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/agentmesh/mesh/internal/clock"
)

// sent is a frame a socket here sent, until it is answered: for a message,
// its local deliveries and the receipts of the nodes that served the
// cluster when it was sent, then an ack; for a refused frame, its error
// frame.
type sent struct {
	refusal  []byte // the error frame of a refused frame
	id       string
	ackTo    any
	local    *delivery
	expect   map[peer.ID]bool // nodes whose receipt is still due
	remote   int              // deliveries the receipts report
	complete chan struct{}    // closed once every expected node answered
	window   clock.Timer      // fires when the ack goes, complete or not
}

// maxReceipt bounds the deliveries one receipt may claim: more sockets
// than one node holds in one cluster.
const maxReceipt = 1 << 16

// handleSend acts on a frame from socket s (or the reason readLoop refused
// it): publishes it to the cluster's other nodes, queues it to the
// addressed sockets here, and acks it once every node reported its
// deliveries (or AckWindow passed). A frame that is refused or cannot be
// sent gets an error frame instead of an ack. Answers go out in the order
// of the frames; while maxUnanswered await theirs, or while the room's
// rate (RoomRate) does not allow another message, the socket is not read.
func (r *room) handleSend(s *socket, data []byte, refused error) {
	if !r.awaitRoom(s) {
		return
	}
	err := refused
	if err == nil {
		var snd send
		if snd, err = decodeFrame(data); err == nil {
			if !s.pace(r.sendLimit, r.ctx.Done(), paceCluster) ||
				r.servedElsewhere() && !s.pace(r.topicLimit, r.ctx.Done(), paceMesh) {
				return
			}
			err = r.sendMessage(s, snd)
		}
	}
	if err != nil {
		var fe *frameError
		if !errors.As(err, &fe) {
			fe = badFrame("internal", "the frame could not be sent")
		}
		r.queueAnswer(s, &sent{refusal: errorFrameBytes(fe.code, "%s", fe.detail)})
	}
}

// awaitRoom waits until socket s has fewer than maxUnanswered frames awaiting
// their answer, or whose answer is not written yet; false if the socket
// or the room closes first.
func (r *room) awaitRoom(s *socket) bool {
	for {
		s.mu.Lock()
		n := len(s.unanswered) + s.answers + s.answering
		s.mu.Unlock()
		if n < maxUnanswered {
			return true
		}
		select {
		case <-s.freed:
		case <-s.done:
			return false
		case <-r.ctx.Done():
			return false
		}
	}
}

// sendMessage publishes msg from socket s and queues it to the sockets
// here; the ack follows.
func (r *room) sendMessage(s *socket, snd send) error {
	w := wireMsg{T: wireMessage, ID: newMsgID(), From: s.handle, FromDID: s.did, Verified: s.proof != "", To: snd.To,
		TS: r.svc.now().UnixMilli(), Payload: snd.Payload}
	w.Board, w.Ref = r.svc.resolveTags(r, snd.Payload)
	if size, envelope := messageFrameSize(&w); size > MaxFrame {
		return badFrame("frame_too_large", "the message frame your peers would receive is %d bytes (a payload of %d bytes as sent, in an envelope of %d: kind, from, from_did, to, ts), over the %d-byte limit: send at most %d bytes of payload, or link large content by url",
			size, len(w.Payload), envelope, MaxFrame, MaxFrame-envelope)
	}
	p := &sent{id: w.ID, ackTo: snd.AckTo, local: newDelivery(), expect: map[peer.ID]bool{},
		complete: make(chan struct{}), window: r.svc.cfg.Clock.NewTimer(r.svc.cfg.AckWindow)}
	r.mu.Lock()
	if !r.mayHoldLocked(s) { // its handle was proved by another socket since it connected (identity.go)
		w.FromDID, w.Verified = "", false
	}
	for id, n := range r.remote {
		if n.known {
			p.expect[id] = true
		}
	}
	if len(p.expect) == 0 {
		close(p.complete)
	}
	r.pending[w.ID] = p
	r.mu.Unlock()
	if err := r.publishMessage(&w); err != nil {
		r.mu.Lock()
		delete(r.pending, w.ID)
		r.mu.Unlock()
		p.window.Stop()
		return badFrame("not_sent", "the message could not be relayed to the cluster's other nodes, so it was sent to nobody: %v", err)
	}
	r.mu.Lock()
	r.fanOutLocked(&w, s, p.local)
	r.mu.Unlock()
	p.local.seal()
	r.svc.metrics.messages.Inc()
	r.queueAnswer(s, p)
	return nil
}

// servedElsewhere reports whether another node is known to serve the
// cluster: then what the room publishes must stay within what that node
// takes from it (topicRate).
func (r *room) servedElsewhere() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range r.remote {
		if n.known {
			return true
		}
	}
	return false
}

// topicRate is the pace of the messages a room publishes while other
// nodes serve the cluster, whatever RoomRate says: other nodes take
// Tuning.PeerRate topic messages a second from this one (bursts of twice
// that), presence deltas (deltaRate) and beats included, and shed the
// rest; a node is assumed to have the same PeerRate as its peers.
func topicRate(peerRate float64) float64 { return max(peerRate-deltaRate-1, peerRate/2) }

// maxUnanswered bounds the frames of one socket awaiting their answers.
const maxUnanswered = 256

// publishMessage numbers w in the room's sequence and publishes it; the
// lock keeps publication in sequence order. Once the room said goodbye it
// fails with errRoomClosed.
func (r *room) publishMessage(w *wireMsg) error {
	r.pubMu.Lock()
	defer r.pubMu.Unlock()
	if r.gone {
		return errRoomClosed
	}
	w.Epoch, w.Seq = r.epoch, r.seq.Add(1)
	if err := r.publish(*w); err != nil {
		r.seq.Add(^uint64(0)) // not sent: the next message takes its number
		return err
	}
	return nil
}

// fanOutLocked queues message w to the local sockets it addresses, but
// skip, counting deliveries to non-ghost sockets in d. A spectator gets
// every direct message: the frame of each addressed handle.
func (r *room) fanOutLocked(w *wireMsg, skip *socket, d *delivery) {
	frame := func(to *string) outFrame { return text(encodeMessage(w, to)) }
	queue := func(s *socket, f outFrame) {
		if !s.ghost() {
			d.add()
			f.d = d
		}
		s.send(f)
	}
	if w.To == nil {
		f := frame(nil)
		for s := range r.sockets {
			if s != skip && !s.eventsOnly {
				queue(s, f)
			}
		}
		return
	}
	// Direct: each addressed handle gets the frame with "to" naming it.
	// Scanning the sockets once per message keeps this O(sockets).
	frames := make(map[string]outFrame, len(w.To))
	frameTo := func(h string) outFrame {
		f, ok := frames[h]
		if !ok {
			f = frame(&h)
			frames[h] = f
		}
		return f
	}
	var present []string // addressed handles online in the room, for spectators
	spectated := func() []string {
		if present == nil {
			present = []string{}
			for _, h := range w.To {
				if _, ok := r.presentLocked(h); ok {
					present = append(present, h)
				}
			}
		}
		return present
	}
	for s := range r.sockets {
		switch {
		case s == skip, s.readOnly:
		case s.spectator:
			// Only the frames an addressee gets: handles made up by the
			// sender would otherwise fill a spectator's queue.
			for _, h := range spectated() {
				queue(s, frameTo(h))
			}
		case slices.Contains(w.To, s.handle) && r.mayHoldLocked(s):
			queue(s, frameTo(s.handle))
		}
	}
}

// encodeMessage is the message frame of w to the sockets of handle to
// (nil: a broadcast).
func encodeMessage(w *wireMsg, to *string) []byte {
	return encodeFrame(messageFrame{Kind: KindMessage, From: w.From, FromDID: w.FromDID, Verified: w.Verified, To: to, TS: w.TS, Payload: w.Payload,
		Board: w.Board, Ref: w.Ref})
}

// messageFrameSize is the size of the largest frame message w makes (of a
// direct message, the frame to its longest addressed handle as JSON), and
// of its envelope: everything but the payload.
func messageFrameSize(w *wireMsg) (size, envelope int) {
	zero := &wireMsg{From: w.From, FromDID: w.FromDID, TS: w.TS, Payload: json.RawMessage("0"), Board: w.Board, Ref: w.Ref}
	envelope = len(encodeMessage(zero, nil)) - len("0")
	if len(w.To) > 0 {
		longest := 0
		for _, h := range w.To {
			b, _ := marshal(h)
			longest = max(longest, len(b))
		}
		envelope += longest - len("null")
	}
	return envelope + len(w.Payload), envelope
}

// queueAnswer queues the answer to p behind socket s's earlier ones.
func (r *room) queueAnswer(s *socket, p *sent) {
	s.mu.Lock()
	s.unanswered = append(s.unanswered, p)
	start := !s.acking
	s.acking = true
	s.mu.Unlock()
	if start {
		r.goroutine(func() { r.ackLoop(s) })
	}
}

// ackLoop answers socket s's frames in order: each message's ack once its
// deliveries are all counted or its deadline passed, each refused frame's
// error frame. It runs while answers are due, so that an idle socket holds
// no goroutine.
func (r *room) ackLoop(s *socket) {
	for {
		s.mu.Lock()
		if len(s.unanswered) == 0 {
			s.acking, s.unanswered = false, nil
			s.mu.Unlock()
			return
		}
		p := s.unanswered[0]
		s.mu.Unlock()
		answer := p.refusal
		if answer == nil {
			n, ok := r.awaitAck(p)
			if !ok {
				return // the room closes
			}
			answer = encodeFrame(ackFrame{Kind: KindAck, To: p.ackTo, Delivered: n})
		}
		s.mu.Lock()
		s.unanswered = s.unanswered[1:]
		s.mu.Unlock()
		f := text(answer)
		f.answer = true
		s.send(f)
	}
}

// awaitAck waits for p's deliveries to be counted, or its window, and
// returns them; false when the room closes first.
func (r *room) awaitAck(p *sent) (int, bool) {
	defer p.window.Stop()
	for _, done := range []<-chan struct{}{p.local.done, p.complete} {
		select {
		case <-done:
			continue
		case <-p.window.C():
		case <-r.ctx.Done():
			return 0, false
		}
		break // the window passed: the ack says what is counted by now
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.pending, p.id)
	if len(p.expect) > 0 {
		// A node did not report in time: it shed the message (its topic
		// rate, counted there in mesh_p2p_dropped_total), lost it or is
		// slow. The ack counts what was reported.
		r.svc.metrics.acksShort.Inc()
	}
	return int(p.local.received.Load()) + p.remote, true
}

// deliverRemote takes a message from another node. The node's sequencer
// puts its messages back in the order sent; each goes to the sockets it
// addresses here, and the node, if known, gets a receipt of how many
// received it (a stranger may be a key made up for one message: no
// receipt is sent to it).
func (r *room) deliverRemote(origin peer.ID, w *wireMsg) {
	late, known := false, false
	r.change(nil, func(touch func(string)) {
		n := r.nodeLocked(origin)
		if n == nil {
			return
		}
		var ready []*wireMsg
		ready, late = n.order.add(w, r.svc.waited())
		known = n.known
		r.fanOutRemoteLocked(origin, n, ready, touch)
	})
	if late && known {
		r.goroutine(func() { r.sendReceipt(origin, w.ID, nil) })
	}
}

// fanOutRemoteLocked delivers node origin's messages ready, then what the
// node said of its roster that waited for them (settleLocked).
func (r *room) fanOutRemoteLocked(origin peer.ID, n *remoteNode, ready []*wireMsg, touch func(string)) {
	r.deliverReadyLocked(origin, n, ready)
	r.settleLocked(origin, n, touch)
}

// deliverReadyLocked delivers node origin's messages ready, in order.
func (r *room) deliverReadyLocked(origin peer.ID, n *remoteNode, ready []*wireMsg) {
	for _, w := range ready {
		w = r.believedLocked(n, w)
		d := newDelivery()
		r.fanOutLocked(w, nil, d)
		d.seal()
		if n.known {
			r.goroutine(func() { r.sendReceipt(origin, w.ID, d) })
		}
	}
}

// believedLocked is message w of node n as this node passes it on. A
// stranger is a key no node checked: what it says of a sender's did is
// not passed on. A known node's message is verified only as its roster
// proves it; and one that is not, from a handle held by a member who
// proved its did (identity.go), does not carry a did either: only that
// member speaks with it (its node may not have heard of the proof yet
// when it sent the message, or be of the release before).
func (r *room) believedLocked(n *remoteNode, w *wireMsg) *wireMsg {
	did, verified := w.FromDID, w.Verified
	if m, ok := n.members[w.From]; !n.known || !ok || !m.verified() || m.DID != did {
		verified = false
	}
	switch {
	case !n.known:
		did = ""
	case !verified && did != "":
		if _, held := r.provedHolderLocked(w.From); held {
			did = ""
		}
	}
	if did == w.FromDID && verified == w.Verified {
		return w
	}
	b := *w
	b.FromDID, b.Verified = did, verified
	return &b
}

// flushAt delivers, at time at, what node p's sequencer gave up waiting
// for, and what waited for that. The timer decides when: what was due at
// at goes then, also on a clock whose Now stands still (Config.Clock).
func (r *room) flushAt(p peer.ID, at time.Time) {
	t := r.svc.cfg.Clock.NewTimer(at.Sub(r.svc.waited()))
	defer t.Stop()
	select {
	case <-t.C():
	case <-r.ctx.Done():
		return
	}
	now := r.svc.waited()
	r.change(nil, func(touch func(string)) {
		if n := r.remote[p]; n != nil {
			n.flushing = false
			r.fanOutRemoteLocked(p, n, n.order.release(later(now, at)), touch)
		}
	})
}

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// sendReceipt tells node origin how many sockets here received message
// id, once d counted them all or half the ack window passed (nil d: none).
func (r *room) sendReceipt(origin peer.ID, id string, d *delivery) {
	delivered := 0
	if d != nil {
		wait := r.svc.cfg.Clock.NewTimer(r.svc.cfg.AckWindow / 2)
		defer wait.Stop()
		select {
		case <-d.done:
		case <-wait.C():
		case <-r.ctx.Done():
			return
		}
		delivered = int(d.received.Load())
	}
	r.svc.queueReceipt(origin, receipt{Cluster: r.cl.ID, ID: id, Delivered: delivered})
}

// receipt records node from's deliveries of a message sent from here: one
// receipt per node the message expects, within reason.
func (r *room) receipt(from peer.ID, rc receipt) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.pending[rc.ID]
	if p == nil || !p.expect[from] || rc.Delivered < 0 {
		return
	}
	delete(p.expect, from)
	p.remote += min(rc.Delivered, maxReceipt)
	if len(p.expect) == 0 {
		close(p.complete)
	}
}
