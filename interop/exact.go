package interop

import (
	"encoding/binary"
	"slices"

	"github.com/gagliardetto/solana-go"
)

// The checks of x402's "exact" scheme on Solana, as its specification
// (scheme_exact_svm.md, path 1: static layout) and @x402/svm's facilitator
// make them, before the fee payer signs: each is a small named rule, run
// in order; the first that fails names the refusal.

// lighthouseProgram is the program of the wallet-protection assertions
// that Phantom and Solflare add to a transaction; the scheme admits them
// after the transfer.
var lighthouseProgram = solana.MustPublicKeyFromBase58("L2TExMFKdjpN9kozasaurPirfHy9P8sbXoAN1qA3S95")

// Instruction tags read by the rules.
const (
	cbSetComputeUnitLimit = 2 // ComputeBudget: u8 tag, u32 units
	cbSetComputeUnitPrice = 3 // ComputeBudget: u8 tag, u64 micro-lamports per unit
	tokenTransferChecked  = 12
	maxExactInstructions  = 7
)

// Default bounds of a payment transaction's compute budget (the
// specification's reference defaults): what the fee payer may spend on
// one payment beyond the base fee is at most their product.
const (
	DefaultMaxComputeUnits     = 400_000
	DefaultMaxComputeUnitPrice = 50_000 // micro-lamports per compute unit
)

// exactTerms are what a payment transaction is checked against.
type exactTerms struct {
	rows     Prices // the skill's token rows on the payment network, mints filled in
	payTo    solana.PublicKey
	feePayer solana.PublicKey
	maxUnits uint64
	maxPrice uint64
}

// exactPay is what the rules learned of a transaction that passed them.
type exactPay struct {
	row       Price
	authority solana.PublicKey
	memo      string
}

type exactRule struct {
	name  string
	check func(t *svmTx, terms exactTerms, out *exactPay) error
}

// exactRules run in this order: who signs, then the layout, then what the
// transfer does, then what may follow it.
var exactRules = []exactRule{
	{"fee payer", ruleFeePayer},
	{"signers", ruleSigners},
	{"layout", ruleLayout},
	{"compute budget", ruleComputeBudget},
	{"transfer", ruleTransfer},
	{"trailing instructions", ruleTrailing},
	{"memo", ruleMemo},
	{"fee payer isolation", ruleIsolation},
}

// checkExact runs every rule on t.
func checkExact(t *svmTx, terms exactTerms) (exactPay, error) {
	var out exactPay
	for _, r := range exactRules {
		if err := r.check(t, terms, &out); err != nil {
			return out, err
		}
	}
	return out, nil
}

// ruleFeePayer: account 0, which pays the fee and signs first, is the
// agent's fee payer.
func ruleFeePayer(t *svmTx, terms exactTerms, _ *exactPay) error {
	if !t.keys[0].Equals(terms.feePayer) {
		return ErrFeePayerMismatch.With("the transaction's fee payer is %s; this agent's is %s", t.keys[0], terms.feePayer)
	}
	return nil
}

// ruleSigners: exactly two signatures are required, the fee payer's and
// the client's, and the client's is there and valid.
func ruleSigners(t *svmTx, _ exactTerms, _ *exactPay) error {
	if t.header.signers != 2 {
		return ErrSignersInvalid.With("the transaction requires %d signatures; exactly 2 are taken (the fee payer's and the token authority's)", t.header.signers)
	}
	if !t.signedBy(1) {
		return ErrSignersInvalid.With("the signature of %s does not verify", t.keys[1])
	}
	return nil
}

// ruleLayout: 3 to 7 instructions and no address lookup tables, so every
// account the transaction touches is in sight.
func ruleLayout(t *svmTx, _ exactTerms, _ *exactPay) error {
	if t.lookups > 0 {
		return ErrTxLayout.With("the transaction loads accounts from %d address lookup tables; none are taken", t.lookups)
	}
	if n := len(t.ixs); n < 3 || n > maxExactInstructions {
		return ErrTxLayout.With("the transaction has %d instructions; 3 to %d are taken", n, maxExactInstructions)
	}
	return nil
}

// ruleComputeBudget: instruction 0 sets the compute unit limit and 1 the
// unit price, within the agent's bounds.
func ruleComputeBudget(t *svmTx, terms exactTerms, _ *exactPay) error {
	limit, price := t.ixs[0], t.ixs[1]
	if !t.program(limit).Equals(solana.ComputeBudget) || len(limit.data) != 5 || limit.data[0] != cbSetComputeUnitLimit || len(limit.accounts) != 0 {
		return ErrComputeBudget.With("instruction 1 must be ComputeBudget SetComputeUnitLimit")
	}
	if !t.program(price).Equals(solana.ComputeBudget) || len(price.data) != 9 || price.data[0] != cbSetComputeUnitPrice || len(price.accounts) != 0 {
		return ErrComputeBudget.With("instruction 2 must be ComputeBudget SetComputeUnitPrice")
	}
	if units := uint64(binary.LittleEndian.Uint32(limit.data[1:])); units > terms.maxUnits {
		return ErrComputeBudget.With("compute unit limit %d is over this agent's %d", units, terms.maxUnits)
	}
	if micro := binary.LittleEndian.Uint64(price.data[1:]); micro > terms.maxPrice {
		return ErrComputeBudget.With("compute unit price %d micro-lamports is over this agent's %d", micro, terms.maxPrice)
	}
	return nil
}

// ruleTransfer: instruction 2 is a TransferChecked of a mint the skill is
// priced in, of exactly its price, to the associated token account of the
// provider's wallet, by the transaction's other signer.
func ruleTransfer(t *svmTx, terms exactTerms, out *exactPay) error {
	ix := t.ixs[2]
	prog := t.program(ix)
	if !prog.Equals(solana.TokenProgramID) && !prog.Equals(solana.Token2022ProgramID) ||
		len(ix.data) != 10 || ix.data[0] != tokenTransferChecked || len(ix.accounts) != 4 {
		return ErrNoTransfer
	}
	mint, ok1 := t.account(ix, 1)
	dest, ok2 := t.account(ix, 2)
	auth, ok3 := t.account(ix, 3)
	if !ok1 || !ok2 || !ok3 {
		return ErrNoTransfer
	}
	i := slices.IndexFunc(terms.rows, func(p Price) bool { return p.Asset == mint.String() })
	if i < 0 {
		return ErrWrongAsset.With("the transaction pays mint %s; this skill is priced in %s", mint, assetList(terms.rows))
	}
	out.row = terms.rows[i]
	if want, err := associatedTokenAccount(terms.payTo, mint, prog); err != nil || !dest.Equals(want) {
		return ErrWrongDestination.With("the transfer goes to %s, not to %s, the %s account of %s", dest, want, out.row.Currency, terms.payTo)
	}
	if amount := binary.LittleEndian.Uint64(ix.data[1:9]); amount != out.row.Amount {
		return ErrAmountMismatch.With("the transfer moves %d; the price is %d (%s smallest units)", amount, out.row.Amount, out.row.Currency)
	}
	if !auth.Equals(t.keys[1]) {
		return ErrSignersInvalid.With("the transfer's authority %s is not the transaction's second signer", auth)
	}
	out.authority = auth
	return nil
}

// ruleTrailing: what follows the transfer is memo or Lighthouse
// instructions only.
func ruleTrailing(t *svmTx, _ exactTerms, _ *exactPay) error {
	for i, ix := range t.ixs[3:] {
		if p := t.program(ix); !p.Equals(solana.MemoProgramID) && !p.Equals(lighthouseProgram) {
			return ErrExtraInstruction.With("instruction %d calls program %s", i+4, p)
		}
	}
	return nil
}

// ruleMemo: exactly one memo instruction: it names the challenge (its
// nonce, extra.memo), which is checked when the nonce is opened.
func ruleMemo(t *svmTx, _ exactTerms, out *exactPay) error {
	var memos []string
	for _, ix := range t.ixs[3:] {
		if t.program(ix).Equals(solana.MemoProgramID) {
			memos = append(memos, string(ix.data))
		}
	}
	switch len(memos) {
	case 0:
		return ErrMemoMissing.With("the transaction has no memo instruction; its data must be the challenge's extra.memo")
	case 1:
		if validNonce(memos[0]) != nil {
			return ErrMemoMismatch.With("the memo %.64q is not a nonce of this agent", memos[0])
		}
		out.memo = memos[0]
		return nil
	}
	return ErrMemoDuplicate.With("the transaction carries %d memo instructions; exactly one, extra.memo, is taken", len(memos))
}

// ruleIsolation: no instruction names the fee payer, so the runtime lets
// its signature authorize nothing but the fee.
func ruleIsolation(t *svmTx, _ exactTerms, _ *exactPay) error {
	for i, ix := range t.ixs {
		if slices.Contains(ix.accounts, 0) {
			return ErrFeePayerInUse.With("instruction %d names the fee payer", i+1)
		}
	}
	return nil
}

// associatedTokenAccount is the associated token account of owner for
// mint under the token program prog.
func associatedTokenAccount(owner, mint, prog solana.PublicKey) (solana.PublicKey, error) {
	k, _, err := solana.FindProgramAddress([][]byte{owner[:], prog[:], mint[:]}, solana.SPLAssociatedTokenAccountProgramID)
	return k, err
}

func assetList(rows Prices) string {
	s := ""
	for i, p := range rows {
		if i > 0 {
			s += ", "
		}
		s += p.Currency + " (" + p.Asset + ")"
	}
	return s
}
