package p2p

import (
	"context"
	"errors"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/agentmesh/mesh/internal/ratelimit"
)

// Every request/response stream a peer opens (HandleRequests) costs it
// from two budgets the host keeps, whatever the handler does with it:
//
//   - requests, per peer and protocol: streamRate a second, in bursts of
//     streamBurst, so that no peer has a handler run at whatever rate it
//     likes (a handler's own limits, such as the directory's write
//     budgets, are meant to answer well below it). Past it the stream is
//     reset unread;
//   - the bytes of the answers it gets, per peer over all protocols:
//     answerRate a second, in bursts of answerBurst (more than the largest
//     answer, a full copy of the directory's heartbeats), so that a small
//     request cannot pull an endless stream of large answers (the change
//     feed, presence, rosters). An answer past it waits for its bytes, up
//     to maxAnswerWait (an honest node catching up only slows down), or
//     the stream is reset.
const (
	streamRate    = 2000
	streamBurst   = 4000
	answerRate    = 8 << 20
	answerBurst   = 96 << 20
	maxAnswerWait = 10 * time.Second
	// maxStreamPeers bounds the buckets each budget keeps.
	maxStreamPeers = 10_000
)

type protoPeer struct {
	proto string
	peer  peer.ID
}

type streamLimits struct {
	requests *ratelimit.Keyed[protoPeer]
	answers  *ratelimit.Keyed[peer.ID]
}

func newStreamLimits() *streamLimits {
	return &streamLimits{
		requests: ratelimit.NewKeyed[protoPeer](streamRate, streamBurst, maxStreamPeers),
		answers:  ratelimit.NewKeyed[peer.ID](answerRate, answerBurst, maxStreamPeers),
	}
}

// request takes one request of p on proto; false when p is over the rate.
func (l *streamLimits) request(p peer.ID, proto string) bool {
	now := time.Now()
	return l.requests.Bucket(protoPeer{proto, p}, now).AllowN(now, 1)
}

var errAnswerBudget = errors.New("p2p: the peer is over its answer budget")

// answer waits until p's budget holds n bytes of answer and takes them;
// it fails when that would take longer than maxAnswerWait, or ctx ends.
func (l *streamLimits) answer(ctx context.Context, p peer.ID, n int) error {
	now := time.Now()
	r := l.answers.Bucket(p, now).ReserveN(now, n)
	if !r.OK() {
		return errAnswerBudget
	}
	wait := r.DelayFrom(now)
	if wait == 0 {
		return nil
	}
	if wait > maxAnswerWait {
		r.CancelAt(now)
		return errAnswerBudget
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		r.Cancel()
		return ctx.Err()
	}
}
