package quorum

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/agentmesh/mesh/internal/cmdlog"
	"github.com/agentmesh/mesh/store"
)

// Quorum is this node's membership in a Raft quorum of bootstrap nodes.
type Quorum struct {
	cfg Config
	log *slog.Logger

	db    *store.DB // Raft's log and stable store
	logs  *logStore
	trans *transport
	r     *raft.Raft
	fsm   *fsm
	// running is r once NewRaft returned: Raft's goroutines (OnApply) may
	// ask IsLeader before.
	running atomic.Pointer[raft.Raft]
	// leader is the leader Leader named last: a node asks several times a
	// write, and decoding its peer id each time took 7 µs of a write
	// through a follower.
	leader atomic.Pointer[leaderID]

	mu        sync.Mutex
	members   []Member
	known     map[peer.ID]bool // members, and Known while there are none
	refreshed time.Time

	done      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// Member is a server of the quorum's configuration.
type Member struct {
	ID    peer.ID `json:"peer_id"`
	Voter bool    `json:"voter"`
}

// New checks cfg and returns a member that is not running yet.
func New(cfg Config) (*Quorum, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Quorum{cfg: cfg, log: cfg.Logger, done: make(chan struct{}), known: map[peer.ID]bool{}}, nil
}

// Start opens Raft's log, serves RaftProtocol and starts Raft; a member
// whose log is empty bootstraps the quorum with cfg.Voters. It does not
// wait for a leader.
func (q *Quorum) Start() (err error) {
	defer func() {
		if err != nil {
			q.Close()
		}
	}()
	for _, p := range append(slices.Clone(q.cfg.Voters), q.cfg.Known...) {
		q.known[p] = true
	}
	if q.db, err = store.Open(store.Options{
		Dir: filepath.Join(q.cfg.Dir, "log"), InMemory: q.cfg.InMemory,
		SyncWrites: q.cfg.SyncWrites, Logger: q.log,
	}); err != nil {
		return err
	}
	if q.logs, err = openLogStore(q.db); err != nil {
		return err
	}
	var snaps raft.SnapshotStore
	hlog := newSlogger(q.log)
	if q.cfg.InMemory {
		snaps = raft.NewInmemSnapshotStore()
	} else if snaps, err = raft.NewFileSnapshotStoreWithLogger(q.cfg.Dir, 2, hlog.Named("snapshots")); err != nil {
		return fmt.Errorf("quorum: snapshot store: %w", err)
	}
	has, err := raft.HasExistingState(q.logs, q.logs, snaps)
	if err != nil {
		return fmt.Errorf("quorum: reading raft state: %w", err)
	}
	if !has && q.cfg.Log.Seq() > 0 && !slices.Equal(q.cfg.Voters, []peer.ID{q.cfg.Host.ID()}) {
		return fmt.Errorf("%w (%d entries): it can start a quorum of one only, which then takes in the other members (see docs/operations.md, Moving a directory into a quorum)", ErrMigrate, q.cfg.Log.Seq())
	}

	q.trans = newTransport(q.cfg.Host, q.isMember, q.cfg.RPCTimeout, q.log.With("component", "raft-transport"))
	q.fsm = &fsm{log: q.cfg.Log, onApply: q.cfg.OnApply, onSnapshot: q.cfg.OnSnapshot, onCommit: q.trans.committed, logger: q.log, done: q.done}
	notify := make(chan bool, 16)
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(q.cfg.Host.ID().String())
	rc.HeartbeatTimeout = q.cfg.HeartbeatTimeout
	rc.ElectionTimeout = q.cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = q.cfg.LeaderLeaseTimeout
	rc.CommitTimeout = q.cfg.CommitTimeout
	rc.MaxAppendEntries = maxAppendEntries
	rc.SnapshotInterval = q.cfg.SnapshotInterval
	rc.SnapshotThreshold = q.cfg.SnapshotThreshold
	rc.TrailingLogs = q.cfg.TrailingLogs
	rc.NotifyCh = notify
	rc.Logger = hlog.Named("raft")
	rc.NoLegacyTelemetry = true
	// The state is on disk: restoring the last snapshot at every start
	// would replace it with an older image. Only a state behind that
	// snapshot (a restore cut short) needs it.
	rc.NoSnapshotRestoreOnStart = q.stateCovers(snaps)
	if q.r, err = raft.NewRaft(rc, q.fsm, q.logs, q.logs, snaps, q.trans); err != nil {
		return fmt.Errorf("quorum: %w", err)
	}
	q.running.Store(q.r)
	leaders := make(chan raft.Observation, 64)
	q.r.RegisterObserver(raft.NewObserver(leaders, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	}))
	q.wg.Add(1)
	go func() {
		defer q.wg.Done()
		q.watchLeadership(notify, leaders)
	}()
	if !has && len(q.cfg.Voters) > 0 {
		conf := raft.Configuration{}
		for _, v := range q.cfg.Voters {
			conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(v.String()), Address: raft.ServerAddress(v.String())})
		}
		if err := q.r.BootstrapCluster(conf).Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			return fmt.Errorf("quorum: bootstrap: %w", err)
		}
		q.log.Info("quorum bootstrapped", "voters", q.cfg.Voters)
		if q.cfg.Log.Seq() > 0 {
			if err := q.seed(); err != nil {
				return err
			}
		}
	}
	q.refreshMembers()
	if has && len(q.cfg.Voters) > 0 {
		q.warnIfVotersDiffer()
	}
	return nil
}

// stateCovers reports whether the directory's state on disk is at least
// as recent as Raft's latest snapshot.
func (q *Quorum) stateCovers(snaps raft.SnapshotStore) bool {
	metas, err := snaps.List()
	if err != nil || len(metas) == 0 {
		return true
	}
	_, rc, err := snaps.Open(metas[0].ID)
	if err != nil {
		return false
	}
	defer rc.Close()
	h, err := cmdlog.ReadSnapshotHeader(rc)
	return err == nil && q.cfg.Log.Seq() >= h.Seq
}

// seed makes a directory moved into a quorum of one the snapshot every
// member added later starts from: its state predates Raft's log, so a new
// member must install it rather than replay the log, which holds none of
// it. Raft snapshots once elected, keeping no log behind.
func (q *Quorum) seed() error {
	deadline := time.Now().Add(30 * time.Second)
	for q.r.State() != raft.Leader {
		if time.Now().After(deadline) {
			return errors.New("quorum: a quorum of one elected no leader")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A barrier gives the FSM an entry to snapshot at (the bootstrap
	// configuration and the leader's no-op do not reach it).
	if err := q.r.Barrier(enqueueTimeout).Error(); err != nil {
		return fmt.Errorf("quorum: barrier: %w", err)
	}
	rc := q.r.ReloadableConfig()
	keep := rc.TrailingLogs
	rc.TrailingLogs = 0
	if err := q.r.ReloadConfig(rc); err != nil {
		return err
	}
	err := q.r.Snapshot().Error()
	rc.TrailingLogs = keep
	if rerr := q.r.ReloadConfig(rc); rerr != nil {
		return rerr
	}
	if err != nil {
		return fmt.Errorf("quorum: snapshot of the directory moved into the quorum: %w", err)
	}
	q.log.Info("the directory moved into a quorum of one; add members with mesh quorum add", "seq", q.cfg.Log.Seq())
	return nil
}

// Snapshot makes Raft snapshot the state now and compact its log.
func (q *Quorum) Snapshot() error { return q.r.Snapshot().Error() }

// warnIfVotersDiffer tells the operator that a restarted member's list of
// initial voters is not the quorum's configuration, which only `mesh
// quorum add|remove` changes.
func (q *Quorum) warnIfVotersDiffer() {
	var ids []peer.ID
	for _, m := range q.Members() {
		ids = append(ids, m.ID)
	}
	want := slices.Clone(q.cfg.Voters)
	slices.Sort(ids)
	slices.Sort(want)
	if !slices.Equal(ids, want) {
		q.log.Warn("the quorum's members differ from the initial voters given: the quorum keeps its own (change it with mesh quorum add|remove)", "members", ids, "given", want)
	}
}

// watchLeadership tells the node when this member takes or loses the
// lead (OnLeader), and when the leader it knows of changes (OnLeaderChange:
// as Raft observes it, and at the next tick should an observation be
// dropped).
func (q *Quorum) watchLeadership(notify <-chan bool, leaders <-chan raft.Observation) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var known peer.ID
	changed := func() {
		if l := q.Leader(); l != known {
			known = l
			if q.cfg.OnLeaderChange != nil {
				q.cfg.OnLeaderChange(l)
			}
		}
	}
	for {
		select {
		case <-q.done:
			return
		case <-leaders:
			changed()
		case leader := <-notify:
			q.refreshMembers()
			if leader {
				q.log.Info("this node leads the quorum", "term", q.r.CurrentTerm())
			} else {
				q.log.Info("this node no longer leads the quorum")
			}
			if q.cfg.OnLeader != nil {
				q.cfg.OnLeader(leader)
			}
		case <-tick.C:
			q.refreshMembers()
			changed()
		}
	}
}

// refreshMembers reads the latest configuration (committed or not, as Raft
// uses it).
func (q *Quorum) refreshMembers() {
	r := q.running.Load()
	if r == nil {
		return
	}
	f := r.GetConfiguration()
	if err := f.Error(); err != nil {
		return
	}
	var ms []Member
	known := map[peer.ID]bool{}
	for _, s := range f.Configuration().Servers {
		id, err := peer.Decode(string(s.ID))
		if err != nil {
			continue
		}
		ms = append(ms, Member{ID: id, Voter: s.Suffrage == raft.Voter})
		known[id] = true
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.refreshed = time.Now()
	q.members = ms
	if len(ms) > 0 {
		q.known = known
	}
}

// Voters counts the voters among ms.
func Voters(ms []Member) int {
	k := 0
	for _, m := range ms {
		if m.Voter {
			k++
		}
	}
	return k
}

// Members are the servers of the quorum's latest configuration.
func (q *Quorum) Members() []Member {
	q.mu.Lock()
	defer q.mu.Unlock()
	return slices.Clone(q.members)
}

// isMember reports whether p may send Raft RPCs to this member: p is in the
// configuration (or, before there is one, among the configured voters or
// known members). A miss reads the configuration again, at most a few
// times a second, since a member just added may call before the next
// refresh.
func (q *Quorum) isMember(p peer.ID) bool {
	q.mu.Lock()
	ok, stale := q.known[p], time.Since(q.refreshed) > 200*time.Millisecond
	q.mu.Unlock()
	if ok || !stale || q.running.Load() == nil {
		return ok
	}
	q.refreshMembers()
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.known[p]
}

// IsMember reports whether p is a server of the quorum's configuration.
func (q *Quorum) IsMember(p peer.ID) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, m := range q.members {
		if m.ID == p {
			return true
		}
	}
	return false
}

// Leader is the member leading the quorum, as this member knows; empty
// while there is none.
func (q *Quorum) Leader() peer.ID {
	_, id := q.r.LeaderWithID()
	if l := q.leader.Load(); l != nil && l.server == id {
		return l.peer
	}
	p, _ := peer.Decode(string(id))
	q.leader.Store(&leaderID{server: id, peer: p})
	return p
}

// leaderID is a leader's server id and the peer id it names.
type leaderID struct {
	server raft.ServerID
	peer   peer.ID
}

// IsLeader reports whether this member leads the quorum.
func (q *Quorum) IsLeader() bool {
	r := q.running.Load()
	return r != nil && r.State() == raft.Leader
}

// Status is a member's view of the quorum.
type Status struct {
	State       string    `json:"state"` // leader, follower, candidate, shutdown
	Leader      peer.ID   `json:"leader"`
	Term        uint64    `json:"term"`
	CommitIndex uint64    `json:"commit_index"`
	Applied     uint64    `json:"applied_index"`
	LastIndex   uint64    `json:"last_index"`
	LastContact time.Time `json:"last_contact"` // with the leader, on a follower
	Members     []Member  `json:"members"`
}

// Status reports this member's view of the quorum.
func (q *Quorum) Status() Status {
	s := Status{
		State: q.r.State().String(), Leader: q.Leader(), Term: q.r.CurrentTerm(),
		CommitIndex: q.r.CommitIndex(), Applied: q.r.AppliedIndex(), LastIndex: q.r.LastIndex(),
		Members: q.Members(),
	}
	if q.r.State() == raft.Follower {
		s.LastContact = q.r.LastContact()
	}
	return s
}

// enqueueTimeout bounds the wait for Raft to take a proposal.
const enqueueTimeout = 5 * time.Second

// Propose implements cmdlog.Proposer on the leader: the operation is
// committed by a majority, appended to the log on every member, and its
// result returned. On another member it fails at once with a
// *NotLeaderError. If ctx ends or leadership is lost before the entry
// commits, the error is ErrUnknownOutcome: it may still commit. A
// proposal of a client write (cmdlog.WithWrite) is applied once however
// many times it is proposed within cmdlog.WriteWindow: a repeat returns
// what the first produced.
func (q *Quorum) Propose(ctx context.Context, kind string, at int64, op any) (any, error) {
	raw, err := json.Marshal(op)
	if err != nil {
		return nil, fmt.Errorf("quorum: encode %s operation: %w", kind, err)
	}
	w, _ := cmdlog.WriteOf(ctx)
	data, err := json.Marshal(proposal{At: at, Kind: kind, Op: raw, Write: w.ID})
	if err != nil {
		return nil, err
	}
	if len(data) > maxEntry {
		return nil, fmt.Errorf("%w: %d bytes, at most %d", ErrTooLarge, len(data), maxEntry)
	}
	if q.r.State() != raft.Leader {
		return nil, &NotLeaderError{Leader: q.Leader()}
	}
	f := q.r.Apply(data, enqueueTimeout)
	done := make(chan struct{})
	go func() {
		f.Error()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: %v", ErrUnknownOutcome, ctx.Err())
	}
	switch err := f.Error(); {
	case err == nil:
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return nil, &NotLeaderError{Leader: q.Leader()}
	case errors.Is(err, raft.ErrRaftShutdown):
		return nil, ErrClosed
	default: // leadership lost, enqueue timeout
		return nil, fmt.Errorf("%w: %v", ErrUnknownOutcome, err)
	}
	a, _ := f.Response().(applied)
	if a.seq > 0 {
		cmdlog.NoteSeq(ctx, a.seq)
	}
	return a.res, a.err
}

// AddVoter adds p to the quorum as a voter (on the leader). It returns
// once the new configuration is committed.
func (q *Quorum) AddVoter(ctx context.Context, p peer.ID) error {
	q.mu.Lock()
	q.known[p] = true
	q.mu.Unlock()
	return q.change(ctx, q.r.AddVoter(raft.ServerID(p.String()), raft.ServerAddress(p.String()), 0, enqueueTimeout))
}

// AddNonvoter adds p to the quorum as a member that receives the log but
// does not vote (on the leader): a new member catches up so, without
// counting in the majority, before AddVoter promotes it.
func (q *Quorum) AddNonvoter(ctx context.Context, p peer.ID) error {
	q.mu.Lock()
	q.known[p] = true
	q.mu.Unlock()
	return q.change(ctx, q.r.AddNonvoter(raft.ServerID(p.String()), raft.ServerAddress(p.String()), 0, enqueueTimeout))
}

// RemoveServer removes p from the quorum (on the leader).
func (q *Quorum) RemoveServer(ctx context.Context, p peer.ID) error {
	return q.change(ctx, q.r.RemoveServer(raft.ServerID(p.String()), 0, enqueueTimeout))
}

// Barrier returns once this member (the leader) applied every entry
// committed before the call: its log then holds what the quorum took.
func (q *Quorum) Barrier(ctx context.Context) error {
	return q.change(ctx, q.r.Barrier(enqueueTimeout))
}

func (q *Quorum) change(ctx context.Context, f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		return fmt.Errorf("%w: %v", ErrUnknownOutcome, ctx.Err())
	}
	q.refreshMembers()
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return &NotLeaderError{Leader: q.Leader()}
	case errors.Is(err, raft.ErrEnqueueTimeout):
		// Raft takes a change once the last one committed.
		return fmt.Errorf("%w: %v", ErrChangeInProgress, err)
	case errors.Is(err, raft.ErrLeadershipLost):
		return fmt.Errorf("%w: %v", ErrUnknownOutcome, err)
	}
	return err
}

// Close leaves the quorum's work to the others: a leader hands its
// leadership to an up-to-date member first (waiting an election timeout at
// most), so writes stall for a round trip rather than a heartbeat timeout;
// then Raft stops, then the transport and Raft's log. It is safe to call
// twice and after a failed Start.
func (q *Quorum) Close() error {
	q.closeOnce.Do(func() {
		if q.r != nil && q.IsLeader() && Voters(q.Members()) > 1 {
			f := q.r.LeadershipTransfer()
			done := make(chan error, 1)
			go func() { done <- f.Error() }()
			select {
			case err := <-done:
				if err != nil {
					q.log.Debug("handing over the leadership failed", "err", err)
				}
			case <-time.After(q.cfg.ElectionTimeout):
			}
		}
		close(q.done)
		if q.r != nil {
			q.closeErr = q.r.Shutdown().Error()
		}
		q.wg.Wait()
		if q.trans != nil {
			q.trans.Close()
		}
		if q.db != nil {
			q.closeErr = errors.Join(q.closeErr, q.db.Close())
		}
	})
	return q.closeErr
}
