package registryapi

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// ChangesFunc fetches logged commands after since from the directory,
// returning them in order and the directory's head (last seq).
type ChangesFunc func(ctx context.Context, since uint64) (cmds []Command, head uint64, err error)

// Replica keeps a node's Directory a copy of the canonical one: it applies
// the commands the directory publishes, in order, and whenever it sees a gap,
// restarts, or simply every PollInterval, asks the directory for the changes
// since its own last seq. Gossip only makes it fast; the catch-up makes it
// complete, so a node that missed messages or joined late holds the full
// directory.
type Replica struct {
	dir   *Directory
	fetch ChangesFunc
	log   *slog.Logger
	// PollInterval is how often the replica checks the directory's head.
	PollInterval time.Duration

	offers chan Command
	kick   chan struct{}

	mu       sync.Mutex
	head     uint64    // directory head as last reported
	synced   time.Time // when the replica last reached that head
	failure  error     // last catch-up failure, nil after a success
	progress *sync.Cond
}

// NewReplica returns a Replica of dir fed by fetch.
func NewReplica(dir *Directory, fetch ChangesFunc, log *slog.Logger) *Replica {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Replica{dir: dir, fetch: fetch, log: log, PollInterval: 5 * time.Second,
		offers: make(chan Command, 1024), kick: make(chan struct{}, 1)}
	r.progress = sync.NewCond(&r.mu)
	return r
}

// Offer hands the replica a command published by the directory. It never
// blocks: when the replica is busy the command is dropped and the next
// catch-up fetches it.
func (r *Replica) Offer(cmd Command) {
	select {
	case r.offers <- cmd:
	default:
		r.Kick()
	}
}

// Kick asks for a catch-up soon (for example after connecting to the directory).
func (r *Replica) Kick() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Run applies offered commands and catches up until ctx is done.
func (r *Replica) Run(ctx context.Context) {
	defer func() {
		r.mu.Lock()
		r.progress.Broadcast()
		r.mu.Unlock()
	}()
	r.catchUp(ctx)
	tick := time.NewTicker(r.PollInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case cmd := <-r.offers:
			r.offer(ctx, cmd)
		case <-r.kick:
			r.catchUp(ctx)
		case <-tick.C:
			r.catchUp(ctx)
		}
	}
}

func (r *Replica) offer(ctx context.Context, cmd Command) {
	seq := r.dir.Seq()
	switch {
	case cmd.Seq <= seq:
		return // already applied
	case cmd.Seq > seq+1:
		r.catchUp(ctx) // a gap: fetch what is missing
		return
	}
	if err := r.apply(cmd); err != nil {
		r.setFailure(err)
		return
	}
	r.mu.Lock()
	if cmd.Seq > r.head {
		r.head = cmd.Seq
	}
	r.noteProgressLocked()
	r.mu.Unlock()
}

// catchUp fetches and applies changes until the replica reaches the head.
func (r *Replica) catchUp(ctx context.Context) {
	for ctx.Err() == nil {
		cmds, head, err := r.fetch(ctx, r.dir.Seq())
		if err != nil {
			r.setFailure(err)
			return
		}
		for _, c := range cmds {
			if err := r.apply(c); err != nil {
				r.setFailure(err)
				return
			}
		}
		r.mu.Lock()
		r.head, r.failure = head, nil
		r.noteProgressLocked()
		r.mu.Unlock()
		if len(cmds) == 0 || r.dir.Seq() >= head {
			return
		}
	}
}

func (r *Replica) apply(c Command) error {
	if c.Seq <= r.dir.Seq() {
		return nil
	}
	if _, err := r.dir.Commit(&c); err != nil {
		// The directory applied this command; refusing it here means the
		// replica diverged (a bug, or a store from another directory).
		return fmt.Errorf("replica: apply seq %d: %w", c.Seq, err)
	}
	return nil
}

func (r *Replica) noteProgressLocked() {
	if r.dir.Seq() >= r.head {
		r.synced = time.Now()
	}
	r.progress.Broadcast()
}

func (r *Replica) setFailure(err error) {
	r.log.Debug("directory catch-up failed", "err", err)
	r.mu.Lock()
	r.failure = err
	r.mu.Unlock()
}

// Status reports the directory head as last seen, whether the replica has
// reached it, and the last catch-up failure (nil when the last one worked).
func (r *Replica) Status() (head uint64, caughtUp bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.head, r.failure == nil && !r.synced.IsZero() && r.dir.Seq() >= r.head, r.failure
}

// WaitFor blocks until the replica has applied seq, or ctx ends.
func (r *Replica) WaitFor(ctx context.Context, seq uint64) error {
	if r.dir.Seq() >= seq {
		return nil
	}
	r.Kick()
	stop := context.AfterFunc(ctx, func() {
		r.mu.Lock()
		r.progress.Broadcast()
		r.mu.Unlock()
	})
	defer stop()
	r.mu.Lock()
	defer r.mu.Unlock()
	for r.dir.Seq() < seq {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		r.progress.Wait()
	}
	return nil
}
