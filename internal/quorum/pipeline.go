package quorum

import (
	"errors"
	"sync"
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
	inflight chan *appendFuture
	done     chan raft.AppendFuture
	stop     chan struct{}
	once     sync.Once
	wg       sync.WaitGroup
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
		done: make(chan raft.AppendFuture, maxInFlight), stop: make(chan struct{})}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.receive()
	}()
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
	return f, nil
}

// Consumer implements raft.AppendPipeline.
func (p *pipeline) Consumer() <-chan raft.AppendFuture { return p.done }

// Close implements raft.AppendPipeline: it fails what is on its way and
// waits for the receiver.
func (p *pipeline) Close() error {
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
}

func (f *appendFuture) Error() error {
	<-f.done
	return f.err
}
func (f *appendFuture) Start() time.Time                      { return f.start }
func (f *appendFuture) Request() *raft.AppendEntriesRequest   { return f.args }
func (f *appendFuture) Response() *raft.AppendEntriesResponse { return f.resp }
