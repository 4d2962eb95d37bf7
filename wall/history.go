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
// that plausibly serve the cluster (for a private one, a signature by the
// member key; for a public one, a registration at the rendezvous, which
// the directory runs, now or lately), at most historyRate events a second
// per node and cluster, so that no peer floods real events out. A v1
// record names no member key: its history is read only through the
// directory's own HTTP surface, and its appends are taken as a public
// cluster's.
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
}

// record queues an event of socket sk for the directory; it never blocks.
func (r *room) record(event string, sk *socket) {
	if sk.ghost() || r.cl.ID == LobbyID {
		return
	}
	body := encodeWire(r.seal, sealHistory, eventBody{Event: event, Agent: sk.handle, DID: sk.did, Vis: sk.vis})
	select {
	case r.svc.events <- pendingEvent{cluster: r.cl.ID, key: r.memberKey, body: body}:
	default:
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
		batch := map[string][]pendingEvent{first.cluster: {first}}
	drain:
		for range historyBatch - 1 {
			select {
			case e := <-s.events:
				batch[e.cluster] = append(batch[e.cluster], e)
			default:
				break drain
			}
		}
		for id, events := range batch {
			if err := s.appendHistory(id, events); err != nil && s.ctx.Err() == nil {
				s.log.Warn("history events not recorded", "cluster", id, "n", len(events), "err", err)
			}
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
		q.sign(key, self, s.cfg.Now())
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
//	w/h/<id>/<n 8B>  storedEvent, the n-th of the cluster
//	w/hn/<id>        n of the newest event
func eventKey(id string, n uint64) []byte { return store.Key("w", "h", id, store.U64(n)) }
func eventCountKey(id string) []byte      { return store.Key("w", "hn", id) }

// storeEvents appends events reported by node from, dropping the oldest
// beyond historyKeep.
func (s *Service) storeEvents(id string, from peer.ID, bodies [][]byte) error {
	if _, err := s.cfg.Catalog.Get(id); err != nil {
		return err
	}
	at := s.cfg.Now().UnixMilli()
	return s.cfg.Catalog.db.Update(func(tx *store.Txn) error {
		n, err := cmdlog.GetU64(tx, eventCountKey(id))
		if err != nil {
			return err
		}
		for _, b := range bodies {
			if len(b) > maxHistoryBody {
				continue
			}
			n++
			v, _ := json.Marshal(storedEvent{At: at, Node: from.String(), Body: b})
			if err := tx.SetTTL(eventKey(id, n), v, historyRetention); err != nil {
				return err
			}
			if n > historyKeep {
				if err := tx.Delete(eventKey(id, n-historyKeep)); err != nil {
					return err
				}
			}
		}
		return tx.Set(eventCountKey(id), []byte(store.U64(n)))
	})
}

// readEvents returns up to limit of the newest stored events of id.
func (s *Service) readEvents(id string, limit int) ([]storedEvent, error) {
	var out []storedEvent
	err := s.cfg.Catalog.db.View(func(tx *store.Txn) error {
		n, err := cmdlog.GetU64(tx, eventCountKey(id))
		if err != nil {
			return err
		}
		from := uint64(1)
		if n > uint64(limit) {
			from = n - uint64(limit) + 1
		}
		return tx.Scan(store.Key("w", "h", id, ""), eventKey(id, from), func(_, v []byte) (bool, error) {
			var e storedEvent
			if json.Unmarshal(v, &e) == nil {
				out = append(out, e)
			}
			return true, nil
		})
	})
	slices.Reverse(out)
	return out, err
}

// dropHistory forgets a deleted cluster's history.
func (s *Service) dropHistory(id string) {
	err := s.cfg.Catalog.db.Update(func(tx *store.Txn) error {
		var keys [][]byte
		if err := tx.Scan(store.Key("w", "h", id, ""), nil, func(k, _ []byte) (bool, error) {
			keys = append(keys, append([]byte(nil), k...))
			return true, nil
		}); err != nil {
			return err
		}
		for _, k := range append(keys, eventCountKey(id)) {
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
	now := s.cfg.Now()
	switch q.Op {
	case historyAppend:
		// A v1 record names no member key: its appends are taken like a
		// public cluster's.
		serving := s.cfg.Host.Served(topicName(cl.ID), from)
		if !cl.Public() && cl.memberPub() != nil {
			serving = q.signedBy(cl, from, now)
		}
		if !serving || cl.ID == LobbyID {
			return nil, fmt.Errorf("%w: append from %s, which does not serve %s", errHistoryRefused, from, cl.ID)
		}
		events := q.Events[:min(len(q.Events), historyBatch)]
		return []byte{}, s.storeEvents(cl.ID, from, events[:s.appendLimits.take(from, cl.ID, len(events))])
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

// fetchEvents gets a cluster's stored events from the directory, proving
// with token (the member token) that this node may read them.
func (s *Service) fetchEvents(ctx context.Context, id, token string, limit int) ([]storedEvent, error) {
	if s.isDirectory() {
		return s.readEvents(id, limit)
	}
	q := historyRequest{Op: historyRead, Cluster: id, Limit: limit}
	q.sign(memberKey(id, token), s.cfg.Host.ID(), s.cfg.Now())
	req, _ := json.Marshal(q)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	raw, err := s.cfg.Host.Request(ctx, s.cfg.Directory(), historyProto, req, maxHistoryResp)
	if err != nil {
		return nil, ErrNoDirectory.With("the directory node, which keeps cluster histories, did not answer: %v", err)
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
	var seal *sealer
	if !cl.Public() {
		seal = newSealer(cl.ID, tok)
	}
	events := make([]Event, 0, len(stored))
	for _, e := range stored {
		var b eventBody
		if decodeWire(seal, sealHistory, e.Body, &b) != nil {
			continue // not sealed with this cluster's key: not an event of ours
		}
		events = append(events, Event{At: time.UnixMilli(e.At).UTC(), Event: b.Event, Agent: b.Agent,
			DID: b.DID, Vis: b.Vis, Node: e.Node})
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"cluster_id": cl.ID, "events": events, "count": len(events)})
	return nil
}
