package interop

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/rpc"
)

// The rules of inspect, one by one (verify.go). End to end, through a
// chain and the paywall, they are tested in x402_test.go and verify_test.go.

// sysData is a system program instruction's data: tag, then lamports.
func sysData(tag uint32, lamports uint64) []byte {
	b := binary.LittleEndian.AppendUint32(nil, tag)
	return binary.LittleEndian.AppendUint64(b, lamports)
}

func TestTxOf(t *testing.T) {
	t.Parallel()
	payer := NewWallet()
	signed := buildTx(t, payer, NewWallet().PublicKey(), 1, nil)
	raw := func(b []byte) *rpc.TransactionResultEnvelope {
		var e rpc.TransactionResultEnvelope
		if err := e.UnmarshalJSON([]byte(`["` + base64.StdEncoding.EncodeToString(b) + `","base64"]`)); err != nil {
			t.Fatal(err)
		}
		return &e
	}
	env := func(tx *solana.Transaction) *rpc.TransactionResultEnvelope {
		b, err := tx.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		return raw(b)
	}
	for _, c := range []struct {
		name string
		res  *rpc.GetTransactionResult
		want error
	}{
		{"no result", nil, ErrTxMalformed},
		{"no body", &rpc.GetTransactionResult{Meta: &rpc.TransactionMeta{}}, ErrTxMalformed},
		{"no meta", &rpc.GetTransactionResult{Transaction: env(signed)}, ErrTxMalformed},
		{"failed", &rpc.GetTransactionResult{Transaction: env(signed), Meta: &rpc.TransactionMeta{Err: map[string]any{"InstructionError": 1}}}, ErrTxFailed},
		{"undecodable", &rpc.GetTransactionResult{Transaction: raw([]byte{1, 2, 3}), Meta: &rpc.TransactionMeta{}}, ErrTxMalformed},
		{"good", &rpc.GetTransactionResult{Transaction: env(signed), Meta: &rpc.TransactionMeta{}}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			tx, err := txOf(c.res)
			if !errors.Is(err, c.want) || (err == nil) != (tx != nil) {
				t.Fatalf("txOf: %v, %v; want %v", tx, err, c.want)
			}
		})
	}
}

func TestAccountKeys(t *testing.T) {
	t.Parallel()
	payer, table := NewWallet(), NewWallet().PublicKey()
	to, ro := NewWallet().PublicKey(), NewWallet().PublicKey()
	v0 := buildTx(t, payer, to, 1, map[solana.PublicKey]solana.PublicKeySlice{table: {to}})
	legacy := buildTx(t, payer, to, 1, nil)
	loaded := func(w solana.PublicKeySlice, r ...solana.PublicKey) *rpc.TransactionMeta {
		return &rpc.TransactionMeta{LoadedAddresses: rpc.LoadedAddresses{Writable: w, ReadOnly: r}}
	}
	for _, c := range []struct {
		name string
		tx   *solana.Transaction
		meta *rpc.TransactionMeta
		tail solana.PublicKeySlice // the keys after the static ones; nil: an error
	}{
		{"legacy", legacy, loaded(nil), solana.PublicKeySlice{}},
		{"legacy, addresses loaded anyway", legacy, loaded(solana.PublicKeySlice{ro}), nil},
		{"v0, loaded", v0, loaded(solana.PublicKeySlice{to}), solana.PublicKeySlice{to}},
		{"v0, loaded read-only", v0, loaded(nil, to), solana.PublicKeySlice{to}},
		{"v0, none loaded", v0, loaded(nil), nil},
		{"v0, too many loaded", v0, loaded(solana.PublicKeySlice{to, ro}), nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			keys, err := accountKeys(c.tx, c.meta)
			static := len(c.tx.Message.AccountKeys)
			switch {
			case c.tail == nil:
				if !errors.Is(err, ErrTxMalformed) {
					t.Fatalf("keys %v, err %v; want payment_tx_malformed", keys, err)
				}
			case err != nil || len(keys) != static+len(c.tail) || !keys[static:].Equals(c.tail) && len(c.tail) > 0:
				t.Fatalf("keys %v, err %v; want the static keys then %v", keys, err, c.tail)
			}
		})
	}
}

func TestMemoOf(t *testing.T) {
	t.Parallel()
	keys := solana.PublicKeySlice{solana.SystemProgramID, memoPrograms[0], memoPrograms[1]}
	for _, c := range []struct {
		name string
		ix   instruction
		memo string
		ok   bool
	}{
		{"memo v2", instruction{program: 1, data: []byte("x4_nonce")}, "x4_nonce", true},
		{"memo v1", instruction{program: 2, data: []byte("n")}, "n", true},
		{"empty memo", instruction{program: 1}, "", true},
		{"system program", instruction{program: 0, data: []byte("x4_nonce")}, "", false},
		{"program out of range", instruction{program: 3, data: []byte("x")}, "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			memo, ok := memoOf(keys, c.ix)
			if ok != c.ok || string(memo) != c.memo {
				t.Fatalf("memoOf = %q, %v; want %q, %v", memo, ok, c.memo, c.ok)
			}
		})
	}
}

func TestTransferTo(t *testing.T) {
	t.Parallel()
	payer, wallet, other := NewWallet().PublicKey(), NewWallet().PublicKey(), NewWallet().PublicKey()
	// 0 system, 1 payer, 2 wallet, 3 other, 4 memo
	keys := solana.PublicKeySlice{solana.SystemProgramID, payer, wallet, other, memoPrograms[0]}
	for _, c := range []struct {
		name     string
		ix       instruction
		lamports uint64 // 0: pays nothing
	}{
		{"transfer", instruction{0, []uint16{1, 2}, sysData(sysTransfer, 5000)}, 5000},
		{"transfer with seed", instruction{0, []uint16{1, 3, 2}, append(sysData(sysTransferWithSeed, 7), "seed"...)}, 7},
		{"transfer to another", instruction{0, []uint16{1, 3}, sysData(sysTransfer, 5000)}, 0},
		{"transfer with seed to its base", instruction{0, []uint16{1, 2, 3}, sysData(sysTransferWithSeed, 7)}, 0},
		{"other system instruction", instruction{0, []uint16{1, 2}, sysData(0, 5000)}, 0},
		{"short data", instruction{0, []uint16{1, 2}, sysData(sysTransfer, 5000)[:11]}, 0},
		{"not the system program", instruction{4, []uint16{1, 2}, sysData(sysTransfer, 5000)}, 0},
		{"program out of range", instruction{9, []uint16{1, 2}, sysData(sysTransfer, 5000)}, 0},
		{"too few accounts", instruction{0, []uint16{1}, sysData(sysTransfer, 5000)}, 0},
		{"source out of range", instruction{0, []uint16{9, 2}, sysData(sysTransfer, 5000)}, 0},
		{"destination out of range", instruction{0, []uint16{1, 9}, sysData(sysTransfer, 5000)}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			from, n, ok := transferTo(keys, c.ix, wallet)
			if ok != (c.lamports > 0) || n != c.lamports || ok && !from.Equals(payer) {
				t.Fatalf("transferTo = %s, %d, %v; want %d from the payer", from, n, ok, c.lamports)
			}
		})
	}
}

func TestCreditAndBalanceGain(t *testing.T) {
	t.Parallel()
	a, b, wallet := NewWallet().PublicKey(), NewWallet().PublicKey(), NewWallet().PublicKey()
	var p Paid
	p.credit(a, 10)
	p.credit(b, 5)
	p.credit(a, 1<<63)
	p.credit(a, 1<<63)
	if p.From != a.String() || p.FromLamports != 1<<64-1 || p.Lamports != 1<<64-1 {
		t.Fatalf("credits: %+v; want From a, both sums saturated", p)
	}
	keys := solana.PublicKeySlice{a, wallet}
	for _, c := range []struct {
		name     string
		keys     solana.PublicKeySlice
		pre, pos []uint64
		want     uint64
	}{
		{"grew", keys, []uint64{9, 100}, []uint64{1, 150}, 50},
		{"shrank", keys, []uint64{9, 100}, []uint64{1, 90}, 0},
		{"not among the keys", keys[:1], []uint64{9}, []uint64{1}, 0},
		{"balances missing", keys, []uint64{9}, []uint64{1}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := balanceGain(c.keys, &rpc.TransactionMeta{PreBalances: c.pre, PostBalances: c.pos}, wallet); got != c.want {
				t.Fatalf("balanceGain = %d, want %d", got, c.want)
			}
		})
	}
}

// FuzzInstructionRules: whatever an instruction holds, reading it never
// panics, it is a memo or a transfer but not both, and a transfer is one
// the system program makes to the wallet, of the lamports its data says.
func FuzzInstructionRules(f *testing.F) {
	f.Add(uint16(0), []byte{1, 2}, sysData(sysTransfer, 5000))
	f.Add(uint16(0), []byte{1, 3, 2}, sysData(sysTransferWithSeed, 7))
	f.Add(uint16(4), []byte{}, []byte("x4_nonce"))
	f.Add(uint16(7), []byte{200}, []byte{})
	wallet := NewWallet().PublicKey()
	keys := solana.PublicKeySlice{solana.SystemProgramID, NewWallet().PublicKey(), wallet, NewWallet().PublicKey(), memoPrograms[0]}
	f.Fuzz(func(t *testing.T, program uint16, accounts, data []byte) {
		ix := instruction{program: program, data: data}
		for _, a := range accounts {
			ix.accounts = append(ix.accounts, uint16(a%8))
		}
		_, memo := memoOf(keys, ix)
		_, n, transfer := transferTo(keys, ix, wallet)
		switch {
		case memo && transfer:
			t.Fatal("an instruction read as a memo and a transfer")
		case transfer && (program != 0 || binary.LittleEndian.Uint64(data[4:12]) != n):
			t.Fatalf("transfer of %d read from program %d, data %x", n, program, data)
		case transfer && !keys[ix.accounts[map[uint32]int{sysTransfer: 1, sysTransferWithSeed: 2}[binary.LittleEndian.Uint32(data)]]].Equals(wallet):
			t.Fatal("a transfer to another account counted")
		}
	})
}
