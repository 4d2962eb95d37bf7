package p2p

import (
	"bytes"
	"slices"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/peer"
	mh "github.com/multiformats/go-multihash"
)

// seqnoSize is the size of a message's seqno: 8 bytes, big-endian, as
// go-libp2p and js-libp2p publish it. A topic validator refuses another
// size (the message id would be ambiguous).
const seqnoSize = 8

// MessageID is the gossipsub message id of m: its origin's public key as
// libp2p's protobuf encodes it (an Ed25519 key: 08 01 12 20 and the 32
// key bytes), then its seqno. This is js-libp2p's default
// (@chainsafe/libp2p-gossipsub's msgIdFnStrictSign, @libp2p/pubsub's
// msgId); go-libp2p's default is the origin's peer id and the seqno,
// which for a key inlined in the peer id (Ed25519, secp256k1) is the same
// with the identity multihash's two-byte header before it. A key too
// large to inline (RSA) travels in the message's key field, which
// js-libp2p then uses, as this does.
func MessageID(m *pb.Message) string {
	key := m.GetKey()
	if dh, err := mh.Decode(m.GetFrom()); err == nil && dh.Code == mh.IDENTITY {
		key = dh.Digest
	}
	if key == nil {
		key = m.GetFrom() // an unsigned message, refused by the validators
	}
	return string(key) + string(m.GetSeqno())
}

// legacyIDSize is the size of an id that a node of the release before
// MessageID gives an Ed25519 origin's message: the identity multihash
// header (00 24), the protobuf key (36 bytes) and the seqno.
const legacyIDSize = 2 + 36 + seqnoSize

var legacyIDPrefix = []byte{0x00, 0x24, 0x08, 0x01, 0x12, 0x20}

// isLegacyID reports whether id is in the form of go-libp2p's default id
// for an Ed25519 origin, which MessageID never makes (its ids start with
// the protobuf key, 08 01 …).
func isLegacyID(id string) bool {
	return len(id) == legacyIDSize && bytes.HasPrefix([]byte(id), legacyIDPrefix)
}

// inspectRPC edits every incoming RPC before gossipsub handles it (from a
// peer other than self):
//
//   - it takes out of the IHAVE announcements the ids in the form of the
//     release before (isLegacyID): this node could not match them with
//     the messages it has, and would ask for them (IWANT), echoing back to
//     an older node its own messages, which gossipsub counts as invalid
//     there, and counting against it the answers whose ids differ from
//     those asked. Dropped, they cost no one anything; the messages still
//     come through the mesh;
//   - it takes out the published messages that claim self as their origin:
//     echoes of this node's own messages, which js-libp2p forwards to its
//     mesh peers whoever published them, and which gossipsub would count
//     as invalid against the peer (a message forged in self's name could
//     not carry self's signature anyway).
func inspectRPC(self peer.ID) func(peer.ID, *pubsub.RPC) error {
	return func(_ peer.ID, rpc *pubsub.RPC) error {
		for _, ih := range rpc.GetControl().GetIhave() {
			ih.MessageIDs = dropLegacy(ih.MessageIDs)
		}
		if len(rpc.Publish) > 0 {
			rpc.Publish = slices.DeleteFunc(rpc.Publish, func(m *pb.Message) bool { return peer.ID(m.GetFrom()) == self })
		}
		return nil
	}
}

func dropLegacy(ids []string) []string {
	out := ids[:0]
	for _, id := range ids {
		if !isLegacyID(id) {
			out = append(out, id)
		}
	}
	return out
}

// seqnoOK reports whether m's seqno has the size MessageID assumes.
func seqnoOK(m *pubsub.Message) bool { return len(m.GetSeqno()) == seqnoSize }
