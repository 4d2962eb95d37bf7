package quorum

import (
	"bytes"
	"log/slog"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"

	"github.com/agentmesh/mesh/internal/testkit"
)

// TestDecodeRPC: each RPC type decodes into its own request, as sent; an
// unknown type or a body that is not its request is an error.
func TestDecodeRPC(t *testing.T) {
	hdr := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, Addr: []byte("peer")}
	for typ, req := range map[uint8]any{
		rpcAppendEntries:   &raft.AppendEntriesRequest{RPCHeader: hdr, Term: 3, PrevLogEntry: 7, Entries: []*raft.Log{{Index: 8, Term: 3, Data: []byte("x")}}},
		rpcRequestVote:     &raft.RequestVoteRequest{RPCHeader: hdr, Term: 4, LastLogIndex: 9},
		rpcRequestPreVote:  &raft.RequestPreVoteRequest{RPCHeader: hdr, Term: 5},
		rpcInstallSnapshot: &raft.InstallSnapshotRequest{RPCHeader: hdr, Term: 6, Size: 1024},
		rpcTimeoutNow:      &raft.TimeoutNowRequest{RPCHeader: hdr},
	} {
		var buf bytes.Buffer
		if err := codec.NewEncoder(&buf, msgpack).Encode(req); err != nil {
			t.Fatal(err)
		}
		got, err := decodeRPC(typ, buf.Bytes())
		if err != nil || !reflect.DeepEqual(got, req) {
			t.Errorf("type %d: %+v, %v; want %+v", typ, got, err, req)
		}
	}
	if _, err := decodeRPC(99, nil); err == nil {
		t.Error("an unknown RPC type decoded")
	}
	if _, err := decodeRPC(rpcRequestVote, []byte{0xc1}); err == nil {
		t.Error("a body that is not msgpack decoded")
	}
}

// FuzzDecodeRPC: whatever a peer sends, decoding it never panics.
func FuzzDecodeRPC(f *testing.F) {
	f.Add(uint8(rpcAppendEntries), []byte{0x80})
	f.Add(uint8(rpcInstallSnapshot), []byte{0x81, 0xa4, 'S', 'i', 'z', 'e', 0xff})
	f.Fuzz(func(t *testing.T, typ uint8, body []byte) {
		decodeRPC(typ, body)
	})
}

// TestPipelineAnswersInOrder: AppendEntries sent on a pipeline, several
// on their way at once, are handed to the follower's Raft in order and
// answered in order; a peer outside the quorum gets no pipeline served,
// and a follower that closes its transport fails what is on its way.
func TestPipelineAnswersInOrder(t *testing.T) {
	leader, follower, stranger := newHost(t), newHost(t), newHost(t)
	for _, h := range []host.Host{leader, stranger} {
		h.Peerstore().AddAddrs(follower.ID(), follower.Addrs(), peerstore.PermanentAddrTTL)
	}
	log := slog.New(slog.DiscardHandler)
	ft := newTransport(follower, func(p peer.ID) bool { return p == leader.ID() }, 2*time.Second, log)
	lt := newTransport(leader, func(peer.ID) bool { return true }, 2*time.Second, log)
	defer lt.Close()
	var seen []uint64
	defer answerAppends(ft, func(req *raft.AppendEntriesRequest) { seen = append(seen, req.Term) })()
	p, err := lt.AppendEntriesPipeline("", raft.ServerAddress(follower.ID().String()))
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	for term := range uint64(n) {
		req := &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{Addr: []byte(leader.ID().String())}, Term: term + 1,
			Entries: []*raft.Log{{Index: term + 1, Term: term + 1, Data: []byte("x")}}}
		if _, err := p.AppendEntries(req, new(raft.AppendEntriesResponse)); err != nil {
			t.Fatal(err)
		}
	}
	for term := range uint64(n) {
		f := <-p.Consumer()
		if err := f.Error(); err != nil || f.Response().Term != term+1 || f.Request().Term != term+1 {
			t.Fatalf("answer %d: %+v for %d, %v", term, f.Response(), f.Request().Term, err)
		}
	}
	if len(seen) != n || seen[n-1] != n {
		t.Fatalf("the follower's Raft saw %v", seen)
	}
	st := newTransport(stranger, func(peer.ID) bool { return true }, 2*time.Second, log)
	defer st.Close()
	sp, err := st.AppendEntriesPipeline("", raft.ServerAddress(follower.ID().String()))
	if err == nil {
		_, err = sp.AppendEntries(&raft.AppendEntriesRequest{Term: 1}, new(raft.AppendEntriesResponse))
		if err == nil {
			err = (<-sp.Consumer()).Error()
		}
		sp.Close()
	}
	if err == nil {
		t.Fatal("a stranger's pipeline was served")
	}
	ft.Close()
	if _, err := p.AppendEntries(&raft.AppendEntriesRequest{Term: 99}, new(raft.AppendEntriesResponse)); err == nil {
		if err := (<-p.Consumer()).Error(); err == nil {
			t.Fatal("an AppendEntries to a closed follower succeeded")
		}
	}
	p.Close()
}

// TestACommitBeforeItsEntriesWereSentIsNoticed: the leader commits an
// entry (another follower answered first) before its pipeline sent the
// entry to this follower, with the commit index of before: the follower
// is told of the commit at once, not at Raft's next AppendEntries
// (CommitTimeout, or the next write).
func TestACommitBeforeItsEntriesWereSentIsNoticed(t *testing.T) {
	leader, follower := newHost(t), newHost(t)
	leader.Peerstore().AddAddrs(follower.ID(), follower.Addrs(), peerstore.PermanentAddrTTL)
	log := slog.New(slog.DiscardHandler)
	ft := newTransport(follower, func(p peer.ID) bool { return p == leader.ID() }, 2*time.Second, log)
	defer ft.Close()
	lt := newTransport(leader, func(peer.ID) bool { return true }, 2*time.Second, log)
	defer lt.Close()
	var told atomic.Uint64 // the commit index the follower was told last
	defer answerAppends(ft, func(req *raft.AppendEntriesRequest) { told.Store(req.LeaderCommitIndex) })()
	p, err := lt.AppendEntriesPipeline("", raft.ServerAddress(follower.ID().String()))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	hdr := raft.RPCHeader{Addr: []byte(leader.ID().String())}
	send := func(index, commit uint64) {
		req := &raft.AppendEntriesRequest{RPCHeader: hdr, Term: 1, PrevLogEntry: index - 1, PrevLogTerm: 1, LeaderCommitIndex: commit,
			Entries: []*raft.Log{{Index: index, Term: 1, Data: []byte("x")}}}
		if _, err := p.AppendEntries(req, new(raft.AppendEntriesResponse)); err != nil {
			t.Fatal(err)
		}
	}
	send(1, 0)
	lt.committed(2) // entry 2 committed, not yet sent here: the notice says 1
	testkit.Eventually(t, 10*time.Second, func() bool { return told.Load() == 1 }, "the follower was not told of commit 1")
	send(2, 1) // built before the commit
	testkit.Eventually(t, 10*time.Second, func() bool { return told.Load() == 2 }, "the follower was told commit %d, not 2", told.Load())
}

// answerAppends is a follower's Raft on ft: it shows each AppendEntries
// to see and answers it with success, until the returned stop is called.
func answerAppends(ft *transport, see func(*raft.AppendEntriesRequest)) (stop func()) {
	done := make(chan struct{})
	go func() {
		for {
			select {
			case rpc := <-ft.Consumer():
				req := rpc.Command.(*raft.AppendEntriesRequest)
				see(req)
				rpc.Respond(&raft.AppendEntriesResponse{Term: req.Term, Success: true}, nil)
			case <-done:
				return
			}
		}
	}()
	return func() { close(done) }
}
