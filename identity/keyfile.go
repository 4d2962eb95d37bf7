package identity

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/agentmesh/mesh/internal/fsx"
)

const pemType = "PRIVATE KEY"

// GenerateKey returns a new Ed25519 private key.
func GenerateKey() ed25519.PrivateKey {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return priv
}

// MarshalKey encodes a private key as PKCS#8 PEM, readable by openssl.
func MarshalKey(key ed25519.PrivateKey) []byte {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		panic(err) // cannot fail for an Ed25519 key
	}
	return pem.EncodeToMemory(&pem.Block{Type: pemType, Bytes: der})
}

// ParseKey decodes a PKCS#8 PEM Ed25519 private key.
func ParseKey(data []byte) (ed25519.PrivateKey, error) {
	blk, _ := pem.Decode(data)
	if blk == nil || blk.Type != pemType {
		return nil, fmt.Errorf("%w: no %q PEM block", ErrBadKeyFile, pemType)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadKeyFile, err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%w: not an Ed25519 key", ErrBadKeyFile)
	}
	return priv, nil
}

// LoadKey reads a key file written by WriteKey.
func LoadKey(path string) (ed25519.PrivateKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	k, err := ParseKey(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// WriteKey writes key to path with mode 0600, refusing to replace an existing
// file. The file is written to a temporary name and renamed, so a crash never
// leaves a half-written key.
func WriteKey(path string, key ed25519.PrivateKey) error {
	return fsx.WriteSecret(path, MarshalKey(key), false)
}

// LoadOrCreateKey loads the key at path, creating it first if it does not exist.
func LoadOrCreateKey(path string) (ed25519.PrivateKey, error) {
	k, err := LoadKey(path)
	if errors.Is(err, fs.ErrNotExist) {
		if err := WriteKey(path, GenerateKey()); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, err
		}
		return LoadKey(path)
	}
	return k, err
}
