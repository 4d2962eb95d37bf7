package registryapi

import (
	"encoding/hex"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/store"
)

// Key layout of the registry in the store. Variable-length parts (agent
// ids, which never contain '/') come before fixed-width ones, so prefix
// scans are unambiguous.
//
//	a/<id>                                     Agent
//	k/<pubkey hex>                             agent id holding that key
//	r/<id>/<reg 8B>/<at ns 8B>/<seq 8B>        storedReport
//	d/<id>/<reg 8B>/<reporter hex>/<yyyymmdd>  reports counted that UTC day
//	t/<id>                                     tombstones of the id's DHT records
//	e/<activate by ns 8B>/<id>                 registration awaiting its first token (value: reg 8B)
//	m/agents                                   registered agents (8 bytes BE)
//
// The change log itself (l/, m/seq, m/origin) and the nonces of signed
// commands (n/, cmdlog.ClaimNonce) belong to internal/cmdlog.
func agentKey(id string) []byte      { return store.Key("a", id) }
func pubkeyKey(pubHex string) []byte { return store.Key("k", pubHex) }
func tombstoneKey(id string) []byte  { return store.Key("t", id) }
func activationKey(by int64, id string) []byte {
	return store.Key("e", store.U64(uint64(by)), id)
}
func reportPrefix(id string, reg uint64) []byte { return store.Key("r", id, store.U64(reg), "") }
func reportKey(id string, reg uint64, atNS int64, seq uint64) []byte {
	return store.Key("r", id, store.U64(reg), store.U64(uint64(atNS)), store.U64(seq))
}
func dayKey(id string, reg uint64, reporterHex, day string) []byte {
	return store.Key("d", id, store.U64(reg), reporterHex, day)
}

var agentCountKey = []byte("m/agents")

// pubHex turns a canonical base64 key into the hex used inside store keys
// (base64 may contain '/').
func pubHex(b64 string) string {
	pub, err := identity.DecodePublicKey(b64)
	if err != nil {
		return ""
	}
	return hex.EncodeToString(pub)
}
