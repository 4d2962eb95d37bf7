package interop

import (
	"bytes"
	"encoding/binary"
	"math"
	"slices"

	"github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/rpc"
)

// Memo program ids: v2/v3 (what wallets use) and v1.
var memoPrograms = []solana.PublicKey{
	solana.MemoProgramID,
	solana.MustPublicKeyFromBase58("Memo1UhkJRfHyvLMcVucJwxXeuD728EqVDDwQDxFMNo"),
}

// System program instruction tags that move lamports to an account.
const (
	sysTransfer         = 2
	sysTransferWithSeed = 11
)

// Paid is what a verified transaction did for the provider.
type Paid struct {
	Signature string
	Slot      uint64
	BlockTime int64 // unix seconds, 0 when the RPC did not say
	// Lamports is what reached the wallet: the system transfers to it
	// (top-level and inner instructions), or its balance change when that
	// is larger (lamports moved by a program).
	Lamports uint64
	// From is the source of the first transfer to the wallet ("" when the
	// amount was seen only as a balance change).
	From string
	// FromLamports is what From alone transferred to the wallet.
	FromLamports uint64
	Memos        [][]byte
}

// inspect reads a fetched transaction: failed or not, what it paid to
// wallet and which memos it carries. It does not judge amount or memo
// (checkPayment does). Each rule is a function of its own: txOf,
// accountKeys, instructionsOf, memoOf, transferTo, balanceGain.
func inspect(res *rpc.GetTransactionResult, wallet solana.PublicKey) (Paid, error) {
	tx, err := txOf(res)
	if err != nil {
		return Paid{}, err
	}
	keys, err := accountKeys(tx, res.Meta)
	if err != nil {
		return Paid{}, err
	}
	p := Paid{Signature: tx.Signatures[0].String(), Slot: res.Slot}
	if res.BlockTime != nil {
		p.BlockTime = int64(*res.BlockTime)
	}
	for _, ix := range instructionsOf(tx, res.Meta) {
		if memo, ok := memoOf(keys, ix); ok {
			p.Memos = append(p.Memos, memo)
		} else if from, n, ok := transferTo(keys, ix, wallet); ok {
			p.credit(from, n)
		}
	}
	p.Lamports = max(p.Lamports, balanceGain(keys, res.Meta, wallet))
	return p, nil
}

// txOf is the transaction of res: one with a body and meta, that did
// not fail on chain, that decodes and is signed.
func txOf(res *rpc.GetTransactionResult) (*solana.Transaction, error) {
	if res == nil || res.Transaction == nil || res.Meta == nil {
		return nil, ErrTxMalformed.With("the RPC returned a transaction without body or meta")
	}
	if res.Meta.Err != nil {
		return nil, ErrTxFailed.With("transaction failed on chain: %v", res.Meta.Err)
	}
	tx, err := res.Transaction.GetTransaction()
	if err != nil || tx == nil || len(tx.Signatures) == 0 {
		return nil, ErrTxMalformed.With("transaction could not be decoded")
	}
	return tx, nil
}

// accountKeys is the account list instructions index into: for a v0
// message its static keys, then the addresses loaded from lookup tables,
// writable, then read-only; as many loaded as the message uses.
func accountKeys(tx *solana.Transaction, meta *rpc.TransactionMeta) (solana.PublicKeySlice, error) {
	la := meta.LoadedAddresses
	if want, got := tx.Message.NumLookups(), len(la.Writable)+len(la.ReadOnly); want != got {
		return nil, ErrTxMalformed.With("transaction uses %d lookup-table addresses but the RPC loaded %d", want, got)
	}
	keys := append(solana.PublicKeySlice{}, tx.Message.AccountKeys...)
	return append(append(keys, la.Writable...), la.ReadOnly...), nil
}

// instruction is one instruction of a transaction, top-level or inner:
// indexes into its account keys, and its data.
type instruction struct {
	program  uint16
	accounts []uint16
	data     []byte
}

// instructionsOf lists tx's top-level instructions, then the inner ones
// (those programs invoked), as meta records them.
func instructionsOf(tx *solana.Transaction, meta *rpc.TransactionMeta) []instruction {
	var out []instruction
	for _, ix := range tx.Message.Instructions {
		out = append(out, instruction{ix.ProgramIDIndex, ix.Accounts, ix.Data})
	}
	for _, inner := range meta.InnerInstructions {
		for _, ix := range inner.Instructions {
			out = append(out, instruction{ix.ProgramIDIndex, ix.Accounts, ix.Data})
		}
	}
	return out
}

// memoOf is ix's memo, when ix runs a memo program.
func memoOf(keys solana.PublicKeySlice, ix instruction) ([]byte, bool) {
	if int(ix.program) >= len(keys) {
		return nil, false
	}
	for _, m := range memoPrograms {
		if keys[ix.program].Equals(m) {
			return bytes.Clone(ix.data), true
		}
	}
	return nil, false
}

// transferTo reads ix as a system program transfer to wallet (Transfer or
// TransferWithSeed): its source and lamports. Any other instruction, or
// one whose account indexes are out of range, pays nothing.
func transferTo(keys solana.PublicKeySlice, ix instruction, wallet solana.PublicKey) (from solana.PublicKey, lamports uint64, ok bool) {
	if int(ix.program) >= len(keys) || !keys[ix.program].Equals(solana.SystemProgramID) || len(ix.data) < 12 {
		return solana.PublicKey{}, 0, false
	}
	var src, dst int
	switch binary.LittleEndian.Uint32(ix.data) {
	case sysTransfer:
		src, dst = 0, 1
	case sysTransferWithSeed:
		src, dst = 0, 2
	default:
		return solana.PublicKey{}, 0, false
	}
	if len(ix.accounts) <= dst || int(ix.accounts[dst]) >= len(keys) || int(ix.accounts[src]) >= len(keys) ||
		!keys[ix.accounts[dst]].Equals(wallet) {
		return solana.PublicKey{}, 0, false
	}
	return keys[ix.accounts[src]], binary.LittleEndian.Uint64(ix.data[4:12]), true
}

// credit counts a transfer of n lamports from src to the wallet: in all,
// and as From's when src is the first source seen.
func (p *Paid) credit(src solana.PublicKey, n uint64) {
	if p.From == "" {
		p.From = src.String()
	}
	if src.String() == p.From {
		p.FromLamports = addSat(p.FromLamports, n)
	}
	p.Lamports = addSat(p.Lamports, n)
}

// balanceGain is how much wallet's balance grew in the transaction (0
// when it did not, or is not among keys): lamports a program may have
// moved without a system transfer.
func balanceGain(keys solana.PublicKeySlice, meta *rpc.TransactionMeta, wallet solana.PublicKey) uint64 {
	i := slices.IndexFunc(keys, wallet.Equals)
	if i < 0 || i >= len(meta.PreBalances) || i >= len(meta.PostBalances) || meta.PostBalances[i] <= meta.PreBalances[i] {
		return 0
	}
	return meta.PostBalances[i] - meta.PreBalances[i]
}

// checkPayment applies the checks of spec 3.3 to an inspected transaction:
// it pays at least price to the wallet and carries exactly one memo, equal
// to nonce.
func checkPayment(p Paid, price uint64, nonce string) error {
	switch {
	case len(p.Memos) == 0:
		return ErrMemoMissing
	case len(p.Memos) > 1:
		return ErrMemoDuplicate.With("transaction carries %d memo instructions; exactly one, the nonce, is accepted", len(p.Memos))
	case string(p.Memos[0]) != nonce:
		return ErrMemoMismatch.With("transaction memo %.64q is not the issued nonce", p.Memos[0])
	case p.Lamports == 0:
		return ErrWrongDestination
	case p.Lamports < price:
		return ErrUnderpaid.With("transaction pays %d lamports to the provider wallet; the price is %d", p.Lamports, price)
	}
	return nil
}

func addSat(a, b uint64) uint64 {
	if a > math.MaxUint64-b {
		return math.MaxUint64
	}
	return a + b
}
