package interop

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/gagliardetto/solana-go"

	"github.com/agentmesh/mesh/internal/httpx"
)

// Prices of the harness's echo in tokens: 0.01 USDC and 20,000 lamports
// of wrapped SOL.
const (
	testUSDC = 10_000
	testWSOL = 20_000
)

// exactSpec describes a payment transaction the way @x402/svm 2.27's
// client builds it: a v0 message of compute unit limit, compute unit
// price, TransferChecked from the payer's associated token account to
// payTo's, and a memo without accounts; the payer signs, the fee payer's
// signature is left empty. Tests bend one part at a time.
type exactSpec struct {
	feePayer  solana.PublicKey
	payer     *Wallet
	mint      solana.PublicKey
	payTo     solana.PublicKey
	program   solana.PublicKey
	amount    uint64
	decimals  uint8
	units     uint32
	price     uint64
	memo      string
	blockhash solana.Hash
	legacy    bool
	// edit changes the instructions before the message is compiled.
	edit func([]solana.Instruction) []solana.Instruction
}

func limitIx(units uint32) solana.Instruction {
	data := binary.LittleEndian.AppendUint32([]byte{cbSetComputeUnitLimit}, units)
	return solana.NewInstruction(solana.ComputeBudget, solana.AccountMetaSlice{}, data)
}

func priceIx(microLamports uint64) solana.Instruction {
	data := binary.LittleEndian.AppendUint64([]byte{cbSetComputeUnitPrice}, microLamports)
	return solana.NewInstruction(solana.ComputeBudget, solana.AccountMetaSlice{}, data)
}

func transferCheckedIx(prog, src, mint, dst, authority solana.PublicKey, amount uint64, decimals uint8) solana.Instruction {
	data := append(binary.LittleEndian.AppendUint64([]byte{tokenTransferChecked}, amount), decimals)
	return solana.NewInstruction(prog, solana.AccountMetaSlice{
		solana.Meta(src).WRITE(), solana.Meta(mint), solana.Meta(dst).WRITE(), solana.Meta(authority).SIGNER(),
	}, data)
}

func memoIx(text string) solana.Instruction {
	return solana.NewInstruction(solana.MemoProgramID, solana.AccountMetaSlice{}, []byte(text))
}

func mustATA(t testing.TB, owner, mint, prog solana.PublicKey) solana.PublicKey {
	t.Helper()
	k, err := associatedTokenAccount(owner, mint, prog)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func (s exactSpec) instructions(t testing.TB) []solana.Instruction {
	src, dst := mustATA(t, s.payer.PublicKey(), s.mint, s.program), mustATA(t, s.payTo, s.mint, s.program)
	ixs := []solana.Instruction{limitIx(s.units), priceIx(s.price),
		transferCheckedIx(s.program, src, s.mint, dst, s.payer.PublicKey(), s.amount, s.decimals), memoIx(s.memo)}
	if s.edit != nil {
		ixs = s.edit(ixs)
	}
	return ixs
}

// raw is the partially signed wire transaction.
func (s exactSpec) raw(t testing.TB) []byte {
	t.Helper()
	tx, err := solana.NewTransaction(s.instructions(t), s.blockhash, solana.TransactionPayer(s.feePayer))
	if err != nil {
		t.Fatal(err)
	}
	if !s.legacy {
		tx.Message.SetVersion(solana.MessageVersionV0)
	}
	if _, err := tx.PartialSign(s.payer.signer); err != nil {
		t.Fatal(err)
	}
	raw, err := tx.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// payload is the x402 payment payload of version v that carries the
// transaction, as @x402/core's client sends it.
func (s exactSpec) payload(t testing.TB, v int, network string) PaymentPayload {
	p := PaymentPayload{X402Version: v}
	if v == X402Version2 {
		p.Accepted = &PaymentRequirements{Scheme: schemeExact, Network: network, Asset: s.mint.String(), PayTo: s.payTo.String(),
			Extra: RequirementsExtra{FeePayer: s.feePayer.String(), Memo: s.memo}}
	} else {
		p.Scheme, p.Network = schemeExact, "solana-devnet"
	}
	p.Payload.Transaction = base64.StdEncoding.EncodeToString(s.raw(t))
	return p
}

// testSpec is a valid payment of 0.01 USDC to payTo through feePayer.
func testSpec(feePayer, payTo solana.PublicKey, memo string, hash solana.Hash) exactSpec {
	return exactSpec{feePayer: feePayer, payer: NewWallet(), mint: solana.MustPublicKeyFromBase58(MintUSDCDevnet), payTo: payTo,
		program: solana.TokenProgramID, amount: testUSDC, decimals: 6, units: 20_000, price: 1, memo: memo, blockhash: hash}
}

func testTerms(feePayer, payTo solana.PublicKey) exactTerms {
	return exactTerms{rows: Prices{Token(testUSDC, CurrencyUSDC, "", NetworkDevnet), Token(testWSOL, CurrencyWSOL, "", NetworkDevnet)},
		payTo: payTo, feePayer: feePayer, maxUnits: DefaultMaxComputeUnits, maxPrice: DefaultMaxComputeUnitPrice}
}

// TestDecodeTx reads what solana-go writes, legacy and v0, the same way
// solana-go reads it back.
func TestDecodeTx(t *testing.T) {
	t.Parallel()
	feePayer, payTo := NewWallet(), NewWallet()
	for _, legacy := range []bool{false, true} {
		s := testSpec(feePayer.PublicKey(), payTo.PublicKey(), "x4_memo", solana.Hash{7})
		s.legacy = legacy
		raw := s.raw(t)
		got, err := decodeTx(raw)
		if err != nil {
			t.Fatalf("legacy %v: %v", legacy, err)
		}
		want, err := solana.TransactionFromBytes(raw)
		if err != nil {
			t.Fatal(err)
		}
		msg, _ := want.Message.MarshalBinary()
		if string(got.msg) != string(msg) || got.hash != want.Message.RecentBlockhash || len(got.keys) != len(want.Message.AccountKeys) ||
			len(got.ixs) != len(want.Message.Instructions) || (got.version == 0) == legacy {
			t.Fatalf("legacy %v: decoded %+v", legacy, got)
		}
		for i, k := range want.Message.AccountKeys {
			if !got.keys[i].Equals(k) {
				t.Fatalf("key %d: %s, want %s", i, got.keys[i], k)
			}
		}
		for i, ix := range want.Message.Instructions {
			g := got.ixs[i]
			if g.program != int(ix.ProgramIDIndex) || string(g.data) != string(ix.Data) || len(g.accounts) != len(ix.Accounts) {
				t.Fatalf("instruction %d: %+v, want %+v", i, g, ix)
			}
		}
		if !got.signedBy(1) || got.signedBy(0) {
			t.Fatal("the payer's signature must verify, the empty fee payer's must not")
		}
		signed, sig := got.withFeePayerSig(feePayer)
		again, err := decodeTx(signed)
		if err != nil || !again.signedBy(0) || !again.signedBy(1) || solana.SignatureFromBytes(again.sigs[0]) != sig {
			t.Fatalf("co-signed: %v", err)
		}
	}
	for _, bad := range [][]byte{nil, {0}, {1}, {0x80, 0x80, 0x80, 0x80}, {0x80, 0x00}, make([]byte, maxTxSize+1)} {
		if _, err := decodeTx(bad); !errors.Is(err, errTxShape) {
			t.Errorf("decodeTx(%x): %v", bad, err)
		}
	}
}

// FuzzDecodeTx: any bytes decode or are refused, never panic; what
// decodes satisfies the invariants the rules rely on and co-signs in
// place.
func FuzzDecodeTx(f *testing.F) {
	feePayer, payTo := NewWallet(), NewWallet()
	for _, legacy := range []bool{false, true} {
		s := testSpec(feePayer.PublicKey(), payTo.PublicKey(), "x4_seed", solana.Hash{1})
		s.legacy = legacy
		f.Add(s.raw(f))
	}
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, raw []byte) {
		tx, err := decodeTx(raw)
		if err != nil {
			return
		}
		if len(tx.sigs) != tx.header.signers || tx.header.signers > len(tx.keys) || len(tx.msg) == 0 {
			t.Fatalf("decoded inconsistently: %+v", tx)
		}
		for _, ix := range tx.ixs {
			_ = tx.program(ix)
		}
		terms := testTerms(feePayer.PublicKey(), payTo.PublicKey())
		if tx.header.signers >= 2 && len(tx.ixs) >= 3 {
			checkExact(tx, terms) // must not panic
		}
		signed, _ := tx.withFeePayerSig(feePayer)
		if len(signed) != len(raw) {
			t.Fatalf("co-signing changed the length: %d -> %d", len(raw), len(signed))
		}
	})
}

// TestExactRules: a transaction as @x402/svm builds it passes; bent one
// way at a time, it is refused by the rule that guards that way, with
// its code.
func TestExactRules(t *testing.T) {
	t.Parallel()
	feePayer, payTo, stranger := NewWallet(), NewWallet(), NewWallet()
	wsol := solana.MustPublicKeyFromBase58(MintWSOL)
	unknownMint := NewWallet().PublicKey()
	cases := []struct {
		name string
		bend func(*exactSpec)
		code string // "" passes
	}{
		{"as @x402/svm builds it", func(*exactSpec) {}, ""},
		{"legacy message", func(s *exactSpec) { s.legacy = true }, ""},
		{"wrapped SOL at its price", func(s *exactSpec) { s.mint, s.amount, s.decimals = wsol, testWSOL, 9 }, ""},
		{"Token-2022", func(s *exactSpec) { s.program = solana.Token2022ProgramID }, ""},
		{"Lighthouse after the memo", func(s *exactSpec) {
			s.edit = func(ixs []solana.Instruction) []solana.Instruction {
				return append(ixs, solana.NewInstruction(lighthouseProgram, solana.AccountMetaSlice{}, []byte{1}))
			}
		}, ""},
		{"foreign fee payer", func(s *exactSpec) { s.feePayer = stranger.PublicKey() }, "payment_fee_payer_mismatch"},
		{"a third signer", func(s *exactSpec) {
			s.edit = func(ixs []solana.Instruction) []solana.Instruction {
				return append(ixs, solana.NewInstruction(solana.MemoProgramID, solana.AccountMetaSlice{solana.Meta(stranger.PublicKey()).SIGNER()}, nil))
			}
		}, "payment_signers_invalid"},
		{"two instructions", func(s *exactSpec) {
			s.edit = func(ixs []solana.Instruction) []solana.Instruction { return ixs[2:] }
		}, "payment_tx_layout"},
		{"no compute limit", func(s *exactSpec) {
			s.edit = func(ixs []solana.Instruction) []solana.Instruction { return append(ixs[1:], memoIx("x")) }
		}, "payment_compute_budget"},
		{"compute limit over the bound", func(s *exactSpec) { s.units = DefaultMaxComputeUnits + 1 }, "payment_compute_budget"},
		{"compute price over the bound", func(s *exactSpec) { s.price = DefaultMaxComputeUnitPrice + 1 }, "payment_compute_budget"},
		{"plain Transfer instead of TransferChecked", func(s *exactSpec) {
			s.edit = func(ixs []solana.Instruction) []solana.Instruction {
				d, _ := ixs[2].Data()
				ixs[2] = solana.NewInstruction(solana.TokenProgramID, ixs[2].Accounts(), append([]byte{3}, d[1:9]...))
				return ixs
			}
		}, "payment_no_transfer"},
		{"transfer by the system program", func(s *exactSpec) {
			s.edit = func(ixs []solana.Instruction) []solana.Instruction {
				d, _ := ixs[2].Data()
				ixs[2] = solana.NewInstruction(solana.SystemProgramID, ixs[2].Accounts(), d)
				return ixs
			}
		}, "payment_no_transfer"},
		{"wrong mint", func(s *exactSpec) { s.mint = unknownMint }, "payment_wrong_asset"},
		{"to another wallet", func(s *exactSpec) { s.payTo = stranger.PublicKey() }, "payment_wrong_destination"},
		{"underpaid", func(s *exactSpec) { s.amount = testUSDC - 1 }, "payment_amount_mismatch"},
		{"overpaid", func(s *exactSpec) { s.amount = testUSDC + 1 }, "payment_amount_mismatch"},
		{"USDC's price in wrapped SOL", func(s *exactSpec) { s.mint, s.amount = wsol, testUSDC }, "payment_amount_mismatch"},
		{"extra instruction", func(s *exactSpec) {
			s.edit = func(ixs []solana.Instruction) []solana.Instruction {
				return append(ixs, solana.NewInstruction(solana.SystemProgramID, solana.AccountMetaSlice{}, []byte{0}))
			}
		}, "payment_extra_instruction"},
		{"no memo", func(s *exactSpec) {
			s.edit = func(ixs []solana.Instruction) []solana.Instruction { return ixs[:3] }
		}, "payment_memo_missing"},
		{"two memos", func(s *exactSpec) {
			s.edit = func(ixs []solana.Instruction) []solana.Instruction { return append(ixs, memoIx("x4_other")) }
		}, "payment_memo_duplicate"},
		{"memo that is no nonce", func(s *exactSpec) { s.memo = "hello world" }, "payment_memo_mismatch"},
		{"fee payer named by an instruction", func(s *exactSpec) {
			s.edit = func(ixs []solana.Instruction) []solana.Instruction {
				return append(ixs[:3], solana.NewInstruction(solana.MemoProgramID, solana.AccountMetaSlice{solana.Meta(s.feePayer).SIGNER()}, []byte(s.memo)))
			}
		}, "payment_fee_payer_in_use"},
		{"fee payer as the token authority", func(s *exactSpec) {
			s.edit = func(ixs []solana.Instruction) []solana.Instruction {
				src := mustATA(t, s.feePayer, s.mint, s.program)
				ixs[2] = transferCheckedIx(s.program, src, s.mint, mustATA(t, s.payTo, s.mint, s.program), s.feePayer, s.amount, 6)
				return ixs
			}
		}, "payment_signers_invalid"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := testSpec(feePayer.PublicKey(), payTo.PublicKey(), "x4_memo", solana.Hash{9})
			c.bend(&s)
			tx, err := decodeTx(s.raw(t))
			if err != nil {
				t.Fatal(err)
			}
			pay, err := checkExact(tx, testTerms(feePayer.PublicKey(), payTo.PublicKey()))
			var he *httpx.Error
			switch {
			case c.code == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.code == "" && (pay.memo != s.memo || !pay.authority.Equals(s.payer.PublicKey()) || pay.row.Asset != s.mint.String()):
				t.Fatalf("learned %+v", pay)
			case c.code != "" && (!errors.As(err, &he) || he.Code != c.code || he.Status != 402):
				t.Fatalf("got %v, want %s", err, c.code)
			}
		})
	}
}

// TestRefusedBy: of a facilitator's refusal, a client sees x402's reason
// code and nothing else the facilitator said.
func TestRefusedBy(t *testing.T) {
	t.Parallel()
	for reason, want := range map[string]string{
		"invalid_exact_svm_transaction_simulation_failed": "the x402 facilitator refused the payment: invalid_exact_svm_transaction_simulation_failed",
		"RPC https://rpc.example/?api-key=secret said no": "the x402 facilitator refused the payment",
		"": "the x402 facilitator refused the payment",
		"invalid_exact_svm_payload_blockhash_not_found": ErrBlockhashExpired.Detail,
	} {
		var he *httpx.Error
		if err := refusedBy(reason); !errors.As(err, &he) || he.Detail != want {
			t.Errorf("%q: %v", reason, err)
		}
	}
}
