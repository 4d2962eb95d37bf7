package interop

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"

	"github.com/gagliardetto/solana-go"
)

// WalletEnv is the environment variable that may hold the caller's wallet
// key (the key itself, not a path).
const WalletEnv = "MESH_WALLET_KEY"

// Wallet is a Solana keypair that pays for calls. It is a deploy secret,
// separate from the identity key: its String, GoString and LogValue show
// only the public address, and it has no exported field, so printing,
// logging or JSON-encoding a Wallet never reveals the private key.
type Wallet struct {
	key solana.PrivateKey
}

// NewWallet generates a fresh wallet (tests, local validators).
func NewWallet() *Wallet {
	k, err := solana.NewRandomPrivateKey()
	if err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return &Wallet{key: k}
}

// ParseWallet reads key material in the Solana CLI keypair form (a JSON
// array of 64 bytes) or as a base58 string of the 64-byte keypair.
func ParseWallet(data []byte) (*Wallet, error) {
	data = bytes.TrimSpace(data)
	var raw []byte
	if len(data) > 0 && data[0] == '[' {
		var ints []int
		if err := json.Unmarshal(data, &ints); err != nil {
			return nil, fmt.Errorf("%w: not a JSON array of bytes", ErrBadWallet)
		}
		for _, n := range ints {
			if n < 0 || n > 255 {
				return nil, fmt.Errorf("%w: JSON array holds a value that is not a byte", ErrBadWallet)
			}
			raw = append(raw, byte(n))
		}
	} else {
		k, err := solana.PrivateKeyFromBase58(string(data))
		if err != nil {
			return nil, fmt.Errorf("%w: neither a JSON byte array nor base58", ErrBadWallet)
		}
		raw = k
	}
	if len(raw) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("%w: keypair must be %d bytes, got %d", ErrBadWallet, ed25519.PrivateKeySize, len(raw))
	}
	// The last 32 bytes must be the public key of the first 32 (the seed).
	derived := ed25519.NewKeyFromSeed(raw[:32])
	if !bytes.Equal(derived[32:], raw[32:]) {
		return nil, fmt.Errorf("%w: public half does not match the secret half", ErrBadWallet)
	}
	return &Wallet{key: solana.PrivateKey(derived)}, nil
}

// LoadWallet reads a wallet from a key file (mode should be 0600).
func LoadWallet(path string) (*Wallet, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	w, err := ParseWallet(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return w, nil
}

// WalletFromEnv reads the wallet from MESH_WALLET_KEY; nil, nil when unset.
func WalletFromEnv() (*Wallet, error) {
	v, ok := os.LookupEnv(WalletEnv)
	if !ok || v == "" {
		return nil, nil
	}
	w, err := ParseWallet([]byte(v))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", WalletEnv, err)
	}
	return w, nil
}

// MarshalKeyFile renders the wallet in the Solana CLI keypair form, for
// writing a key file. Handle the result as a secret.
func (w *Wallet) MarshalKeyFile() []byte {
	ints := make([]int, len(w.key))
	for i, b := range w.key {
		ints[i] = int(b)
	}
	b, _ := json.Marshal(ints)
	return b
}

// PublicKey is the wallet's address.
func (w *Wallet) PublicKey() solana.PublicKey { return w.key.PublicKey() }

// Address is the wallet's base58 address.
func (w *Wallet) Address() string { return w.key.PublicKey().String() }

// signer hands solana-go's Transaction.Sign the wallet's key for its address.
func (w *Wallet) signer(k solana.PublicKey) *solana.PrivateKey {
	if k.Equals(w.PublicKey()) {
		return &w.key
	}
	return nil
}

// String shows the address only.
func (w *Wallet) String() string { return "wallet(" + w.Address() + ")" }

// GoString shows the address only, also for %#v.
func (w *Wallet) GoString() string { return w.String() }

// LogValue shows the address only in structured logs.
func (w *Wallet) LogValue() slog.Value { return slog.StringValue(w.String()) }

// MarshalJSON shows the address only.
func (w *Wallet) MarshalJSON() ([]byte, error) { return json.Marshal(w.String()) }

var _ slog.LogValuer = (*Wallet)(nil)
