package p2p

import (
	"encoding/binary"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-msgio"
	"google.golang.org/protobuf/proto"

	"github.com/agentmesh/mesh/internal/testkit"
)

// TestSignatureDrops: a message gossipsub refuses for its signature before
// any validator (StrictSign: unsigned, or signed by another key than its
// origin's) is counted as invalid, on its topic and in
// mesh_p2p_dropped_total, and costs its sender score (docs/wire.md 2.1).
func TestSignatureDrops(t *testing.T) {
	for _, tc := range []struct {
		name string
		sig  []byte
	}{
		{"unsigned", nil},
		{"badly signed", make([]byte, 64)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			node := startHost(t, Config{})
			var got inbox
			st, err := node.Join("sig", TopicConfig{Deliver: got.deliver})
			if err != nil {
				t.Fatal(err)
			}
			sender, w := rawGossip(t, node, "sig")
			seqno := make([]byte, 8)
			binary.BigEndian.PutUint64(seqno, 1)
			topic := "sig"
			m := &pb.Message{From: []byte(sender), Data: []byte("forged"), Seqno: seqno, Topic: &topic, Signature: tc.sig}
			writeRPC(t, w, &pb.RPC{Publish: []*pb.Message{m}})
			testkit.Eventually(t, 10*time.Second, func() bool {
				return st.Dropped(DropInvalid) == 1 && dropCount(node, SurfaceTopic, DropInvalid) == 1
			}, "the %s message counted as invalid, on its topic and in the metric", tc.name)
			testkit.Eventually(t, 10*time.Second, func() bool { return node.PeerScore(sender) < 0 },
				"the sender of the %s message kept its score", tc.name)
			if len(got.all()) > 0 {
				t.Errorf("delivered: %v", got.all())
			}
		})
	}
}

// rawGossip connects to node a bare libp2p peer that speaks gossipsub by
// hand: it subscribes to topic on a stream of its own, which it returns
// (to write RPCs to), once node sees the subscription.
func rawGossip(t *testing.T, node *Host, topic string) (peerID peer.ID, w msgio.WriteCloser) {
	t.Helper()
	h, err := libp2p.New(libp2p.ListenAddrStrings(loopback...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	// The node's own stream to the peer, which it needs to take it as a
	// gossipsub peer: read and ignored.
	h.SetStreamHandler(pubsub.GossipSubID_v11, func(s network.Stream) { io.Copy(io.Discard, s) })
	if err := h.Connect(t.Context(), addrInfo(node)); err != nil {
		t.Fatal(err)
	}
	s, err := h.NewStream(t.Context(), node.ID(), pubsub.GossipSubID_v11)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Reset() })
	w = msgio.NewVarintWriter(s)
	yes := true
	writeRPC(t, w, &pb.RPC{Subscriptions: []*pb.RPC_SubOpts{{Subscribe: &yes, Topicid: &topic}}})
	testkit.Eventually(t, 10*time.Second, func() bool { return slices.Contains(node.TopicPeers(topic), h.ID()) },
		"the node never saw the raw peer's subscription to %s", topic)
	return h.ID(), w
}

func writeRPC(t *testing.T, w msgio.WriteCloser, rpc *pb.RPC) {
	t.Helper()
	b, err := proto.Marshal(rpc)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteMsg(b); err != nil {
		t.Fatal(err)
	}
}
