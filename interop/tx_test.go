package interop

import (
	"encoding/binary"
	"testing"

	"github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/programs/system"
	"github.com/gagliardetto/solana-go/rpc"
)

// buildTx builds and signs a transaction: a transfer of lamports from payer
// to `to` (when lamports > 0) and one memo instruction per memo. With
// tables, the message is v0 and accounts found in the tables are loaded
// through them.
func buildTx(t testing.TB, payer *Wallet, to solana.PublicKey, lamports uint64, tables map[solana.PublicKey]solana.PublicKeySlice, memos ...string) *solana.Transaction {
	t.Helper()
	var ixs []solana.Instruction
	if lamports > 0 {
		ixs = append(ixs, system.NewTransferInstruction(lamports, payer.PublicKey(), to).Build())
	}
	for _, m := range memos {
		ixs = append(ixs, MemoInstruction(m, payer.PublicKey()))
	}
	opts := []solana.TransactionOption{solana.TransactionPayer(payer.PublicKey())}
	if tables != nil {
		opts = append(opts, solana.TransactionAddressTables(tables))
	}
	tx, err := solana.NewTransaction(ixs, solana.Hash{1, 2, 3}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	signWith(t, tx, payer)
	return tx
}

func signWith(t testing.TB, tx *solana.Transaction, w *Wallet) {
	t.Helper()
	if _, err := tx.Sign(w.signer); err != nil {
		t.Fatal(err)
	}
}

// newTx builds a legacy transaction paid by payer from ixs and signs it
// with payer and every other signer.
func newTx(t testing.TB, payer *Wallet, ixs []solana.Instruction, signers ...*Wallet) *solana.Transaction {
	t.Helper()
	tx, err := solana.NewTransaction(ixs, solana.Hash{4, 5, 6}, solana.TransactionPayer(payer.PublicKey()))
	if err != nil {
		t.Fatal(err)
	}
	all := append([]*Wallet{payer}, signers...)
	_, err = tx.Sign(func(k solana.PublicKey) *solana.PrivateKey {
		for _, w := range all {
			if pk := w.signer(k); pk != nil {
				return pk
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return tx
}

func transfer(from, to solana.PublicKey, lamports uint64) solana.Instruction {
	return system.NewTransferInstruction(lamports, from, to).Build()
}

// cpi is an instruction of a made-up program that moves lamports from
// payer to wallet through an inner system transfer (a CPI); innerTransfer
// is that inner instruction, for soltest.Land.
func cpi(payer, wallet solana.PublicKey) solana.Instruction {
	return solana.NewInstruction(solana.PublicKey{9, 9, 9},
		solana.AccountMetaSlice{solana.Meta(payer).WRITE().SIGNER(), solana.Meta(wallet).WRITE(), solana.Meta(solana.SystemProgramID)},
		[]byte{1})
}

// innerTransfer is the inner system transfer of the top-level instruction
// at index ix of tx, from payer to wallet.
func innerTransfer(t testing.TB, tx *solana.Transaction, ix uint16, payer, wallet solana.PublicKey, lamports uint64) []rpc.InnerInstruction {
	t.Helper()
	idx := func(k solana.PublicKey) uint16 {
		for i, a := range tx.Message.AccountKeys {
			if a.Equals(k) {
				return uint16(i)
			}
		}
		t.Fatalf("%s is not in the transaction", k)
		return 0
	}
	data := make([]byte, 12)
	binary.LittleEndian.PutUint32(data, 2)
	binary.LittleEndian.PutUint64(data[4:], lamports)
	return []rpc.InnerInstruction{{Index: ix, Instructions: []rpc.CompiledInstruction{{
		ProgramIDIndex: idx(solana.SystemProgramID), Accounts: []uint16{idx(payer), idx(wallet)}, Data: data,
	}}}}
}
