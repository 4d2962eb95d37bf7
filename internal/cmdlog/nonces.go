package cmdlog

import (
	"errors"
	"time"

	"github.com/agentmesh/mesh/store"
)

// Nonces: the nonce of a signed write (a Mesh-Sig) is single use on every
// node that applies the log, whichever node took it first and whichever
// machine applies it: the registry's signed commands, the quorum's admin
// requests. The table is state (snapshots carry it):
//
//	n/<public key, hex>/<nonce>   until when it is remembered (Unix ns, 8 bytes)
var noncePrefix = []byte("n/")

// ErrNonceUsed: the nonce was claimed before, within its memory.
var ErrNonceUsed = errors.New("cmdlog: nonce already used")

// ClaimNonce makes nonce, of the key pubHex, single use for memory from
// at, the entry's clock (never the local one: every node decides alike);
// the store forgets it an hour later.
func ClaimNonce(tx *store.Txn, pubHex, nonce string, at int64, memory time.Duration) error {
	key := store.Key("n", pubHex, nonce)
	until, err := GetU64(tx, key)
	if err != nil {
		return err
	}
	if int64(until) > at {
		return ErrNonceUsed
	}
	return tx.SetTTL(key, []byte(store.U64(uint64(at+int64(memory)))), memory+time.Hour)
}
