package wall

import (
	"encoding/hex"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"
)

// The test vectors of docs/wire.md (The seal, Rosters and beats): a peer
// written from the document checks itself against them.
const (
	vectorToken   = "ck_test"
	vectorCluster = "c_test"
	vectorOrigin  = "12D3KooWA4Xop1JaT3MHxwYMkCepYsv4iPVopMXwCz5iHYdBfeSB"
	vectorPlain   = `{"t":"beat","epoch":1,"rev":0,"digest":"00000000000000000000000000000000","at":1,"n":1}`
	vectorKey     = "a5f8c3a9c6c6265b164b4737e3a7e4aa35aaa99c3471e158bcbd821cc4807214"
	vectorSealed  = "000102030405060708090a0b0c0d0e0f1011121314151617" +
		"661fcb9e56a45c67c5764d3ad522768d4af8d2fb10d5134e738d17aea45ebf60e124025382abb65b6b1c8a3ddb23d8927af" +
		"646dbacbae691dc56c2fec57c47e12aaf49327c4a5b975a6fcd8d1d2310d82d2e453bd52baf4a8e068eba2e1513c7734d49db609021"
)

func TestSealVector(t *testing.T) {
	t.Parallel()
	if k := hex.EncodeToString(derive(vectorToken, vectorCluster, "wire key", 32)); k != vectorKey {
		t.Fatalf("wire key %s, want %s", k, vectorKey)
	}
	origin, err := peer.Decode(vectorOrigin)
	if err != nil {
		t.Fatal(err)
	}
	nonce := make([]byte, 24)
	for i := range nonce {
		nonce[i] = byte(i)
	}
	s := newSealer(vectorCluster, vectorToken)
	sealed := s.sealWith(nonce, topicAD(origin), []byte(vectorPlain))
	if got := hex.EncodeToString(sealed); got != vectorSealed {
		t.Errorf("sealed %s, want %s", got, vectorSealed)
	}
	if b, err := s.open(topicAD(origin), sealed); err != nil || string(b) != vectorPlain {
		t.Errorf("open: %q %v", b, err)
	}
	var d digest
	d.flip(member{Agent: "alice", Vis: VisPublic})
	if d.String() != "5905a98d4319fa83f814a33acc1c3756" {
		t.Errorf("digest of alice alone: %s", d)
	}
}
