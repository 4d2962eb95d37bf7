package interop

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/rpc"

	"github.com/agentmesh/mesh/internal/testkit"
)

// x402JSDir holds the x402 project's own client (@x402/fetch, @x402/svm)
// and facilitator, pinned by its lockfile.
const x402JSDir = "testdata/x402-js"

// svmTokens sets up SPL tokens on the LiteSVM shim with real
// transactions: the test USDC mint sits at devnet USDC's address (so the
// pricing rows and @x402/svm know it as USDC), its mint authority is a
// test key.
type svmTokens struct {
	t         testing.TB
	rpc       *rpc.Client
	authority *Wallet
}

func newSVMTokens(t testing.TB, url string) *svmTokens {
	t.Helper()
	s := &svmTokens{t: t, rpc: rpc.New(url), authority: NewWallet()}
	s.airdrop(s.authority.PublicKey(), 10*solana.LAMPORTS_PER_SOL)
	var out any
	if err := s.rpc.RPCCallForInto(context.Background(), &out, "test_createMint", []any{MintUSDCDevnet, 6, s.authority.Address()}); err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *svmTokens) airdrop(to solana.PublicKey, lamports uint64) {
	s.t.Helper()
	if _, err := s.rpc.RequestAirdrop(context.Background(), to, lamports, rpc.CommitmentFinalized); err != nil {
		s.t.Fatal(err)
	}
}

// send lands a transaction of ixs paid by signers[0].
func (s *svmTokens) send(signers []*Wallet, ixs ...solana.Instruction) {
	s.t.Helper()
	ctx := context.Background()
	bh, err := s.rpc.GetLatestBlockhash(ctx, rpc.CommitmentFinalized)
	if err != nil {
		s.t.Fatal(err)
	}
	tx, err := solana.NewTransaction(ixs, bh.Value.Blockhash, solana.TransactionPayer(signers[0].PublicKey()))
	if err != nil {
		s.t.Fatal(err)
	}
	if _, err := tx.Sign(func(k solana.PublicKey) *solana.PrivateKey {
		for _, w := range signers {
			if k.Equals(w.PublicKey()) {
				return &w.key
			}
		}
		return nil
	}); err != nil {
		s.t.Fatal(err)
	}
	if _, err := s.rpc.SendTransaction(ctx, tx); err != nil {
		s.t.Fatal(err)
	}
}

// account creates owner's associated token account of mint (paid by the
// mint authority) and returns it.
func (s *svmTokens) account(owner, mint solana.PublicKey) solana.PublicKey {
	ata := mustATA(s.t, owner, mint, solana.TokenProgramID)
	s.send([]*Wallet{s.authority}, solana.NewInstruction(solana.SPLAssociatedTokenAccountProgramID, solana.AccountMetaSlice{
		solana.Meta(s.authority.PublicKey()).WRITE().SIGNER(), solana.Meta(ata).WRITE(), solana.Meta(owner), solana.Meta(mint),
		solana.Meta(solana.SystemProgramID), solana.Meta(solana.TokenProgramID),
	}, []byte{1})) // CreateIdempotent
	return ata
}

// mintUSDC gives owner amount of the test USDC.
func (s *svmTokens) mintUSDC(owner solana.PublicKey, amount uint64) {
	mint := solana.MustPublicKeyFromBase58(MintUSDCDevnet)
	ata := s.account(owner, mint)
	s.send([]*Wallet{s.authority}, solana.NewInstruction(solana.TokenProgramID, solana.AccountMetaSlice{
		solana.Meta(mint).WRITE(), solana.Meta(ata).WRITE(), solana.Meta(s.authority.PublicKey()).SIGNER(),
	}, binary.LittleEndian.AppendUint64([]byte{7}, amount))) // MintTo
}

// wrapSOL gives owner (which must hold the lamports) amount of wrapped SOL.
func (s *svmTokens) wrapSOL(owner *Wallet, lamports uint64) {
	ata := s.account(owner.PublicKey(), solana.MustPublicKeyFromBase58(MintWSOL))
	transfer := make([]byte, 12)
	binary.LittleEndian.PutUint32(transfer, 2)
	binary.LittleEndian.PutUint64(transfer[4:], lamports)
	s.send([]*Wallet{owner},
		solana.NewInstruction(solana.SystemProgramID, solana.AccountMetaSlice{solana.Meta(owner.PublicKey()).WRITE().SIGNER(), solana.Meta(ata).WRITE()}, transfer),
		solana.NewInstruction(solana.TokenProgramID, solana.AccountMetaSlice{solana.Meta(ata).WRITE()}, []byte{17})) // SyncNative
}

// balance is the token balance of owner's account of mint.
func (s *svmTokens) balance(owner solana.PublicKey, mint string) uint64 {
	s.t.Helper()
	res, err := s.rpc.GetTokenAccountBalance(context.Background(), mustATA(s.t, owner, solana.MustPublicKeyFromBase58(mint), solana.TokenProgramID), rpc.CommitmentFinalized)
	if err != nil {
		s.t.Fatal(err)
	}
	var n uint64
	if err := json.Unmarshal([]byte(res.Value.Amount), &n); err != nil {
		s.t.Fatal(err)
	}
	return n
}

func (s *svmTokens) lamports(addr solana.PublicKey) uint64 {
	s.t.Helper()
	res, err := s.rpc.GetBalance(context.Background(), addr, rpc.CommitmentFinalized)
	if err != nil {
		s.t.Fatal(err)
	}
	return res.Value
}

// exactOnLiteSVM is an agent on LiteSVM whose echo is also priced in the
// test USDC and wrapped SOL, its provider wallet holding accounts of
// both, and a payer funded with both; feePayer is the agent's own, or,
// with a facilitator, the facilitator's.
type exactOnLiteSVM struct {
	*harness
	tokens   *svmTokens
	payer    *Wallet
	feePayer *Wallet
	url      string
}

func startExactOnLiteSVM(t testing.TB, facilitator bool) *exactOnLiteSVM {
	t.Helper()
	url, genesis := startLiteSVM(t)
	e := &exactOnLiteSVM{tokens: newSVMTokens(t, url), payer: NewWallet(), feePayer: NewWallet(), url: url}
	h, pc := litesvmHarness(t, url, genesis)
	h.tokens = Prices{Token(testUSDC, CurrencyUSDC, "", NetworkDevnet), Token(testWSOL, CurrencyWSOL, "", NetworkDevnet)}
	for _, w := range []*Wallet{e.feePayer, e.payer, h.provider} {
		e.tokens.airdrop(w.PublicKey(), solana.LAMPORTS_PER_SOL)
	}
	if facilitator {
		pc.FacilitatorURL = startFacilitator(t, url, e.feePayer)
	} else {
		pc.FeePayer = e.feePayer
	}
	e.tokens.account(h.provider.PublicKey(), solana.MustPublicKeyFromBase58(MintUSDCDevnet))
	e.tokens.account(h.provider.PublicKey(), solana.MustPublicKeyFromBase58(MintWSOL))
	e.tokens.mintUSDC(e.payer.PublicKey(), 1_000_000)
	e.tokens.wrapSOL(e.payer, 100_000)
	h.start(pc)
	e.harness = h
	return e
}

// balances are the amounts an x402 v2 payment moves.
type balances struct{ payer, provider, feePayerSOL uint64 }

func (e *exactOnLiteSVM) balances(mint string, feePayer solana.PublicKey) balances {
	return balances{e.tokens.balance(e.payer.PublicKey(), mint), e.tokens.balance(e.provider.PublicKey(), mint), e.tokens.lamports(feePayer)}
}

// exactFee is what the fee payer pays to land a payment: two signatures
// and the priority fee of @x402/svm's compute budget (20,000 units at 1
// micro-lamport, rounded up to a lamport).
const exactFee = 2*5000 + 1

// checkMoved asserts that a payment of amount moved exactly that from
// the payer to the provider, and the fee from the fee payer.
func checkMoved(t testing.TB, before, after balances, amount uint64) {
	t.Helper()
	if before.payer-after.payer != amount || after.provider-before.provider != amount || before.feePayerSOL-after.feePayerSOL != exactFee {
		t.Fatalf("balances moved from %+v to %+v; want %d from payer to provider and %d lamports of fees", before, after, amount, exactFee)
	}
}

// latestBlockhash is the blockhash a client builds against now.
func (e *exactOnLiteSVM) latestBlockhash() solana.Hash { return e.tokens.latestBlockhash() }

func (s *svmTokens) latestBlockhash() solana.Hash {
	s.t.Helper()
	bh, err := s.rpc.GetLatestBlockhash(context.Background(), rpc.CommitmentFinalized)
	if err != nil {
		s.t.Fatal(err)
	}
	return bh.Value.Blockhash
}

// TestLiteSVMMissingTokenAccount: every payment to a wallet without an
// account of the mint is refused by the network; the agent says so at
// start, naming the missing account and the command that creates it, and
// again when the network refuses a payment; once the account exists a
// payment lands.
func TestLiteSVMMissingTokenAccount(t *testing.T) {
	t.Parallel()
	url, genesis := startLiteSVM(t)
	tokens := newSVMTokens(t, url)
	h, pc := litesvmHarness(t, url, genesis)
	h.tokens, h.logs = Prices{Token(testUSDC, CurrencyUSDC, "", NetworkDevnet)}, &testkit.Buffer{}
	payer, mint := NewWallet(), solana.MustPublicKeyFromBase58(MintUSDCDevnet)
	pc.FeePayer = NewWallet()
	for _, w := range []*Wallet{pc.FeePayer, payer, h.provider} {
		tokens.airdrop(w.PublicKey(), solana.LAMPORTS_PER_SOL)
	}
	tokens.mintUSDC(payer.PublicKey(), 1_000_000)
	h.start(pc)
	ata := mustATA(t, h.provider.PublicKey(), mint, solana.TokenProgramID).String()
	create := "spl-token create-account " + MintUSDCDevnet + " --owner " + h.provider.Address()
	if logs := h.logs.String(); strings.Count(logs, ata) != 1 || !strings.Contains(logs, create) {
		t.Fatalf("the agent's log at start:\n%s", logs)
	}
	pay := func(body string) resp {
		pr := h.challengeV2(body)
		s := testSpec(pc.FeePayer.PublicKey(), h.provider.PublicKey(), pr.Accepts[0].Extra.Memo, tokens.latestBlockhash())
		s.payer = payer
		return h.payExact(s, body, X402Version2)
	}
	if r := pay(`{"n":1}`); r.status != 402 || r.body["code"] != "payment_tx_rejected" || !strings.Contains(r.body["detail"].(string), "has no USDC account") ||
		strings.Count(h.logs.String(), ata) != 2 {
		t.Fatalf("a payment to the missing account: %d %s\n%s", r.status, r.raw, h.logs.String())
	}
	tokens.account(h.provider.PublicKey(), mint)
	if r := pay(`{"n":2}`); r.status != 200 || tokens.balance(h.provider.PublicKey(), MintUSDCDevnet) != testUSDC {
		t.Fatalf("a payment once the account exists: %d %s", r.status, r.raw)
	}
}

// TestLiteSVMExactPay pays a paid skill per x402 v2 on the real Solana
// runtime with a transaction built as @x402/svm builds it: in USDC and in
// wrapped SOL, the tokens and the fee payer's SOL move exactly; a
// payment whose blockhash expired, or whose payer lacks the tokens, is
// refused before anything moves.
func TestLiteSVMExactPay(t *testing.T) {
	t.Parallel()
	e := startExactOnLiteSVM(t, false)
	pay := func(mint string, amount uint64, decimals uint8, body string) resp {
		pr := e.challengeV2(body)
		s := testSpec(e.feePayer.PublicKey(), e.provider.PublicKey(), pr.Accepts[0].Extra.Memo, e.latestBlockhash())
		s.payer, s.mint, s.amount, s.decimals = e.payer, solana.MustPublicKeyFromBase58(mint), amount, decimals
		return e.payExact(s, body, X402Version2)
	}
	for _, c := range []struct {
		mint     string
		amount   uint64
		decimals uint8
	}{{MintUSDCDevnet, testUSDC, 6}, {MintWSOL, testWSOL, 9}} {
		before := e.balances(c.mint, e.feePayer.PublicKey())
		r := pay(c.mint, c.amount, c.decimals, `{"on":"`+c.mint+`"}`)
		if sr, ok := ParseSettleResponse(r.header); r.status != 200 || !ok || !sr.Success {
			t.Fatalf("paid in %s: %d %s", c.mint, r.status, r.raw)
		}
		checkMoved(t, before, e.balances(c.mint, e.feePayer.PublicKey()), c.amount)
	}

	before := e.balances(MintUSDCDevnet, e.feePayer.PublicKey())
	pr := e.challengeV2(`{"late":true}`)
	s := testSpec(e.feePayer.PublicKey(), e.provider.PublicKey(), pr.Accepts[0].Extra.Memo, e.latestBlockhash())
	s.payer = e.payer
	e.tokens.mintUSDC(e.payer.PublicKey(), 1) // any landed transaction expires the blockhash on LiteSVM
	if r := e.payExact(s, `{"late":true}`, X402Version2); r.status != 402 || r.body["code"] != "payment_blockhash_expired" {
		t.Fatalf("expired blockhash: %d %s", r.status, r.raw)
	}
	before.payer++ // the tokens minted meanwhile
	pr = e.challengeV2(`{"poor":true}`)
	s = testSpec(e.feePayer.PublicKey(), e.provider.PublicKey(), pr.Accepts[0].Extra.Memo, e.latestBlockhash()) // a payer without tokens
	if r := e.payExact(s, `{"poor":true}`, X402Version2); r.status != 402 || r.body["code"] != "payment_tx_rejected" {
		t.Fatalf("payer without tokens: %d %s", r.status, r.raw)
	}
	if after := e.balances(MintUSDCDevnet, e.feePayer.PublicKey()); after != before {
		t.Fatalf("refused payments moved %+v to %+v", before, after)
	}
}

// x402Fetch pays url with the x402 project's client (@x402/fetch and
// @x402/svm's exact scheme, RPC at rpcURL) as payer, in asset, and
// returns what it saw. allow admits an asset the client's default spend
// controls do not (only its stablecoins, USDC among them).
type fetchResult struct {
	Status          int             `json:"status"`
	Body            json.RawMessage `json:"body"`
	PaymentRequired PaymentRequired `json:"paymentRequired"`
	PaymentResponse *SettleResponse `json:"paymentResponse"`
	Proof           string          `json:"proof"`
	Receipt         string          `json:"receipt"`
	Ms402ToAnswer   float64         `json:"ms402ToAnswer"`
}

func x402Fetch(t testing.TB, url, rpcURL string, payer *Wallet, asset, body string, allow bool) fetchResult {
	t.Helper()
	args := []string{"pay.mjs", url, rpcURL, asset, body}
	if allow {
		args = append(args, "allow")
	}
	cmd := exec.Command("node", args...)
	cmd.Dir = x402JSDir
	cmd.Env = append(os.Environ(), "X402_PAYER="+string(payer.MarshalKeyFile()))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node pay.mjs: %v\n%s", err, out)
	}
	var res fetchResult
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("pay.mjs printed %s: %v", out, err)
	}
	return res
}

// TestX402FetchPays: the x402 project's own client, @x402/fetch with
// @x402/svm 2.27 and a generated keypair funded with the test USDC and
// wrapped SOL, reads the 402's PAYMENT-REQUIRED, builds and signs the
// transfer, retries with PAYMENT-SIGNATURE and gets the answer with a
// PAYMENT-RESPONSE it decodes; the tokens and the fee payer's SOL move
// exactly. With a facilitator_url instead of a fee payer key, the agent
// has the x402 project's own facilitator (@x402/svm's exact scheme behind
// x402's /supported, /verify and /settle) co-sign and submit, and the
// facilitator's key pays the fee.
func TestX402FetchPays(t *testing.T) {
	t.Parallel()
	npmPackage(t, x402JSDir, "@x402/fetch")
	for _, facilitator := range []bool{false, true} {
		e := startExactOnLiteSVM(t, facilitator)
		for _, c := range []struct {
			mint   string
			amount uint64
			allow  bool
		}{{MintUSDCDevnet, testUSDC, false}, {MintWSOL, testWSOL, true}} {
			before := e.balances(c.mint, e.feePayer.PublicKey())
			body := `{"paid_with":"` + c.mint + `"}`
			res := x402Fetch(t, e.srv.URL+"/v1/echo", e.url, e.payer, c.mint, body, c.allow)
			if res.Status != 200 || !strings.Contains(string(res.Body), body) || res.PaymentResponse == nil || !res.PaymentResponse.Success ||
				res.PaymentResponse.Transaction != res.Proof || res.Receipt == "" || res.PaymentRequired.Accepts[0].Extra.FeePayer != e.feePayer.Address() {
				t.Fatalf("@x402/fetch in %s (facilitator %v) saw %+v", c.mint, facilitator, res)
			}
			checkMoved(t, before, e.balances(c.mint, e.feePayer.PublicKey()), c.amount)
			t.Logf("@x402/fetch paid in %s (facilitator %v): 402 to answer in %.0f ms", c.mint, facilitator, res.Ms402ToAnswer)
		}
	}
}

// startFacilitator runs the x402 project's facilitator on LiteSVM with
// key as its fee payer and returns its URL.
func startFacilitator(t testing.TB, rpcURL string, key *Wallet) string {
	t.Helper()
	cmd := exec.Command("node", "facilitator.mjs", rpcURL)
	cmd.Dir = x402JSDir
	cmd.Env = append(os.Environ(), "X402_FEE_PAYER="+string(key.MarshalKeyFile()))
	return "http://127.0.0.1:" + startReady(t, cmd, 1)[0]
}

// BenchmarkLiteSVM402ToAnswer times a paid call on the real Solana
// runtime from its 402 to its answer, the unpaid call that draws the 402
// left out: the seed's flow (the client sends a SOL transfer whose memo is
// the nonce, waits until it is finalized and retries with X-Payment-Proof)
// and x402 v2's (the client fetches a blockhash, signs a TransferChecked
// and retries with PAYMENT-SIGNATURE; the agent co-signs, submits and
// waits). Each call comes from its own address, so the proof rate limit
// stays out of the figure.
func BenchmarkLiteSVM402ToAnswer(b *testing.B) {
	e := startExactOnLiteSVM(b, false)
	e.tokens.mintUSDC(e.payer.PublicKey(), 1_000_000_000)
	ctx := context.Background()
	unpaid := func(b *testing.B, i int, flow string) (string, string, resp) {
		b.StopTimer()
		defer b.StartTimer()
		body, from := fmt.Sprintf(`{"%s":%d}`, flow, i), fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
		r := e.call(nil, "POST", "/v1/echo", body, "X-Forwarded-For", from)
		if r.status != 402 {
			b.Fatalf("unpaid: %d %s", r.status, r.raw)
		}
		return body, from, r
	}
	b.Run("seed", func(b *testing.B) {
		chain := NewChain(e.url, CommitmentFinalized, 10*time.Second)
		defer chain.Close()
		payer := NewWallet()
		e.tokens.airdrop(payer.PublicKey(), 100*solana.LAMPORTS_PER_SOL)
		for i := range b.N {
			body, from, r := unpaid(b, i, "seed")
			ch, err := ParseChallenge(r.header, []byte(r.raw))
			if err != nil {
				b.Fatal(err)
			}
			o := ch.Offers[0]
			sig, err := chain.Pay(ctx, payer, solana.MustPublicKeyFromBase58(o.PayTo), o.Lamports, o.Nonce)
			if err != nil {
				b.Fatal(err)
			}
			if r := e.call(nil, "POST", "/v1/echo", body, "X-Forwarded-For", from, HeaderPaymentProof, sig.String(), HeaderPaymentNonce, o.Nonce); r.status != 200 {
				b.Fatalf("paid: %d %s", r.status, r.raw)
			}
		}
	})
	b.Run("x402v2", func(b *testing.B) {
		for i := range b.N {
			body, from, r := unpaid(b, i, "v2")
			pr, ok := ParsePaymentRequired(r.header)
			if !ok {
				b.Fatal("no PAYMENT-REQUIRED")
			}
			s := testSpec(e.feePayer.PublicKey(), e.provider.PublicKey(), pr.Accepts[0].Extra.Memo, e.latestBlockhash())
			s.payer = e.payer
			v := EncodeHeader(s.payload(b, X402Version2, CAIP2Devnet))
			if r := e.call(nil, "POST", "/v1/echo", body, "X-Forwarded-For", from, HeaderPaymentSignature, v); r.status != 200 {
				b.Fatalf("paid: %d %s", r.status, r.raw)
			}
		}
	})
}

// TestA2AJSClientPaysWithX402: the same payment through the A2A x402
// extension, three tasks of @a2a-js/sdk 1.3.0 (A2A 1.0, its default
// ClientFactory) calling the paid skill, each awaiting payment with the
// USDC row among its requirements. One is paid by @x402/svm's exact
// client in the extension's stock shape (an x402 version 1 payload): it
// completes with the answer and x402's settlement receipt. One is first
// paid the wrong amount: payment-failed with the code, a failed receipt
// and fresh requirements, still input-required; then an x402 version 2
// payload of the fresh requirements completes it, its receipts the
// failure and the settlement. One is answered payment-rejected: canceled,
// the skill not run. The payer's and the wallet's USDC and the fee
// payer's SOL move exactly two payments.
func TestA2AJSClientPaysWithX402(t *testing.T) {
	t.Parallel()
	e := startExactOnLiteSVM(t, false)
	npmPackage(t, x402JSDir, "@a2a-js/sdk")
	before := e.balances(MintUSDCDevnet, e.feePayer.PublicKey())
	cmd := exec.Command("node", "a2a-pay.mjs", e.srv.URL, e.url, MintUSDCDevnet, `{"via":"a2a"}`)
	cmd.Dir = x402JSDir
	cmd.Env = append(os.Environ(), "X402_PAYER="+string(e.payer.MarshalKeyFile()))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node a2a-pay.mjs: %v\n%s", err, out)
	}
	type accept struct {
		Asset             string            `json:"asset"`
		MaxAmountRequired string            `json:"maxAmountRequired"`
		Extra             RequirementsExtra `json:"extra"`
	}
	type taskView struct {
		State    string           `json:"state"`
		Status   string           `json:"status"`
		Error    string           `json:"error"`
		Receipts []SettleResponse `json:"receipts"`
		Accepts  []accept         `json:"accepts"`
		Answer   json.RawMessage  `json:"answer"`
	}
	type payloadView struct {
		X402Version int    `json:"x402Version"`
		Scheme      string `json:"scheme"`
		Network     string `json:"network"`
	}
	var res struct {
		Paid struct {
			Required, Paid taskView
			Payload        payloadView
		}
		Retried struct {
			Required, Failed, Paid taskView
			Payload                payloadView
		}
		Rejected struct {
			Required, Rejected taskView
		}
		Ms402ToAnswer float64 `json:"ms402ToAnswer"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("a2a-pay.mjs printed %s: %v", out, err)
	}
	awaitingAs := func(v taskView, status string) bool {
		return v.State == "TASK_STATE_INPUT_REQUIRED" && v.Status == status && len(v.Accepts) > 0 &&
			v.Accepts[0].Asset == MintUSDCDevnet && v.Accepts[0].Extra.FeePayer == e.feePayer.Address()
	}
	awaiting := func(v taskView) bool { return awaitingAs(v, PaymentStatusRequired) }
	settled := func(v taskView, via string) bool {
		r := v.Receipts
		return v.State == "TASK_STATE_COMPLETED" && v.Status == PaymentStatusCompleted && len(r) > 0 && r[len(r)-1].Success &&
			r[len(r)-1].Transaction != "" && strings.Contains(string(v.Answer), `"task":"`+via+`"`)
	}
	for what, v := range map[string]taskView{"paid": res.Paid.Required, "retried": res.Retried.Required, "rejected": res.Rejected.Required} {
		if !awaiting(v) {
			t.Fatalf("the unpaid task %s: %+v\n%s", what, v, out)
		}
	}
	if p := res.Paid; p.Payload != (payloadView{1, "exact", "solana-devnet"}) || !settled(p.Paid, "paid") || len(p.Paid.Receipts) != 1 {
		t.Fatalf("the stock payment: %+v", p)
	}
	r := res.Retried
	if f := r.Failed; !awaitingAs(f, PaymentStatusFailed) || f.Error != "payment_amount_mismatch" ||
		len(f.Receipts) != 1 || f.Receipts[0].Success || !strings.HasPrefix(f.Receipts[0].ErrorReason, "payment_amount_mismatch") ||
		f.Accepts[0].Extra.Memo == r.Required.Accepts[0].Extra.Memo {
		t.Fatalf("the payment of the wrong amount: %+v", f)
	}
	if r.Payload != (payloadView{2, "exact", CAIP2Devnet}) || !settled(r.Paid, "retried") || len(r.Paid.Receipts) != 2 || r.Paid.Receipts[0].Success {
		t.Fatalf("the version 2 payment of the fresh requirements: %+v", r)
	}
	if j := res.Rejected.Rejected; j.State != "TASK_STATE_CANCELED" || j.Status != PaymentStatusRejected || len(j.Receipts) != 0 {
		t.Fatalf("the rejected task: %+v", j)
	}
	after := e.balances(MintUSDCDevnet, e.feePayer.PublicKey())
	if before.payer-after.payer != 2*testUSDC || after.provider-before.provider != 2*testUSDC || before.feePayerSOL-after.feePayerSOL != 2*exactFee {
		t.Fatalf("balances moved from %+v to %+v; want two payments of %d and %d lamports of fees", before, after, testUSDC, 2*exactFee)
	}
	t.Logf("@a2a-js/sdk 1.3.0 with @x402/svm paid in USDC over A2A: requirements to answer in %.0f ms", res.Ms402ToAnswer)
}
