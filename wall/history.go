package wall

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/agentmesh/mesh/internal/cmdlog"
	"github.com/agentmesh/mesh/internal/httpx"
	"github.com/agentmesh/mesh/p2p"
	"github.com/agentmesh/mesh/store"
)

// The owner history: the wall keeps no messages, so what an owner audits
// is who came and went: a join and a leave event for every non-ghost
// socket, on whatever node (the lobby, which has no owner, keeps none).
// Each node reports its sockets' events to the directory node, which keeps
// the newest historyKeep of each cluster; a private cluster's events are
// sealed with its wire key, so the directory holds only ciphertext. Any
// node serves GET history to a holder of the cluster's token or admin
// token: it fetches the events from the directory and opens them itself.
//
// The directory never sees a token, yet serves reads only to token
// holders: the reading node signs its request with the member key (the
// record's verifier is its public half), binding the operation, the
// cluster, its own peer id and the time. It takes appends only from nodes
// that serve the cluster (for a private one, a signature by the member
// key; for a public one, a roster the node answers, and then only events
// about its own sockets: historyscreen.go), at most historyRate events a
// second per node and cluster, and each node within its share of the
// window (appendEvents), so that no peer floods real events out. A v1
// record names no member key: its history is read only through the
// directory's own HTTP surface (takeAppend says what it takes).
const (
	historyProto     = p2p.ProtocolPrefix + "/wall/history/1.0.0"
	historyKeep      = 1000
	historyBatch     = 100
	maxHistoryBody   = 2 << 10
	maxHistoryReq    = historyBatch*(maxHistoryBody+64) + 1024
	maxHistoryResp   = historyKeep*(maxHistoryBody+128) + 1024
	historyQueue     = 4096
	sealHistory      = "history"
	defaultHistoryN  = 100
	historyAppend    = "append"
	historyRead      = "read"
	historyRetention = 30 * 24 * time.Hour
	// historyRate and historyBurst bound the events the directory takes
	// from one node for one cluster.
	historyRate  = 20
	historyBurst = 200
	// proofSkew bounds the age of a signed history request.
	proofSkew = 5 * time.Minute
	proofTag  = "MESHWALLHIST1\n"
)

// Event is one entry of a cluster's history.
type Event struct {
	At    time.Time `json:"at"` // when the directory recorded it
	Event string    `json:"event"`
	Agent string    `json:"agent"`
	DID   string    `json:"did,omitempty"`
	Vis   string    `json:"vis"`
	Node  string    `json:"node"` // peer id of the node the socket was on
}

type eventBody struct {
	Event string `json:"event"`
	Agent string `json:"agent"`
	DID   string `json:"did,omitempty"`
	Vis   string `json:"vis"`
}

type storedEvent struct {
	At   int64  `json:"at"` // Unix ms
	Node string `json:"node"`
	Body []byte `json:"body"`
}

type historyRequest struct {
	Op      string   `json:"op"`
	Cluster string   `json:"cluster"`
	Events  [][]byte `json:"events,omitempty"`
	Limit   int      `json:"limit,omitempty"`
	// At and Sig prove the asking node holds the member token: Sig is the
	// member key's signature of proofBody, At the Unix ms it was made.
	At  int64  `json:"at,omitempty"`
	Sig []byte `json:"sig,omitempty"`
}

// proofBody is what a history request's signature covers.
func proofBody(op, cluster string, node peer.ID, at int64) []byte {
	return []byte(proofTag + op + "\n" + cluster + "\n" + node.String() + "\n" + strconv.FormatInt(at, 10))
}

// sign proves that node, which sends q, holds key, the member key.
func (q *historyRequest) sign(key ed25519.PrivateKey, node peer.ID, now time.Time) {
	q.At = now.UnixMilli()
	q.Sig = ed25519.Sign(key, proofBody(q.Op, q.Cluster, node, q.At))
}

// signedBy reports whether q, from node, carries a recent signature by
// cl's member key.
func (q *historyRequest) signedBy(cl *Cluster, node peer.ID, now time.Time) bool {
	pub := cl.memberPub()
	age := now.Sub(time.UnixMilli(q.At)).Abs()
	return pub != nil && age <= proofSkew && ed25519.Verify(pub, proofBody(q.Op, q.Cluster, node, q.At), q.Sig)
}

type historyResponse struct {
	Events []storedEvent `json:"events"`
}

type pendingEvent struct {
	cluster string
	key     ed25519.PrivateKey // a private cluster's member key, else nil
	body    []byte
	join    *member // a public cluster's join: the member (pendingJoins)
}

// record queues an event of socket sk for the directory; it never blocks.
func (r *room) record(event string, sk *socket) {
	if sk.ghost() || r.cl.ID == LobbyID {
		return
	}
	body := encodeWire(r.seal, sealHistory, eventBody{Event: event, Agent: sk.handle, DID: sk.did, Vis: sk.vis})
	e := pendingEvent{cluster: r.cl.ID, key: r.memberKey, body: body}
	if event == "join" && r.cl.Public() {
		e.join = new(sk.member())
		r.svc.joins.add(e.cluster, *e.join, 1)
	}
	select {
	case r.svc.events <- e:
	default:
		r.svc.joins.done(e)
		r.svc.log.Warn("history queue full: event dropped", "cluster", r.cl.ID)
	}
}

// reportEvents sends queued events to the directory in batches per cluster.
func (s *Service) reportEvents() {
	for {
		var first pendingEvent
		select {
		case <-s.ctx.Done():
			return
		case first = <-s.events:
		}
		// A batch per cluster and key: a cluster whose visibility changed
		// has events of both forms queued, plain and sealed (signed).
		type batchKey struct{ cluster, key string }
		batch := map[batchKey][]pendingEvent{{first.cluster, string(first.key)}: {first}}
	drain:
		for range historyBatch - 1 {
			select {
			case e := <-s.events:
				k := batchKey{e.cluster, string(e.key)}
				batch[k] = append(batch[k], e)
			default:
				break drain
			}
		}
		for k, events := range batch {
			if err := s.appendRetrying(k.cluster, events); err != nil && s.ctx.Err() == nil {
				s.log.Warn("history events not recorded", "cluster", k.cluster, "n", len(events), "err", err)
			}
			for _, e := range events {
				s.joins.done(e)
			}
		}
	}
}

// historyRetries is how many times a batch the directory did not take is
// sent again, 1 s then 2 s later: its check of this node's roster may have
// timed out on a loaded node. A refusal, which this node cannot tell from
// a failure, is sent again too; it costs the directory a bounded rate.
const historyRetries = 2

// appendRetrying is appendHistory, retried.
func (s *Service) appendRetrying(id string, events []pendingEvent) error {
	for attempt := 0; ; attempt++ {
		err := s.appendHistory(id, events)
		if err == nil || attempt == historyRetries {
			return err
		}
		wait := s.cfg.Clock.NewTimer(time.Second << attempt)
		select {
		case <-s.ctx.Done():
			wait.Stop()
			return err
		case <-wait.C():
		}
	}
}

func (s *Service) appendHistory(id string, events []pendingEvent) error {
	bodies := make([][]byte, len(events))
	for i, e := range events {
		bodies[i] = e.body
	}
	self := s.cfg.Host.ID()
	var keepers []peer.ID
	if s.cfg.HistoryKeepers != nil {
		keepers = s.cfg.HistoryKeepers()
	}
	if len(keepers) == 0 && !s.isDirectory() {
		keepers = []peer.ID{s.cfg.Directory()}
	}
	var stored error
	if s.isDirectory() || (s.cfg.KeepsHistory && slices.Contains(keepers, self)) {
		if stored = s.storeEvents(id, self, bodies); len(keepers) == 0 {
			return stored
		}
	}
	q := historyRequest{Op: historyAppend, Cluster: id, Events: bodies}
	if key := events[0].key; key != nil {
		q.sign(key, self, s.now())
	}
	req, _ := json.Marshal(q)
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	defer cancel()
	// Each keeper keeps its own copy: the one that leads next must hold
	// the events too. A keeper that misses some has a shorter history.
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := []error{stored}
	for _, k := range keepers {
		if k == self {
			continue
		}
		wg.Go(func() {
			if _, err := s.cfg.Host.Request(ctx, k, historyProto, req, 64); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("%s: %w", k, err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (s *Service) isDirectory() bool {
	if s.cfg.Directory == nil {
		return true
	}
	d := s.cfg.Directory()
	return d == s.cfg.Host.ID() || (d == "" && s.cfg.KeepsHistory)
}

// Key layout of the history on the directory node:
//
//	w/h/<id>/<n 8B>            storedEvent, the n-th of the cluster
//	w/hn/<id>                  n of the newest event
//	w/hp/<id>/<node>/<n 8B>    the n-th event was reported by node
//	w/hj/<id>/<node>/<handle>  joins of handle node reported, less its leaves (historyscreen.go)
func eventKey(id string, n uint64) []byte { return store.Key("w", "h", id, store.U64(n)) }
func eventCountKey(id string) []byte      { return store.Key("w", "hn", id) }
func heldKey(id string, node string, n uint64) []byte {
	return store.Key("w", "hp", id, node, store.U64(n))
}

// storeEvents appends events reported by node from.
func (s *Service) storeEvents(id string, from peer.ID, bodies [][]byte) error {
	return s.storeEventsWith(id, from, func(*store.Txn) ([][]byte, error) { return bodies, nil })
}

// storeEventsWith appends the events pick returns, in the transaction
// that stores them.
func (s *Service) storeEventsWith(id string, from peer.ID, pick func(*store.Txn) ([][]byte, error)) error {
	if _, err := s.cfg.Catalog.Get(id); err != nil {
		return err
	}
	at := s.now().UnixMilli()
	return s.cfg.Catalog.db.Update(func(tx *store.Txn) error {
		bodies, err := pick(tx)
		if err != nil {
			return err
		}
		return appendEvents(tx, id, from.String(), bodies, at)
	})
}

// appendEvents appends events reported by node, keeping historyKeep in
// all. Each node has its share of the window: when it is full, the event
// that goes is the oldest of the node that holds the most (the appending
// node among equals). A node flooding the history so evicts only its own
// events once it holds the most, and a node holding no more than any
// other loses none to it: of K nodes, each keeps its newest historyKeep/K
// at least.
func appendEvents(tx *store.Txn, id, node string, bodies [][]byte, at int64) error {
	n, err := cmdlog.GetU64(tx, eventCountKey(id))
	if err != nil {
		return err
	}
	held, total, err := heldEvents(tx, id)
	if err != nil {
		return err
	}
	for _, b := range bodies {
		if len(b) > maxHistoryBody {
			continue
		}
		n++
		v, _ := json.Marshal(storedEvent{At: at, Node: node, Body: b})
		if err := tx.SetTTL(eventKey(id, n), v, historyRetention); err != nil {
			return err
		}
		if err := tx.SetTTL(heldKey(id, node, n), nil, historyRetention); err != nil {
			return err
		}
		held[node] = append(held[node], n)
		if total++; total > historyKeep {
			if err := evictEvent(tx, id, held, node); err != nil {
				return err
			}
			total--
		}
	}
	return tx.Set(eventCountKey(id), []byte(store.U64(n)))
}

// evictEvent deletes the oldest event of the node that holds the most:
// node among equals, else the one whose oldest is oldest.
func evictEvent(tx *store.Txn, id string, held map[string][]uint64, node string) error {
	victim := node
	for p, ns := range held {
		top := len(held[victim])
		if len(ns) > top || (len(ns) == top && victim != node && ns[0] < held[victim][0]) {
			victim = p
		}
	}
	oldest := held[victim][0]
	if held[victim] = held[victim][1:]; len(held[victim]) == 0 {
		delete(held, victim)
	}
	if err := tx.Delete(eventKey(id, oldest)); err != nil {
		return err
	}
	return tx.Delete(heldKey(id, victim, oldest))
}

// heldEvents returns, for each node, the events of id it reported, oldest
// first, and their total. A history stored before nodes' events were
// indexed is indexed now, once.
func heldEvents(tx *store.Txn, id string) (map[string][]uint64, int, error) {
	held, total := map[string][]uint64{}, 0
	prefix := store.Key("w", "hp", id, "")
	err := tx.Scan(prefix, nil, func(k, _ []byte) (bool, error) {
		if len(k) >= len(prefix)+9 {
			n, _ := store.ParseU64(string(k[len(k)-8:]))
			node := string(k[len(prefix) : len(k)-9])
			held[node] = append(held[node], n)
			total++
		}
		return true, nil
	})
	if err != nil || total > 0 {
		return held, total, err
	}
	err = tx.Scan(store.Key("w", "h", id, ""), nil, func(k, v []byte) (bool, error) {
		var e storedEvent
		n, ok := store.ParseU64(string(k[len(k)-8:]))
		if json.Unmarshal(v, &e) != nil || !ok {
			return true, nil
		}
		held[e.Node] = append(held[e.Node], n)
		total++
		return true, tx.SetTTL(heldKey(id, e.Node, n), nil, historyRetention)
	})
	return held, total, err
}

// readEvents returns up to limit of the newest stored events of id.
func (s *Service) readEvents(id string, limit int) ([]storedEvent, error) {
	var out []storedEvent
	err := s.cfg.Catalog.db.View(func(tx *store.Txn) error {
		return tx.Scan(store.Key("w", "h", id, ""), nil, func(_, v []byte) (bool, error) {
			var e storedEvent
			if json.Unmarshal(v, &e) == nil {
				out = append(out, e)
			}
			return true, nil
		})
	})
	out = out[max(0, len(out)-limit):]
	slices.Reverse(out)
	return out, err
}

// dropHistory forgets a deleted cluster's history.
func (s *Service) dropHistory(id string) {
	err := s.cfg.Catalog.db.Update(func(tx *store.Txn) error {
		keys := [][]byte{eventCountKey(id)}
		for _, prefix := range [][]byte{store.Key("w", "h", id, ""), store.Key("w", "hp", id, ""), store.Key("w", "hj", id, "")} {
			if err := tx.Scan(prefix, nil, func(k, _ []byte) (bool, error) {
				keys = append(keys, append([]byte(nil), k...))
				return true, nil
			}); err != nil {
				return err
			}
		}
		for _, k := range keys {
			if err := tx.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		s.log.Warn("dropping a deleted cluster's history failed", "cluster", id, "err", err)
	}
}

// errHistoryRefused: the directory does not take a history request from
// this node (it resets the stream).
var errHistoryRefused = errors.New("wall: history request refused")

// serveHistory is the directory's side of historyProto.
func (s *Service) serveHistory(ctx context.Context, from peer.ID, raw []byte) ([]byte, error) {
	var q historyRequest
	if err := json.Unmarshal(raw, &q); err != nil {
		return nil, err
	}
	// A keeper that is not the directory may not have applied a cluster
	// created a moment ago: it asks the directory before refusing.
	cl, err := s.cluster(ctx, q.Cluster, false)
	if err != nil {
		return nil, err
	}
	now := s.now()
	switch q.Op {
	case historyAppend:
		return []byte{}, s.takeAppend(ctx, cl, from, &q, now)
	case historyRead:
		if !q.signedBy(cl, from, now) {
			return nil, fmt.Errorf("%w: read from %s without the member key's signature", errHistoryRefused, from)
		}
		events, err := s.readEvents(cl.ID, min(max(q.Limit, 1), historyKeep))
		if err != nil {
			return nil, err
		}
		return json.Marshal(historyResponse{Events: events})
	}
	return nil, httpx.ErrInvalid
}

// takeAppend stores what the directory takes of an append from node from
// (see the top of this file and historyscreen.go): from a private
// cluster's member-key holder, its events; from a node serving a public
// cluster, those about its own sockets; for a v1 private cluster, which
// names no member key and whose roster the directory cannot read, the
// events of a node registered at the rendezvous for it (its id is known
// only to its members). Always at most historyRate a second.
//
// The form of the events, not the cluster's visibility now, decides: a
// cluster made private or public (cluster_update.go) still has events of
// its former form on their way. Sealed ones come signed by the member key
// (which a change to public keeps); plain ones are screened as a public
// cluster's, and for a cluster now private only leaves are taken so (of
// joins the directory took from that node: historyscreen.go).
func (s *Service) takeAppend(ctx context.Context, cl *Cluster, from peer.ID, q *historyRequest, now time.Time) error {
	sealed := q.Sig != nil && cl.memberPub() != nil || !cl.Public() && cl.memberPub() == nil
	switch {
	case cl.ID == LobbyID:
		return fmt.Errorf("%w: the lobby keeps no history", errHistoryRefused)
	case sealed && cl.memberPub() != nil && !q.signedBy(cl, from, now):
		return fmt.Errorf("%w: append from %s without the member key's signature", errHistoryRefused, from)
	case sealed && cl.memberPub() == nil && !s.cfg.Host.Served(topicOf(cl), from):
		return fmt.Errorf("%w: append from %s, which does not serve %s", errHistoryRefused, from, cl.ID)
	}
	events := q.Events[:min(len(q.Events), historyBatch)]
	events = events[:s.appendLimits.take(from, cl.ID, len(events))]
	if sealed || len(events) == 0 {
		return s.storeEvents(cl.ID, from, events)
	}
	sc, need, joins := decodeAppend(events)
	if joins && !cl.Public() {
		return fmt.Errorf("%w: unsigned joins from %s to private cluster %s", errHistoryRefused, from, cl.ID)
	}
	members, err := s.servingMembers(ctx, cl.ID, from, need, joins)
	if err != nil {
		return err
	}
	return s.storeEventsWith(cl.ID, from, func(tx *store.Txn) ([][]byte, error) { return sc.keep(tx, cl.ID, from, members) })
}

// fetchEvents gets a cluster's stored events from the directory, proving
// with token (the member token) that this node may read them.
func (s *Service) fetchEvents(ctx context.Context, id, token string, limit int) ([]storedEvent, error) {
	if s.isDirectory() {
		return s.readEvents(id, limit)
	}
	q := historyRequest{Op: historyRead, Cluster: id, Limit: limit}
	q.sign(memberKey(id, token), s.cfg.Host.ID(), s.now())
	req, _ := json.Marshal(q)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	raw, err := s.cfg.Host.Request(ctx, s.cfg.Directory(), historyProto, req, maxHistoryResp)
	if err != nil {
		return nil, ErrNoDirectory.Because(fmt.Errorf("reading a history from the directory: %w", err))
	}
	var resp historyResponse
	if err := json.Unmarshal(raw, &resp); err != nil {
		return nil, err
	}
	return resp.Events, nil
}

func (s *Service) history(w http.ResponseWriter, r *http.Request) error {
	cl, err := s.cluster(r.Context(), r.PathValue("id"), false)
	if err != nil {
		return err
	}
	cred := clusterToken(r)
	tok, ok := cl.memberToken(cred)
	if !ok {
		return ErrNotOwner
	}
	if cl.memberPub() == nil && !s.isDirectory() {
		// A v1 record: the token cannot be proven to the directory.
		return ErrHistoryAtDirectory
	}
	limit := defaultHistoryN
	if v := r.URL.Query().Get("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil || limit < 1 || limit > historyKeep {
			return httpx.ErrInvalid.With("limit must be an integer from 1 to %d", historyKeep)
		}
	}
	stored, err := s.fetchEvents(r.Context(), cl.ID, tok, limit)
	if err != nil {
		return err
	}
	// Events are in the form of the visibility they were recorded under
	// (cluster_update.go): plain, or sealed with the token of the time.
	// The owner's token opens those of its own private periods; those of
	// an earlier token stay sealed.
	seals := []*sealer{nil, newSealer(cl.ID, tok)}
	if !cl.Public() {
		seals[0], seals[1] = seals[1], seals[0]
	}
	events := make([]Event, 0, len(stored))
	for _, e := range stored {
		var b eventBody
		if decodeWire(seals[0], sealHistory, e.Body, &b) != nil && decodeWire(seals[1], sealHistory, e.Body, &b) != nil {
			continue // not an event of ours, or sealed with another token
		}
		events = append(events, Event{At: time.UnixMilli(e.At).UTC(), Event: b.Event, Agent: b.Agent,
			DID: b.DID, Vis: b.Vis, Node: e.Node})
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"cluster_id": cl.ID, "events": events, "count": len(events)})
	return nil
}
