package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/loadgen"
)

// CardMemoryOptions sets up a card memory measurement.
type CardMemoryOptions struct {
	Exe      string // the mesh binary
	Dir      string // where the nodes keep their data
	Cards    int    // agents to register, each handing over a card
	CardSize int    // about this many bytes each
}

// CardMemoryResult is what the cards cost a directory, and a node that
// joined afterwards, each in its process: growth over an idle node's.
type CardMemoryResult struct {
	Cards   int
	Bytes   int64 // the cards' bytes
	Dir     Mem
	Join    Mem // peaks while catching up
	CatchUp time.Duration
}

func (r CardMemoryResult) String() string {
	x := func(v float64) string { return fmt.Sprintf("%.0f MiB (%.1fx)", v/(1<<20), v/float64(r.Bytes)) }
	m := func(m Mem) string {
		return fmt.Sprintf("live heap %s, heap in use %s, anonymous resident %s, resident with mapped files %s (the store's files %s, the DHT values' %s)",
			x(m.Live), x(m.Heap), x(m.Anon), x(m.RSS), x(m.Store), x(m.DHT))
	}
	return fmt.Sprintf("%d cards, %.1f MiB.\n  the directory grew by: %s\n  a node joining afterwards caught up in %s, at most (over an idle node): %s",
		r.Cards, float64(r.Bytes)/(1<<20), m(r.Dir), r.CatchUp.Round(time.Millisecond), m(r.Join))
}

// CardMemory starts a directory (`mesh node`, fsync on, no write budgets),
// registers o.Cards agents through it, each signed and handing over a
// card of about o.CardSize bytes, reads each back (its record and its
// mirrored card), and reads the growth of its heap and resident set; then
// starts a node that joins it and samples its memory every 50 ms until it
// holds the whole directory.
func CardMemory(ctx context.Context, o CardMemoryOptions) (CardMemoryResult, error) {
	r := CardMemoryResult{Cards: o.Cards}
	dir, err := StartProc(ctx, o.Exe, filepath.Join(o.Dir, "directory"), "--role", "bootstrap", "--card-refresh", "0",
		"--budget-client", "0", "--budget-credential", "0", "--budget-directory", "0")
	if err != nil {
		return r, err
	}
	defer dir.Stop()
	idle, err := dir.Memory(ctx)
	if err != nil {
		return r, err
	}
	if r.Bytes, err = registerCards(ctx, dir.URL, o.Cards, o.CardSize); err != nil {
		return r, err
	}
	grown, err := dir.Memory(ctx)
	if err != nil {
		return r, err
	}
	r.Dir = grown.Sub(idle)
	var head struct {
		Directory struct{ Seq uint64 } `json:"directory"`
	}
	if err := getJSON(ctx, dir.URL+"/health", &head); err != nil {
		return r, err
	}
	start := time.Now()
	join, err := StartProc(ctx, o.Exe, filepath.Join(o.Dir, "joiner"), "--role", "node", "--bootstrap", dir.P2P)
	if err != nil {
		return r, err
	}
	defer join.Stop()
	for {
		m, err := join.Memory(ctx)
		if err != nil {
			return r, err
		}
		r.Join = r.Join.Max(m.Sub(idle))
		var h struct {
			Directory struct{ Seq uint64 } `json:"directory"`
		}
		if getJSON(ctx, join.URL+"/health", &h) == nil && h.Directory.Seq >= head.Directory.Seq {
			r.CatchUp = time.Since(start)
			return r, nil
		}
		select {
		case <-ctx.Done():
			return r, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// registerCards registers n agents on the node at base from 8 clients,
// each handing over a card of about size bytes, then reads each back; it
// returns the cards' bytes.
func registerCards(ctx context.Context, base string, n, size int) (int64, error) {
	var total atomic.Int64
	var next atomic.Int64
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			words := loadgen.NewWords(uint64(w))
			for i := int(next.Add(1)) - 1; i < n && ctx.Err() == nil; i = int(next.Add(1)) - 1 {
				id := fmt.Sprintf("card-%06d", i)
				card := words.Card(id, size)
				body, sig := loadgen.Registration(id, identity.GenerateKey(), card, time.Now())
				if err := loadgen.Post(ctx, base+loadgen.RegisterPath, string(body), identity.SigHeaderName, sig); err != nil {
					errs <- err
					return
				}
				for _, path := range []string{"/v1/agents/" + id, "/agent/" + id + "/.well-known/agent.json"} {
					var v map[string]any
					if err := getJSON(ctx, base+path, &v); err != nil {
						errs <- err
						return
					}
				}
				total.Add(int64(len(card)))
			}
		})
	}
	wg.Wait()
	close(errs)
	return total.Load(), <-errs
}
