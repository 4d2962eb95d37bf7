package identity

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"testing"

	"github.com/mr-tron/base58"
)

// Vectors from the did:key method's published test vectors
// (w3c-ccg/did-method-key, test-vectors/ed25519-x25519.json).
var didKeyVectors = []struct{ seed, pubBase58, did string }{
	{"0000000000000000000000000000000000000000000000000000000000000000", "4zvwRjXUKGfvwnParsHAS3HuSVzV5cA4McphgmoCtajS", "did:key:z6MkiTBz1ymuepAQ4HEHYSF1H8quG5GLVVQR3djdX3mDooWp"},
	{"0000000000000000000000000000000000000000000000000000000000000001", "6ASf5EcmmEHTgDJ4X4ZT5vT6iHVJBXPg5AN5YoTCpGWt", "did:key:z6MkjchhfUsD6mmvni8mCdXHw216Xrm9bQe2mBH1P5RDjVJG"},
	{"0000000000000000000000000000000000000000000000000000000000000002", "8pM1DN3RiT8vbom5u1sNryaNT1nyL8CTTW3b5PwWXRBH", "did:key:z6MknGc3ocHs3zdPiJbnaaqDi58NGb4pk1Sp9WxWufuXSdxf"},
	{"0000000000000000000000000000000000000000000000000000000000000003", "HPYVwAQmskwT1qEEeRzhoomyfyupJGASQQtCXSNG8XS2", "did:key:z6MkvqoYXQfDDJRv8L4wKzxYeuKyVZBfi9Qo6Ro8MiLH3kDQ"},
	{"0000000000000000000000000000000000000000000000000000000000000004", "J3qYF7YJMKCqQke47UQwiHizgFUXapHxRxKmxbkar89x", "did:key:z6MkwW6aqMnjgrhJXFUko3NnZPGzVpkNzhYK7yEhnsibmLwL"},
}

func TestDIDKeyVectors(t *testing.T) {
	for _, v := range didKeyVectors {
		seed, _ := hex.DecodeString(v.seed)
		pub := ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)
		want, _ := base58.Decode(v.pubBase58)
		if !bytes.Equal(pub, want) {
			t.Fatalf("seed %s: public key %x, vector says %x", v.seed, pub, want)
		}
		if got := DIDFromPublicKey(pub); got != v.did {
			t.Errorf("DIDFromPublicKey(seed %s) = %s, want %s", v.seed[60:], got, v.did)
		}
		back, err := PublicKeyFromDID(v.did)
		if err != nil || !bytes.Equal(back, pub) {
			t.Errorf("PublicKeyFromDID(%s) = %x, %v", v.did, back, err)
		}
		if back, err := PublicKeyFromDID(v.did + "#" + v.did[8:]); err != nil || !bytes.Equal(back, pub) {
			t.Errorf("DID URL with fragment: %x, %v", back, err)
		}
	}
}

func TestDIDKeyDesignVector(t *testing.T) {
	const did = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK"
	pub, err := PublicKeyFromDID(did)
	if err != nil {
		t.Fatal(err)
	}
	if got := DIDFromPublicKey(pub); got != did {
		t.Fatalf("round trip: %s", got)
	}
}

func TestPublicKeyFromDIDRejects(t *testing.T) {
	for _, s := range []string{
		"",
		"did:key:",
		"did:key:z",
		"did:web:example.com",
		"did:key:z6LShs9GGnqk85isEBzzshkuVWrVKsRp24GnDuHk8QWkARMW",  // X25519, multicodec 0xec
		"did:key:zQ3shokFTS3brHcDQrn82RUDfCZESWL1ZdCEJwekUDPQiYBme", // secp256k1
		"did:key:z6MkiTBz1ymuepAQ4HEHYSF1H8quG5GLVVQR3djdX3mDooW0",  // '0' is not base58
		"did:key:z6MkiTBz1ymuepAQ4HEHYSF1H8quG5GLVVQR3djdX3mDooWpp", // one character too many
		"did:key:m7QEBAQ", // multibase base64, not base58btc
	} {
		if _, err := PublicKeyFromDID(s); !errors.Is(err, ErrBadDID) {
			t.Errorf("PublicKeyFromDID(%q) error = %v, want ErrBadDID", s, err)
		}
	}
}

func FuzzPublicKeyFromDID(f *testing.F) {
	for _, v := range didKeyVectors {
		f.Add(v.did)
	}
	f.Add("did:key:z")
	f.Fuzz(func(t *testing.T, s string) {
		pub, err := PublicKeyFromDID(s)
		if err != nil {
			return
		}
		if len(pub) != ed25519.PublicKeySize {
			t.Fatalf("accepted %q with a %d-byte key", s, len(pub))
		}
		again, err := PublicKeyFromDID(DIDFromPublicKey(pub))
		if err != nil || !bytes.Equal(again, pub) {
			t.Fatalf("re-encoding %q does not round-trip", s)
		}
	})
}
