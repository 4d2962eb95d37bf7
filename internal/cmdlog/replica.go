package cmdlog

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// ChangesFunc fetches logged entries after since from the directory,
// returning them in order and the directory's head (last seq).
type ChangesFunc func(ctx context.Context, since uint64) (entries []Entry, head uint64, err error)

// Replica keeps a node's Log a copy of the canonical one: it commits the
// entries the directory publishes, in order, and whenever it sees a gap,
// restarts, or simply every PollInterval, asks the directory for the changes
// since its own last seq. Gossip only makes it fast; the catch-up makes it
// complete, so a node that missed messages or joined late holds the full
// directory.
type Replica struct {
	log    *Log
	fetch  ChangesFunc
	logger *slog.Logger
	// PollInterval is how often the replica checks the directory's head.
	PollInterval time.Duration
	// Install, if set, replaces the replica's state with a snapshot of the
	// directory's, when fetch says the changes it needs were compacted
	// (ErrCompacted): a replica far behind, or new, installs the
	// directory's state rather than replaying the log from 1.
	Install func(ctx context.Context) error

	offers chan []Entry
	kick   chan struct{}

	mu       sync.Mutex
	started  uint64    // catch-up rounds started (they run one at a time)
	finished uint64    // the number of the last round finished
	head     uint64    // directory head as last reported
	synced   time.Time // when the replica last reached that head
	failure  error     // last catch-up failure, nil after a success
	progress *sync.Cond
}

// NewReplica returns a Replica of l fed by fetch.
func NewReplica(l *Log, fetch ChangesFunc, logger *slog.Logger) *Replica {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	r := &Replica{log: l, fetch: fetch, logger: logger, PollInterval: 5 * time.Second,
		offers: make(chan []Entry, 1024), kick: make(chan struct{}, 1)}
	r.progress = sync.NewCond(&r.mu)
	return r
}

// Offer hands the replica entries published by the directory, in order.
// It never blocks: when the replica is busy they are dropped and the next
// catch-up fetches them.
func (r *Replica) Offer(es []Entry) {
	select {
	case r.offers <- es:
	default:
		r.Kick()
	}
}

// maxOffered bounds the entries the replica takes from its offers at
// once; maxApplied, those it commits in one transaction (and their ops'
// bytes, maxAppliedBytes). A store's transaction may hold fewer (it
// counts what the machines write too): CommitBatch splits them then.
const (
	maxOffered      = 4096
	maxApplied      = 256
	maxAppliedBytes = 1 << 20
)

// Kick asks for a catch-up soon (for example after connecting to the directory).
func (r *Replica) Kick() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Run commits offered entries and catches up until ctx is done.
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
		case es := <-r.offers:
			for len(es) < maxOffered && len(r.offers) > 0 {
				es = append(es, <-r.offers...)
			}
			r.offer(ctx, es)
		case <-r.kick:
			r.catchUp(ctx)
		case <-tick.C:
			r.catchUp(ctx)
		}
	}
}

// offer applies the entries offered that follow the log (messages may
// overtake each other on their way: those taken at once are put in
// order), and catches up when one is missing.
func (r *Replica) offer(ctx context.Context, es []Entry) {
	es = r.unapplied(es)
	if len(es) == 0 {
		return // already applied
	}
	seq := r.log.Seq()
	slices.SortFunc(es, func(a, b Entry) int { return cmp.Compare(a.Seq, b.Seq) })
	es = slices.CompactFunc(es, func(a, b Entry) bool { return a.Seq == b.Seq })
	next := 0
	for next < len(es) && es[next].Seq == seq+1+uint64(next) {
		next++
	}
	if err := r.apply(es[:next]); err != nil {
		r.setFailure(err)
		return
	}
	if next < len(es) {
		r.catchUp(ctx) // a gap: fetch what is missing
		return
	}
	r.mu.Lock()
	r.head = max(r.head, es[len(es)-1].Seq)
	r.noteProgressLocked()
	r.mu.Unlock()
}

// catchUp fetches and applies changes until the replica reaches the head.
func (r *Replica) catchUp(ctx context.Context) {
	r.mu.Lock()
	r.started++
	round := r.started
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.finished = round
		r.progress.Broadcast()
		r.mu.Unlock()
	}()
	for ctx.Err() == nil {
		entries, head, err := r.fetch(ctx, r.log.Seq())
		if errors.Is(err, ErrCompacted) && r.Install != nil {
			r.logger.Info("installing a snapshot of the directory", "seq", r.log.Seq())
			if err = r.Install(ctx); err == nil {
				r.logger.Info("installed a snapshot of the directory", "seq", r.log.Seq())
				continue
			}
		}
		if err != nil {
			r.setFailure(err)
			return
		}
		if err := r.apply(entries); err != nil {
			r.setFailure(err)
			return
		}
		r.mu.Lock()
		r.head, r.failure = head, nil
		r.noteProgressLocked()
		r.mu.Unlock()
		if len(entries) == 0 || r.log.Seq() >= head {
			return
		}
	}
}

// apply commits es, entries of consecutive seqs, as far as the log does
// not hold them yet, a transaction for a few hundred at a time.
func (r *Replica) apply(es []Entry) error {
	es = r.unapplied(es)
	for len(es) > 0 {
		n, size := 0, 0
		for n < len(es) && n < maxApplied && (n == 0 || size+len(es[n].Op) <= maxAppliedBytes) {
			size += len(es[n].Op)
			n++
		}
		done, err := r.log.CommitBatch(es[:n])
		if err != nil {
			// The directory committed this entry; refusing it here means the
			// replica diverged (a bug, or a store from another directory).
			return fmt.Errorf("replica: apply seq %d: %w", es[done].Seq, err)
		}
		es = es[n:]
	}
	return nil
}

// unapplied is those of es the log does not hold yet, in a slice of its
// own.
func (r *Replica) unapplied(es []Entry) []Entry {
	seq := r.log.Seq()
	var out []Entry
	for _, e := range es {
		if e.Seq > seq {
			out = append(out, e)
		}
	}
	return out
}

func (r *Replica) noteProgressLocked() {
	if r.log.Seq() >= r.head {
		r.synced = time.Now()
	}
	r.progress.Broadcast()
}

// setFailure records a failed catch-up; the first of a run of them is
// logged at warn (the others at debug, so that an unreachable directory
// does not fill the log).
func (r *Replica) setFailure(err error) {
	r.mu.Lock()
	first := r.failure == nil
	r.failure = err
	r.mu.Unlock()
	level := slog.LevelDebug
	if first {
		level = slog.LevelWarn
	}
	r.logger.Log(context.Background(), level, "directory catch-up failed", "err", err)
}

// Status reports the directory head as last seen, whether the replica has
// reached it, and the last catch-up failure (nil when the last one worked).
func (r *Replica) Status() (head uint64, caughtUp bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.head, r.failure == nil && !r.synced.IsZero() && r.log.Seq() >= r.head, r.failure
}

// Sync brings the replica up to the directory's head as of now: it waits
// for a catch-up that starts after the call, and returns its failure.
func (r *Replica) Sync(ctx context.Context) error {
	r.mu.Lock()
	want := r.started + 1 // the first round to start after this call
	r.mu.Unlock()
	r.Kick()
	stop := context.AfterFunc(ctx, func() {
		r.mu.Lock()
		r.progress.Broadcast()
		r.mu.Unlock()
	})
	defer stop()
	r.mu.Lock()
	defer r.mu.Unlock()
	for r.finished < want {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		r.progress.Wait()
	}
	return r.failure
}

// WaitFor blocks until the replica has applied seq, or ctx ends.
func (r *Replica) WaitFor(ctx context.Context, seq uint64) error {
	if r.log.Seq() >= seq {
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
	for r.log.Seq() < seq {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		r.progress.Wait()
	}
	return nil
}
