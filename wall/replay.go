package wall

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/agentmesh/mesh/p2p"
)

// Replays into a private cluster. A topic message of a private cluster is
// sealed with its origin's peer id in the associated data (topicAD): a copy
// published under another key does not open, and is refused as invalid.
// What is left is a copy under the same key: the origin's own envelope,
// forwarded again once gossipsub forgot it (its seen cache lasts 2
// minutes), or the sealed bytes re-signed by whoever holds the key. So
// every sealed topic message carries its time (at, Unix ms) and the
// sending room's count of the messages it published (n, from 1, per
// epoch), and a node takes each (origin, epoch, n) once: its sealed
// identity. A message older than sealWindow (or as far ahead) is
// refused; within it, the replay memory remembers which identities were
// taken. Both refusals happen before delivery and cost the forwarding peer
// gossipsub score, like any invalid message: an honest node never
// publishes two messages with one identity, and gossipsub hands a
// validator each envelope once.

// sealWindow is how far a sealed topic message's time may be from the
// receiving node's clock: the clock tolerance of signed requests.
const sealWindow = 2 * time.Minute

// replaySpan is how many numbers below the highest taken an (origin,
// epoch) still remembers one by one: gossipsub validates on several
// workers, so a room's messages arrive slightly out of order (the
// sequencer holds at most maxHeld of them). An older number is refused.
const replaySpan = 2048

// maxReplayEpochs bounds the (origin, epoch) pairs the replay memory
// holds, over all private clusters: a pair is forgotten once it was idle
// for sealWindow (whatever it names is then too old to be taken). Only
// token holders make pairs (the message must open first); past the bound,
// messages of new pairs are dropped without penalty until old ones idle
// out, rather than a pair forgotten early.
const maxReplayEpochs = 1 << 16

var (
	errStale    = errors.New("wall: a sealed topic message outside the replay window")
	errReplayed = errors.New("wall: a sealed topic message taken before (a replay)")
)

// replayMemory is the node's memory of the sealed identities it took.
type replayMemory struct {
	mu    sync.Mutex
	pairs map[replayKey]*replayWindowBits
	swept time.Time
}

type replayKey struct {
	cluster string
	origin  peer.ID
	epoch   uint64
}

// replayWindowBits remembers the numbers taken of one (origin, epoch):
// the highest, and which of the replaySpan below it.
type replayWindowBits struct {
	top  uint64
	bits [replaySpan / 64]uint64
	used time.Time
}

// take checks sealed message w of cluster from origin against now and the
// memory, and remembers it.
func (m *replayMemory) take(cluster string, origin peer.ID, w *wireMsg, now time.Time) error {
	if w.At <= 0 || w.N == 0 || w.Epoch == 0 {
		return errors.New("wall: a sealed topic message without at, n or epoch")
	}
	if d := now.Sub(time.UnixMilli(w.At)); d > sealWindow || d < -sealWindow {
		return fmt.Errorf("%w: at is %v from this node's clock", errStale, d.Round(time.Second))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sweepLocked(now)
	k := replayKey{cluster, origin, w.Epoch}
	b := m.pairs[k]
	if b == nil {
		if len(m.pairs) >= maxReplayEpochs {
			return errReplayFull
		}
		b = &replayWindowBits{}
		m.pairs[k] = b
	}
	b.used = now
	if !b.take(w.N) {
		return fmt.Errorf("%w: n %d of epoch %d", errReplayed, w.N, w.Epoch)
	}
	return nil
}

// errReplayFull: the memory holds maxReplayEpochs pairs used lately.
var errReplayFull = fmt.Errorf("%w: the replay memory is full", p2p.ErrIgnore)

// sweepLocked forgets the pairs idle for sealWindow, at most once a
// second.
func (m *replayMemory) sweepLocked(now time.Time) {
	if m.pairs == nil {
		m.pairs = map[replayKey]*replayWindowBits{}
	}
	if now.Sub(m.swept) < time.Second {
		return
	}
	m.swept = now
	for k, b := range m.pairs {
		if now.Sub(b.used) > sealWindow {
			delete(m.pairs, k)
		}
	}
}

// take reports whether n was not taken before, and remembers it.
func (b *replayWindowBits) take(n uint64) bool {
	switch {
	case n > b.top:
		for i := b.top + 1; i < n && i <= b.top+replaySpan; i++ {
			b.clear(i)
		}
		b.top = n
	case n+replaySpan <= b.top:
		return false // older than what is remembered one by one
	case b.has(n):
		return false
	}
	b.set(n)
	return true
}

func (b *replayWindowBits) has(n uint64) bool { return b.bits[n/64%(replaySpan/64)]&(1<<(n%64)) != 0 }
func (b *replayWindowBits) set(n uint64)      { b.bits[n/64%(replaySpan/64)] |= 1 << (n % 64) }
func (b *replayWindowBits) clear(n uint64)    { b.bits[n/64%(replaySpan/64)] &^= 1 << (n % 64) }
