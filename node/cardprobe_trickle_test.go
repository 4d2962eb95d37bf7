package node

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/testkit"
	"github.com/agentmesh/mesh/registryapi"
)

// trickler is an endpoint on loopback that answers every fetch with a
// byte a second, for as long as the fetcher waits.
type trickler struct {
	srv      *httptest.Server
	inFlight atomic.Int64
	ended    chan struct{} // a fetch gave up
}

func newTrickler(t *testing.T) *trickler {
	tr := &trickler{ended: make(chan struct{}, 1)}
	stop := make(chan struct{})
	tr.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tr.inFlight.Add(1)
		defer tr.inFlight.Add(-1)
		w.Header().Set("Content-Type", "application/json")
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			w.Write([]byte(" "))
			w.(http.Flusher).Flush()
			select {
			case <-tick.C:
			case <-stop:
				return
			case <-r.Context().Done():
				select {
				case tr.ended <- struct{}{}:
				default:
				}
				return
			}
		}
	}))
	t.Cleanup(func() { close(stop); tr.srv.Close() })
	return tr
}

// TestTricklingEndpointsDoNotHoldNewAgentsBack: 200 agents whose
// endpoints answer a byte a second hold the directory's fetches until
// each one's deadline; an agent registered meanwhile, whose endpoint is on
// another host, is probed while they still trickle.
func TestTricklingEndpointsDoNotHoldNewAgentsBack(t *testing.T) {
	m := newMeshWith(t, func(c *Config) {
		probing(c)
		c.Cards.Allow = []string{"127.0.0.0/8", "::1"} // localhost may resolve to either
	})
	tr := newTrickler(t)
	ctx := context.Background()
	for i := range 200 {
		id := fmt.Sprintf("trickle-%03d", i)
		op := registryapi.Command{At: m.clock.Now().UnixNano(), Register: &registryapi.RegisterOp{
			AgentID: id, Capabilities: []string{"echo"}, Endpoint: tr.srv.URL + "/" + id, APIKeyHash: "x"}}
		if _, err := m.boot.orderer.Propose(ctx, registryapi.Kind, op.At, op); err != nil {
			t.Fatal(err)
		}
	}
	concurrency := int64(m.boot.cfg.Cards.Concurrency)
	testkit.Eventually(t, 15*time.Second, func() bool { return tr.inFlight.Load() >= concurrency },
		"the directory never fetched %d trickling endpoints at once", concurrency)

	probed := make(chan struct{}, 1)
	honest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case probed <- struct{}{}:
		default:
		}
		w.Write([]byte(`{"name":"Honest","skills":[{"id":"echo","name":"Echo"}]}`))
	}))
	defer honest.Close()
	m.registerAgent(m.boot, "honest-1", identity.GenerateKey(), strings.Replace(honest.URL, "127.0.0.1", "localhost", 1))
	select {
	case <-probed:
	case <-tr.ended:
		t.Fatalf("a trickling fetch reached its deadline before the new agent was probed (%d trickling at once)", tr.inFlight.Load())
	}
}
