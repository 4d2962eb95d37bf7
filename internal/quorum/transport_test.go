package quorum

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
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
