package interop

import (
	"bytes"
	"encoding/binary"
	"math"

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
// wallet and which memos it carries. It does not judge amount or memo.
func inspect(res *rpc.GetTransactionResult, wallet solana.PublicKey) (Paid, error) {
	var p Paid
	if res == nil || res.Transaction == nil || res.Meta == nil {
		return p, ErrTxMalformed.With("the RPC returned a transaction without body or meta")
	}
	if res.Meta.Err != nil {
		return p, ErrTxFailed.With("transaction failed on chain: %v", res.Meta.Err)
	}
	tx, err := res.Transaction.GetTransaction()
	if err != nil || tx == nil || len(tx.Signatures) == 0 {
		return p, ErrTxMalformed.With("transaction could not be decoded")
	}
	p.Signature, p.Slot = tx.Signatures[0].String(), res.Slot
	if res.BlockTime != nil {
		p.BlockTime = int64(*res.BlockTime)
	}
	// The account list of a v0 message is its static keys, then the
	// addresses loaded from lookup tables: writable, then read-only.
	keys := append(solana.PublicKeySlice{}, tx.Message.AccountKeys...)
	la := res.Meta.LoadedAddresses
	if want := tx.Message.NumLookups(); want != len(la.Writable)+len(la.ReadOnly) {
		return p, ErrTxMalformed.With("transaction uses %d lookup-table addresses but the RPC loaded %d", want, len(la.Writable)+len(la.ReadOnly))
	}
	keys = append(append(keys, la.Writable...), la.ReadOnly...)

	var sum uint64
	visit := func(prog uint16, accounts []uint16, data []byte) {
		if int(prog) >= len(keys) {
			return
		}
		pid := keys[prog]
		for _, m := range memoPrograms {
			if pid.Equals(m) {
				p.Memos = append(p.Memos, bytes.Clone(data))
				return
			}
		}
		if !pid.Equals(solana.SystemProgramID) || len(data) < 12 {
			return
		}
		var from, to int
		switch binary.LittleEndian.Uint32(data) {
		case sysTransfer:
			from, to = 0, 1
		case sysTransferWithSeed:
			from, to = 0, 2
		default:
			return
		}
		if len(accounts) <= to || int(accounts[to]) >= len(keys) || int(accounts[from]) >= len(keys) {
			return
		}
		if !keys[accounts[to]].Equals(wallet) {
			return
		}
		n := binary.LittleEndian.Uint64(data[4:12])
		src := keys[accounts[from]].String()
		if p.From == "" {
			p.From = src
		}
		if src == p.From {
			p.FromLamports = addSat(p.FromLamports, n)
		}
		sum = addSat(sum, n)
	}
	for _, ix := range tx.Message.Instructions {
		visit(ix.ProgramIDIndex, ix.Accounts, ix.Data)
	}
	for _, inner := range res.Meta.InnerInstructions {
		for _, ix := range inner.Instructions {
			visit(ix.ProgramIDIndex, ix.Accounts, ix.Data)
		}
	}
	p.Lamports = sum
	for i, k := range keys {
		if k.Equals(wallet) && i < len(res.Meta.PreBalances) && i < len(res.Meta.PostBalances) {
			if post, pre := res.Meta.PostBalances[i], res.Meta.PreBalances[i]; post > pre && post-pre > p.Lamports {
				p.Lamports = post - pre
			}
			break
		}
	}
	return p, nil
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
