package registryapi

import (
	"crypto/sha256"
	"sync"
)

// verifiedValuesKept bounds how many verified values a RecordValidator
// remembers (twice this, at 32 bytes each, at most).
const verifiedValuesKept = 8192

// verifiedValues remembers, by SHA-256, byte strings whose signatures
// verified, after every other check of their own bytes (parse: version,
// subject, seq). The signatures cover the whole value, so the same bytes
// verify the same way again, and pass those checks again. It keeps two generations of at most max entries and
// drops the older one when the newer fills: bounded, and what is in use
// stays.
type verifiedValues struct {
	mu        sync.Mutex
	max       int
	cur, prev map[[sha256.Size]byte]struct{}
}

func newVerifiedValues(max int) *verifiedValues {
	return &verifiedValues{max: max, cur: map[[sha256.Size]byte]struct{}{}}
}

func (v *verifiedValues) has(b []byte) bool {
	if v == nil {
		return false
	}
	h := sha256.Sum256(b)
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, ok := v.cur[h]; ok {
		return true
	}
	if _, ok := v.prev[h]; ok {
		v.addLocked(h) // in use: keep it in the current generation
		return true
	}
	return false
}

func (v *verifiedValues) add(b []byte) {
	if v == nil {
		return
	}
	h := sha256.Sum256(b)
	v.mu.Lock()
	v.addLocked(h)
	v.mu.Unlock()
}

func (v *verifiedValues) addLocked(h [sha256.Size]byte) {
	if len(v.cur) >= v.max {
		v.prev, v.cur = v.cur, map[[sha256.Size]byte]struct{}{}
	}
	v.cur[h] = struct{}{}
}
