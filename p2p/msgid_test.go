package p2p

import (
	"crypto/ed25519"
	"encoding/hex"
	"testing"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// The test vector of docs/wire.md (Message ids): the Ed25519 key whose seed
// is the bytes 0, 1, …, 31, seqno 1.
func TestMessageID(t *testing.T) {
	seed := make([]byte, ed25519.SeedSize)
	for i := range seed {
		seed[i] = byte(i)
	}
	pub, err := crypto.UnmarshalEd25519PublicKey(ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey))
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	if id.String() != "12D3KooWA4Xop1JaT3MHxwYMkCepYsv4iPVopMXwCz5iHYdBfeSB" {
		t.Fatalf("peer id %s", id)
	}
	m := &pb.Message{From: []byte(id), Seqno: []byte{0, 0, 0, 0, 0, 0, 0, 1}}
	const want = "08011220" + "03a107bff3ce10be1d70dd18e74bc09967e4d6309ba50d5f1ddc8664125531b8" + "0000000000000001"
	if got := hex.EncodeToString([]byte(MessageID(m))); got != want {
		t.Errorf("MessageID = %s, want %s (js-libp2p's msgIdFnStrictSign)", got, want)
	}
	legacy := pubsub.DefaultMsgIdFn(m)
	if !isLegacyID(legacy) || isLegacyID(MessageID(m)) {
		t.Errorf("isLegacyID: go-libp2p's default id %x should be legacy, MessageID's not", legacy)
	}
	ih := &pb.ControlIHave{MessageIDs: []string{legacy, MessageID(m)}}
	other := &pb.Message{From: []byte("someone else"), Seqno: m.Seqno}
	rpc := &pubsub.RPC{RPC: pb.RPC{Control: &pb.ControlMessage{Ihave: []*pb.ControlIHave{ih}}, Publish: []*pb.Message{m, other}}}
	inspectRPC(id)("", rpc)
	if len(ih.MessageIDs) != 1 || ih.MessageIDs[0] != MessageID(m) {
		t.Errorf("inspectRPC left IHAVE %x, want only the MessageID form", ih.MessageIDs)
	}
	if len(rpc.Publish) != 1 || rpc.Publish[0] != other {
		t.Errorf("inspectRPC left %d published messages, want the one from another origin", len(rpc.Publish))
	}
}
