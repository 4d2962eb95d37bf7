package registryapi

import (
	"hash/maphash"
	"iter"
	"sync"
)

// beatShards hold the beats by agent id, spread over shards each with its
// own lock: every read of an agent looks its beat up, on every core, and
// one lock would make all of them write one cache line. Changes are made
// under Presence.mu and the shard's lock; what holds Presence.mu reads
// without the shards' locks (no change can be under way).
type beatShards struct {
	seed   maphash.Seed
	shards [beatShardCount]beatShard
}

const beatShardCount = 64

type beatShard struct {
	mu sync.RWMutex
	m  map[string]Beat
	_  [32]byte // 64 bytes in all: shards do not share a cache line
}

func newBeatShards(size int) *beatShards {
	s := &beatShards{seed: maphash.MakeSeed()}
	for i := range s.shards {
		s.shards[i].m = make(map[string]Beat, size/beatShardCount)
	}
	return s
}

func (s *beatShards) shard(id string) *beatShard { return &s.shards[s.index(id)] }

func (s *beatShards) index(id string) uint64 { return maphash.String(s.seed, id) % beatShardCount }

// get is the beat of id, under its shard's read lock.
func (s *beatShards) get(id string) (Beat, bool) {
	sh := s.shard(id)
	sh.mu.RLock()
	b, ok := sh.m[id]
	sh.mu.RUnlock()
	return b, ok
}

// The methods below are called with Presence.mu held.

// lookup is get for a holder of Presence.mu.
func (s *beatShards) lookup(id string) (Beat, bool) {
	b, ok := s.shard(id).m[id]
	return b, ok
}

func (s *beatShards) put(b Beat) {
	sh := s.shard(b.ID)
	sh.mu.Lock()
	sh.m[b.ID] = b
	sh.mu.Unlock()
}

func (s *beatShards) remove(id string) {
	sh := s.shard(id)
	sh.mu.Lock()
	delete(sh.m, id)
	sh.mu.Unlock()
}

// replace makes beats the only ones, shard by shard: a read sees an id's
// beat before or after, never a shard half filled.
func (s *beatShards) replace(beats []Beat) {
	next := make([]map[string]Beat, beatShardCount)
	for i := range next {
		next[i] = make(map[string]Beat, len(beats)/beatShardCount)
	}
	for _, b := range beats {
		next[s.index(b.ID)][b.ID] = b
	}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.m = next[i]
		sh.mu.Unlock()
	}
}

// all are the beats, in no order.
func (s *beatShards) all() iter.Seq[Beat] {
	return func(yield func(Beat) bool) {
		for i := range s.shards {
			for _, b := range s.shards[i].m {
				if !yield(b) {
					return
				}
			}
		}
	}
}
