package interop

import (
	"crypto/ed25519"
	"errors"
	"fmt"

	"github.com/gagliardetto/solana-go"
)

// The Solana wire format of a transaction, read by hand: an x402 v2
// payment arrives as a partially signed transaction from a stranger, and
// the fee payer signs exactly the message bytes it checked. Every length
// is bounded by the input, nothing is allocated beyond it, and the whole
// input must be consumed.

// maxTxSize is the largest transaction the network takes (a packet).
const maxTxSize = 1232

// svmTx is a decoded wire transaction.
type svmTx struct {
	raw     []byte
	sigs    [][]byte // each 64 bytes, aliasing raw
	msg     []byte   // the message bytes, what every signature signs
	version int      // -1: legacy; 0: v0
	header  struct{ signers, readonlySigned, readonlyUnsigned int }
	keys    []solana.PublicKey
	hash    solana.Hash
	ixs     []svmIx
	lookups int // address table lookups of a v0 message
}

// svmIx is one compiled instruction: indexes into the account keys.
type svmIx struct {
	program  int
	accounts []int
	data     []byte
}

var errTxShape = errors.New("not a Solana wire transaction")

// txReader reads the wire format; any read past the end fails.
type txReader struct {
	b   []byte
	off int
	err error
}

func (r *txReader) fail(f string, a ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: "+f, append([]any{errTxShape}, a...)...)
	}
}

func (r *txReader) bytes(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b)-r.off {
		r.fail("%d bytes needed at offset %d, %d left", n, r.off, len(r.b)-r.off)
		return nil
	}
	out := r.b[r.off : r.off+n : r.off+n]
	r.off += n
	return out
}

func (r *txReader) u8() int {
	b := r.bytes(1)
	if b == nil {
		return 0
	}
	return int(b[0])
}

// compact reads a compact-u16 (short_vec length), refusing the overlong
// spellings the runtime refuses.
func (r *txReader) compact() int {
	v := 0
	for i := range 3 {
		b := r.bytes(1)
		if b == nil {
			return 0
		}
		v |= int(b[0]&0x7f) << (7 * i)
		if b[0]&0x80 == 0 {
			if i > 0 && b[0] == 0 || v > 0xffff {
				r.fail("non-canonical compact-u16 at offset %d", r.off)
				return 0
			}
			return v
		}
	}
	r.fail("compact-u16 longer than 3 bytes at offset %d", r.off)
	return 0
}

// count reads a compact-u16 count of items of at least size bytes each,
// refusing one the rest of the input cannot hold.
func (r *txReader) count(size int) int {
	n := r.compact()
	if r.err == nil && n*size > len(r.b)-r.off {
		r.fail("%d items of %d bytes do not fit in %d bytes", n, size, len(r.b)-r.off)
	}
	if r.err != nil {
		return 0
	}
	return n
}

// decodeTx reads a wire transaction (legacy or v0).
func decodeTx(raw []byte) (*svmTx, error) {
	if len(raw) > maxTxSize {
		return nil, fmt.Errorf("%w: %d bytes, more than the network's %d", errTxShape, len(raw), maxTxSize)
	}
	r := &txReader{b: raw}
	t := &svmTx{raw: raw, version: -1}
	for range r.count(ed25519.SignatureSize) {
		t.sigs = append(t.sigs, r.bytes(ed25519.SignatureSize))
	}
	msgStart := r.off
	if b := r.bytes(1); b != nil && b[0]&0x80 != 0 {
		if t.version = int(b[0] & 0x7f); t.version != 0 {
			r.fail("message version %d (only legacy and v0 exist)", t.version)
		}
	} else {
		r.off = msgStart // a legacy message starts with its header
	}
	t.header.signers, t.header.readonlySigned, t.header.readonlyUnsigned = r.u8(), r.u8(), r.u8()
	for range r.count(32) {
		t.keys = append(t.keys, solana.PublicKeyFromBytes(r.bytes(32)))
	}
	copy(t.hash[:], r.bytes(32))
	for range r.count(3) {
		ix := svmIx{program: r.u8()}
		for range r.count(1) {
			ix.accounts = append(ix.accounts, r.u8())
		}
		ix.data = r.bytes(r.count(1))
		t.ixs = append(t.ixs, ix)
	}
	if t.version == 0 {
		for range r.count(34) {
			r.bytes(32)
			r.bytes(r.count(1))
			r.bytes(r.count(1))
			t.lookups++
		}
	}
	if r.err == nil && r.off != len(raw) {
		r.fail("%d bytes after the message", len(raw)-r.off)
	}
	if r.err != nil {
		return nil, r.err
	}
	t.msg = raw[msgStart:]
	return t, t.check()
}

// check applies the rules every valid transaction obeys, so that the
// payment rules may index freely.
func (t *svmTx) check() error {
	h := t.header
	switch {
	case h.signers == 0 || len(t.sigs) != h.signers:
		return fmt.Errorf("%w: %d signatures for %d required signers", errTxShape, len(t.sigs), h.signers)
	case h.signers > len(t.keys) || h.readonlySigned >= h.signers || h.signers+h.readonlyUnsigned > len(t.keys):
		return fmt.Errorf("%w: header does not fit the %d account keys", errTxShape, len(t.keys))
	}
	for i, ix := range t.ixs {
		if ix.program >= len(t.keys) || ix.program == 0 {
			return fmt.Errorf("%w: instruction %d names program %d of %d static keys", errTxShape, i, ix.program, len(t.keys))
		}
		for _, a := range ix.accounts {
			if a >= len(t.keys) && t.lookups == 0 {
				return fmt.Errorf("%w: instruction %d names account %d of %d keys", errTxShape, i, a, len(t.keys))
			}
		}
	}
	return nil
}

// program is the program id instruction ix invokes.
func (t *svmTx) program(ix svmIx) solana.PublicKey { return t.keys[ix.program] }

// account is the i-th account of ix, and false when ix has fewer or it
// names an address loaded from a lookup table.
func (t *svmTx) account(ix svmIx, i int) (solana.PublicKey, bool) {
	if i >= len(ix.accounts) || ix.accounts[i] >= len(t.keys) {
		return solana.PublicKey{}, false
	}
	return t.keys[ix.accounts[i]], true
}

// signedBy reports whether the i-th signature is a valid signature of the
// message by the i-th key.
func (t *svmTx) signedBy(i int) bool {
	return i < len(t.sigs) && ed25519.Verify(t.keys[i][:], t.msg, t.sigs[i])
}

// withFeePayerSig is the wire transaction with the first signature made by
// w (the fee payer, account 0), and that signature: the transaction's id.
// Ed25519 is deterministic, so signing again gives the same id.
func (t *svmTx) withFeePayerSig(w *Wallet) ([]byte, solana.Signature) {
	out := append([]byte(nil), t.raw...)
	sig := ed25519.Sign(ed25519.PrivateKey(w.key), t.msg)
	copy(out[len(t.raw)-len(t.msg)-len(t.sigs)*ed25519.SignatureSize:], sig)
	return out, solana.SignatureFromBytes(sig)
}
