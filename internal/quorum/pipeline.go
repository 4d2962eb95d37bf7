package quorum

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/libp2p/go-libp2p/core/network"
)

// PipelineProtocol carries the leader's AppendEntries to one follower on
// one stream, several on their way at once, answered in order: each a
// request frame and a response frame as on RaftProtocol. Raft sends the
// next batch of entries without waiting for the answer to the last, so a
// follower's round trip (its fsync, two hops between goroutines on each
// side) no longer bounds how many entries a second the quorum commits.
// A member of an earlier release does not serve it, and is sent one
// AppendEntries at a time on RaftProtocol.
const PipelineProtocol = "/mesh/raft/pipeline/1.0.0"

// maxInFlight bounds the AppendEntries a pipeline has on its way.
const maxInFlight = 64

var errPipelineClosed = errors.New("quorum: pipeline closed")

// pipeline is a raft.AppendPipeline on one stream.
type pipeline struct {
	t *transport
	s network.Stream

	mu       sync.Mutex // sends in the order of inflight
	sent     sentState  // what the follower was told last (under mu)
	inflight chan *appendFuture
	// commit is the last index the leader committed, and noticeDue is
	// signalled when it moves: notices sends the follower a commit notice.
	commit    atomic.Uint64
	noticeDue chan struct{}
	done      chan raft.AppendFuture
	stop      chan struct{}
	once      sync.Once
	wg        sync.WaitGroup
}

var _ raft.AppendPipeline = (*pipeline)(nil)

// AppendEntriesPipeline implements raft.Transport.
func (t *transport) AppendEntriesPipeline(_ raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	s, err := t.open(target, PipelineProtocol)
	if err != nil {
		// Not served (an earlier release), or not reachable: Raft goes on
		// one RPC at a time, whose errors it handles.
		t.log.Debug("no pipeline to a member", "peer", target, "err", err)
		return nil, raft.ErrPipelineReplicationNotSupported
	}
	p := &pipeline{t: t, s: s, inflight: make(chan *appendFuture, maxInFlight),
		done: make(chan raft.AppendFuture, maxInFlight), stop: make(chan struct{}), noticeDue: make(chan struct{}, 1)}
	p.wg.Go(p.receive)
	p.wg.Go(p.notices)
	t.mu.Lock()
	t.pipelines[p] = true
	t.mu.Unlock()
	return p, nil
}

// AppendEntries implements raft.AppendPipeline: it sends args and returns
// at once; the answer comes on Consumer, in order.
func (p *pipeline) AppendEntries(args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) (raft.AppendFuture, error) {
	f := &appendFuture{start: time.Now(), args: args, resp: resp, done: make(chan struct{})}
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case p.inflight <- f:
	case <-p.stop:
		return nil, raft.ErrPipelineShutdown
	}
	p.s.SetWriteDeadline(time.Now().Add(p.t.timeout))
	if err := p.t.send(p.s, rpcAppendEntries, args); err != nil {
		p.abort() // the receiver fails f, and every later one
		return nil, err
	}
	p.sent.record(args)
	if p.commit.Load() > p.sent.commit {
		// The leader committed entries this one carries before Raft built
		// it (another follower answered first): its commit index is behind,
		// and the notice of that commit found them unsent.
		p.noticeNow()
	}
	return f, nil
}

// Consumer implements raft.AppendPipeline.
func (p *pipeline) Consumer() <-chan raft.AppendFuture { return p.done }

// Close implements raft.AppendPipeline: it fails what is on its way and
// waits for the receiver.
func (p *pipeline) Close() error {
	p.t.mu.Lock()
	delete(p.t.pipelines, p)
	p.t.mu.Unlock()
	p.abort()
	p.wg.Wait()
	return nil
}

func (p *pipeline) abort() {
	p.once.Do(func() {
		close(p.stop)
		p.s.Reset()
	})
}

// receive reads the answers in the order of the requests, and hands each
// future on; past a failure it fails the rest.
func (p *pipeline) receive() {
	var failed error
	for {
		var f *appendFuture
		select {
		case f = <-p.inflight:
		case <-p.stop:
			select {
			case f = <-p.inflight: // sent before Close: failed below
			default:
				return
			}
		}
		if failed == nil {
			p.s.SetReadDeadline(time.Now().Add(p.t.timeout))
			if failed = p.t.receive(p.s, f.resp); failed != nil {
				p.abort()
			}
		}
		f.err = failed
		if f.err == nil {
			select {
			case <-p.stop:
				f.err = errPipelineClosed
			default:
			}
		}
		close(f.done)
		if f.notice {
			continue // Raft did not send it
		}
		select {
		case p.done <- f: // room for every future on its way, unless Raft stopped reading
		default:
			select {
			case p.done <- f:
			case <-p.stop:
			}
		}
	}
}

// appendFuture is an AppendEntries on its way in a pipeline.
type appendFuture struct {
	start time.Time
	args  *raft.AppendEntriesRequest
	resp  *raft.AppendEntriesResponse
	err   error
	done  chan struct{}
	// notice: a commit notice (committed), not Raft's: its answer is
	// read and dropped.
	notice bool
}

func (f *appendFuture) Error() error {
	<-f.done
	return f.err
}
func (f *appendFuture) Start() time.Time                      { return f.start }
func (f *appendFuture) Request() *raft.AppendEntriesRequest   { return f.args }
func (f *appendFuture) Response() *raft.AppendEntriesResponse { return f.resp }

// Commit notices. A follower learns that entries committed from the
// leader's next AppendEntries, which Raft sends when more entries come or
// after CommitTimeout: a write sent through a follower waits for it (its
// node answers once its own copy has the write), and while every client
// waits so, no entries come, and each write waited most of CommitTimeout
// (12 ms on average at 10 ms in `mesh bench quorum`). So when the leader
// commits (its FSM is handed the entries), each pipeline sends its
// follower at once the AppendEntries Raft would send at CommitTimeout
// with nothing new to carry: no entries, the last entry sent as the
// previous one, and the commit index, at most that entry's. The follower
// checks it as any AppendEntries of the leader (the term, the previous
// entry in its log) and commits what it says; its answer is dropped
// (Raft learns all it says from the next AppendEntries of its own).

// sentState is what a pipeline's last AppendEntries told the follower.
type sentState struct {
	ok             bool
	header         raft.RPCHeader
	term           uint64
	leader         []byte
	index, logTerm uint64 // the last entry the follower was sent
	commit         uint64
}

// record notes args, sent.
func (s *sentState) record(args *raft.AppendEntriesRequest) {
	s.ok, s.header, s.term, s.leader = true, args.RPCHeader, args.Term, args.Leader
	s.index, s.logTerm = args.PrevLogEntry, args.PrevLogTerm
	if n := len(args.Entries); n > 0 {
		s.index, s.logTerm = args.Entries[n-1].Index, args.Entries[n-1].Term
	}
	s.commit = args.LeaderCommitIndex
}

// notice is the AppendEntries that tells the follower that index
// committed, nil when it knows or was not sent the entry yet.
func (s *sentState) notice(index uint64) *raft.AppendEntriesRequest {
	index = min(index, s.index)
	if !s.ok || index <= s.commit {
		return nil
	}
	return &raft.AppendEntriesRequest{RPCHeader: s.header, Term: s.term, Leader: s.leader,
		PrevLogEntry: s.index, PrevLogTerm: s.logTerm, LeaderCommitIndex: index}
}

// committed has every pipeline tell its follower that index committed.
// It never waits: it is called by the leader's FSM, which a follower that
// answers nothing must not hold up (a pipeline full, or a stream that
// takes no more bytes, holds p.mu until the RPC timeout).
func (t *transport) committed(index uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for p := range t.pipelines {
		p.commit.Store(index) // the FSM is handed batches in order
		p.noticeNow()
	}
}

// noticeNow has notices send a commit notice, without waiting.
func (p *pipeline) noticeNow() {
	select {
	case p.noticeDue <- struct{}{}:
	default: // one is due already: it reads commit then
	}
}

// notices sends the follower a commit notice each time the leader commits,
// for the last index committed, until the pipeline stops.
func (p *pipeline) notices() {
	for {
		select {
		case <-p.stop:
			return
		case <-p.noticeDue:
			p.notify(p.commit.Load())
		}
	}
}

// notify sends the follower a commit notice for index, unless it knows,
// or the pipeline is full (Raft's next AppendEntries will tell it).
func (p *pipeline) notify(index uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	args := p.sent.notice(index)
	if args == nil {
		return
	}
	f := &appendFuture{start: time.Now(), args: args, resp: new(raft.AppendEntriesResponse), done: make(chan struct{}), notice: true}
	select {
	case p.inflight <- f:
	default:
		return
	}
	p.s.SetWriteDeadline(time.Now().Add(p.t.timeout))
	if err := p.t.send(p.s, rpcAppendEntries, args); err != nil {
		p.abort()
		return
	}
	p.sent.commit = args.LeaderCommitIndex
}
