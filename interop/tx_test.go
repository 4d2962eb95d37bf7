package interop

import (
	"testing"

	"github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/programs/system"
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
