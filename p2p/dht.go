package p2p

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	dht "github.com/libp2p/go-libp2p-kad-dht"
	kb "github.com/libp2p/go-libp2p-kbucket"
	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-libp2p/core/routing"
)

// kadProto is the DHT protocol of the mesh; only DHT servers speak it.
const kadProto = protocol.ID(ProtocolPrefix + "/kad/1.0.0")

// PutValue stores a record in the DHT under key ("/<namespace>/..."): in
// this node's own store first, then on the closest DHT servers. ErrNoPeer
// means that no DHT server was found, so only this node holds the record.
func (h *Host) PutValue(ctx context.Context, key string, val []byte) error {
	err := h.dht.PutValue(ctx, key, val)
	if errors.Is(err, kb.ErrLookupFailure) {
		return fmt.Errorf("%w: %v", ErrNoPeer, err)
	}
	return err
}

// GetValue finds the best record for key in the DHT. It returns as soon as
// one valid record is found (quorum 1), trading certainty of the newest
// version for latency; the local store is checked first.
func (h *Host) GetValue(ctx context.Context, key string) ([]byte, error) {
	return h.dht.GetValue(ctx, key, dht.Quorum(1))
}

// LocalValue returns the record this node's own store holds for key: what
// it answers when asked as a DHT server. It asks no other peer.
func (h *Host) LocalValue(ctx context.Context, key string) ([]byte, error) {
	rec, err := h.values.Get(ctx, key)
	if err == nil && rec == nil {
		err = routing.ErrNotFound
	}
	return rec.GetValue(), err
}

// DHTServers is the number of DHT servers in the routing table: the peers
// a lookup can ask.
func (h *Host) DHTServers() int { return h.dht.RoutingTable().Size() }

// watchPeers follows what connected peers speak, as identify reports it
// on each new connection and when a peer adds protocols: a DHT server goes
// to OnDHTServer once the DHT has taken it into its routing table (so that
// lookups find it), and a rendezvous node to the OnRendezvousNode hooks.
func (h *Host) watchPeers(ctx context.Context) error {
	sub, err := h.h.EventBus().Subscribe([]any{new(event.EvtPeerIdentificationCompleted), new(event.EvtPeerProtocolsUpdated)})
	if err != nil {
		return fmt.Errorf("p2p: event bus: %w", err)
	}
	h.goroutine(func() {
		defer sub.Close()
		for {
			var p peer.ID
			var added []protocol.ID
			select {
			case <-ctx.Done():
				return
			case ev := <-sub.Out():
				switch e := ev.(type) {
				case event.EvtPeerIdentificationCompleted:
					p, added = e.Peer, e.Protocols
				case event.EvtPeerProtocolsUpdated:
					p, added = e.Peer, e.Added
				}
			}
			if h.cfg.OnDHTServer != nil && slices.Contains(added, kadProto) {
				h.whenRouted(ctx, p)
			}
			if slices.Contains(added, rendezvousProto) && h.IsBootstrap(p) {
				h.rendezvousNodeUp(p)
			}
		}
	})
	return nil
}

// routedWait bounds how long a DHT server may take to enter the routing
// table (the DHT first checks that it answers queries).
const routedWait = 30 * time.Second

// whenRouted calls OnDHTServer for p once p is in the routing table; one
// watch per peer at a time.
func (h *Host) whenRouted(ctx context.Context, p peer.ID) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.routing[p] {
		return
	}
	h.routing[p] = true
	h.goroutine(func() {
		defer func() {
			h.mu.Lock()
			delete(h.routing, p)
			h.mu.Unlock()
		}()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		deadline := time.After(routedWait)
		for h.dht.RoutingTable().Find(p) == "" {
			select {
			case <-ctx.Done():
				return
			case <-deadline:
				return
			case <-tick.C:
			}
		}
		h.cfg.OnDHTServer(p)
	})
}
