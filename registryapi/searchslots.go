package registryapi

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/agentmesh/mesh/internal/httpx"
)

// DefaultSearchWait is how long a search past the node-wide bound waits
// for its turn (Config.SearchWait); the bound's default is one search a
// core (Config.SearchConcurrency).
const DefaultSearchWait = 100 * time.Millisecond

// ErrSearchBusy: the node ranks as many searches as it may, and more
// waited for a turn than the wait allows.
var ErrSearchBusy = httpx.E(http.StatusServiceUnavailable, "search_busy",
	"this node is answering as many searches as it can; retry after Retry-After seconds, or on another node").After(time.Second)

// searchSlots bounds the searches a node ranks at once, whoever asks: the
// per-address budget bounds each client, this bounds them all, so that
// many addresses, each within its budget, cannot together keep every core
// ranking and make everyone's search wait its turn behind theirs. A search
// past the bound waits at most wait for a slot, the newest waiting first:
// when more arrive than the node can rank, those served are served at
// once, and those that waited the longest are refused (503 search_busy),
// rather than every search waiting behind all the others.
type searchSlots struct {
	max  int // 0: no bound
	wait time.Duration

	mu      sync.Mutex
	busy    int
	waiting []chan struct{} // oldest first; a slot is handed to the last
}

func newSearchSlots(max int, wait time.Duration) *searchSlots {
	return &searchSlots{max: max, wait: wait}
}

// acquire takes a slot, waiting at most s.wait; the caller releases it.
func (s *searchSlots) acquire(ctx context.Context) error {
	if s.max <= 0 {
		return nil
	}
	s.mu.Lock()
	if s.busy < s.max {
		s.busy++
		s.mu.Unlock()
		return nil
	}
	turn := make(chan struct{}, 1)
	s.waiting = append(s.waiting, turn)
	s.mu.Unlock()
	t := time.NewTimer(s.wait)
	defer t.Stop()
	select {
	case <-turn:
		return nil
	case <-t.C:
	case <-ctx.Done():
	}
	s.mu.Lock()
	if i := slices.Index(s.waiting, turn); i >= 0 {
		s.waiting = slices.Delete(s.waiting, i, i+1)
		s.mu.Unlock()
		return ErrSearchBusy
	}
	s.mu.Unlock()
	<-turn // handed a slot while giving up: take it
	return nil
}

// release hands the slot to the newest search waiting, or frees it.
func (s *searchSlots) release() {
	if s.max <= 0 {
		return
	}
	s.mu.Lock()
	if n := len(s.waiting); n > 0 {
		turn := s.waiting[n-1]
		s.waiting = s.waiting[:n-1]
		s.mu.Unlock()
		turn <- struct{}{}
		return
	}
	s.busy--
	s.mu.Unlock()
}
