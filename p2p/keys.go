package p2p

import (
	"crypto/ed25519"
	"errors"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// PeerID returns the peer ID of an Ed25519 public key.
func PeerID(pub ed25519.PublicKey) (peer.ID, error) {
	k, err := crypto.UnmarshalEd25519PublicKey(pub)
	if err != nil {
		return "", err
	}
	return peer.IDFromPublicKey(k)
}

// PublicKey extracts the Ed25519 public key embedded in a peer ID, so that
// a peer's identity doubles as a verification key (peer IDs of Ed25519 keys
// inline the key).
func PublicKey(id peer.ID) (ed25519.PublicKey, error) {
	k, err := id.ExtractPublicKey()
	if err != nil {
		return nil, err
	}
	if k.Type() != crypto.Ed25519 {
		return nil, errors.New("p2p: peer key is not Ed25519")
	}
	raw, err := k.Raw()
	return ed25519.PublicKey(raw), err
}
