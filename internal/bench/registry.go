package bench

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/agentmesh/mesh/identity"
)

// registerSigned registers agent id, bound to a fresh key, through the
// node at base: a registration with a DHT record.
func registerSigned(ctx context.Context, base, id string) error {
	key := identity.GenerateKey()
	body, _ := json.Marshal(map[string]any{"agent_id": id, "capabilities": []string{"bench"},
		"endpoint": "https://" + id + ".example", "pubkey": identity.EncodePublicKey(key.Public().(ed25519.PublicKey))})
	hdr := http.Header{identity.SigHeaderName: {identity.Sign(key, "POST", "/v1/agents/register", body, time.Now())}}
	_, err := postJSON(ctx, base+"/v1/agents/register", string(body), hdr, nil)
	return err
}

// Propagation registers agents through the mesh's nodes in turn and
// measures, for each, the time from the request until every node serves
// it (GET /v1/agents/<id> answers 200).
func Propagation(ctx context.Context, m *Mesh, registrations int) (Percentiles, error) {
	var samples []time.Duration
	for r := range registrations {
		id := fmt.Sprintf("prop-%d-%d", time.Now().UnixNano(), r)
		via := m.Nodes[r%len(m.Nodes)]
		start := time.Now()
		if err := registerSigned(ctx, via.URL(), id); err != nil {
			return Percentiles{}, err
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		var last time.Duration
		var failed error
		for _, n := range m.Nodes {
			wg.Go(func() {
				for time.Since(start) < 30*time.Second {
					if getJSON(ctx, n.URL()+"/v1/agents/"+id, &struct{}{}) == nil {
						mu.Lock()
						last = max(last, time.Since(start))
						mu.Unlock()
						return
					}
					time.Sleep(time.Millisecond)
				}
				mu.Lock()
				failed = fmt.Errorf("agent %s never reached %s", id, n.URL())
				mu.Unlock()
			})
		}
		wg.Wait()
		if failed != nil {
			return Percentiles{}, failed
		}
		samples = append(samples, last)
	}
	return percentiles(samples), nil
}

// DHTLookups registers agents, then looks each up in the DHT from every
// node but the bootstrap (DHT clients, as ordinary nodes are), bypassing
// their local directories.
func DHTLookups(ctx context.Context, m *Mesh, agents int) (Percentiles, error) {
	ids := make([]string, agents)
	for i := range ids {
		ids[i] = fmt.Sprintf("dht-%d-%d", time.Now().UnixNano(), i)
		if err := registerSigned(ctx, m.Nodes[0].URL(), ids[i]); err != nil {
			return Percentiles{}, err
		}
	}
	// The directory puts records into the DHT in the background.
	probe := m.Nodes[len(m.Nodes)-1]
	deadline := time.Now().Add(30 * time.Second)
	for _, id := range ids {
		for {
			lctx, cancel := context.WithTimeout(ctx, time.Second)
			_, err := probe.LookupDHT(lctx, id)
			cancel()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				return Percentiles{}, fmt.Errorf("record of %s never appeared in the DHT: %w", id, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	var samples []time.Duration
	for _, n := range m.Nodes[1:] {
		for _, id := range ids {
			lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			start := time.Now()
			a, err := n.LookupDHT(lctx, id)
			cancel()
			if err != nil || a.ID != id {
				return Percentiles{}, fmt.Errorf("lookup of %s on %s: %v", id, n.URL(), err)
			}
			samples = append(samples, time.Since(start))
		}
	}
	return percentiles(samples), nil
}
