package interop

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gagliardetto/solana-go"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/testkit"
	"github.com/agentmesh/mesh/interop/soltest"
)

// payingClient is a client with a funded wallet on chain, paying at
// confirmed commitment.
func payingClient(t *testing.T, h *harness, chain *soltest.Chain) *Client {
	t.Helper()
	w := NewWallet()
	chain.Fund(w.PublicKey(), solana.LAMPORTS_PER_SOL)
	c := &Client{Key: identity.GenerateKey(), Wallet: w, Chain: NewChain(chain.URL, CommitmentConfirmed, 2*time.Second),
		MaxLamports: testPrice, Now: h.clock.Now, ProofBackoff: 10 * time.Millisecond}
	t.Cleanup(c.Chain.Close)
	return c
}

// card fetches the harness agent's card through c.
func (h *harness) card(c *Client) *Card {
	h.t.Helper()
	card, err := c.Card(context.Background(), h.srv.URL)
	if err != nil {
		h.t.Fatal(err)
	}
	return card
}

// TestClientWaitsForAFinalizingProvider: a provider that checks payments
// at finalized commitment sees a payment some time after the client saw it
// confirmed. The client must neither pay twice nor give up: it waits for
// the commitment the card publishes, and without one it keeps re-sending
// the proof with backoff.
func TestClientWaitsForAFinalizingProvider(t *testing.T) {
	t.Parallel()
	for _, published := range []bool{true, false} {
		t.Run(map[bool]string{true: "commitment in the card", false: "no commitment in the card"}[published], func(t *testing.T) {
			t.Parallel() // each waits for finality
			h := newHarness(t, func(pc *PaymentConfig) { pc.Commitment = CommitmentFinalized })
			c := payingClient(t, h, h.chain)
			card, err := c.Card(context.Background(), h.srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			if card.Payment.Commitment != CommitmentFinalized {
				t.Fatalf("card commitment %q", card.Payment.Commitment)
			}
			if !published {
				card.Payment.Commitment = ""
			}
			h.chain.ConfirmOnly(true)
			checks := h.chain.Calls("getTransaction")
			type answer struct {
				res *Result
				err error
			}
			done := make(chan answer, 1)
			go func() {
				res, err := c.Call(context.Background(), card, "echo", []byte(`{"a":1}`))
				done <- answer{res, err}
			}()
			if published { // the client waits on chain, not at the agent
				testkit.Eventually(t, 20*time.Second, func() bool { return h.chain.Calls("getSignatureStatuses") >= 3 }, "the client polls the status")
			} else { // more refused proofs than a short retry budget allows
				testkit.Eventually(t, 20*time.Second, func() bool { return h.chain.Calls("getTransaction")-checks >= 8 }, "the agent refused 8 proofs")
			}
			h.chain.Finalize()
			a := <-done
			if a.err != nil || a.res.Status != 200 {
				t.Fatalf("call: %+v %v", a.res, a.err)
			}
			if n := h.chain.Calls("getTransaction") - checks; published && n != 1 {
				t.Fatalf("the agent checked the proof %d times; the first should have passed", n)
			}
			if got := h.chain.Balance(h.provider.PublicKey()); got != testPrice {
				t.Fatalf("provider received %d", got)
			}
		})
	}
}

// TestClientChecksTheRPCNetwork: an RPC endpoint of another network than
// the offer's (a mainnet RPC, a devnet agent) is refused before anything
// is sent, for a call and for a deposit.
func TestClientChecksTheRPCNetwork(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	mainnet := soltest.New(t)
	mainnet.SetGenesis(GenesisMainnet)
	c := payingClient(t, h, mainnet)
	ctx := context.Background()
	card, err := c.Card(ctx, h.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Call(ctx, card, "echo", []byte(`{}`))
	var pe *PaymentError
	if !errors.As(err, &pe) || !errors.Is(err, ErrRefused) || !errors.Is(err, ErrGenesisMismatch) || pe.Signature != "" {
		t.Fatalf("call through a mainnet RPC: %v", err)
	}
	top, err := c.Topup(ctx, card, 0)
	if err != nil {
		t.Fatal(err)
	}
	c.MaxLamports = top.Lamports
	if _, err := c.Deposit(ctx, card, top); !errors.Is(err, ErrRefused) || !errors.Is(err, ErrGenesisMismatch) {
		t.Fatalf("deposit through a mainnet RPC: %v", err)
	}
	if n := mainnet.Calls("sendTransaction"); n != 0 {
		t.Fatalf("%d transactions sent on the wrong network", n)
	}
}

// TestPayEndsWhenTheBlockhashExpires: a transaction lost on its way never
// lands; once the chain passes its blockhash's last valid height, Pay says
// so instead of waiting forever.
func TestPayEndsWhenTheBlockhashExpires(t *testing.T) {
	t.Parallel()
	chain := soltest.New(t)
	w := NewWallet()
	chain.Fund(w.PublicKey(), solana.LAMPORTS_PER_SOL)
	chain.DropSends(true)
	c := NewChain(chain.URL, CommitmentConfirmed, 2*time.Second)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	type answer struct {
		sig solana.Signature
		err error
	}
	done := make(chan answer, 1)
	go func() {
		sig, err := c.Pay(ctx, w, NewWallet().PublicKey(), 5000, "memo")
		done <- answer{sig, err}
	}()
	testkit.Eventually(t, 20*time.Second, func() bool { return chain.Calls("getSignatureStatuses") >= 1 }, "Pay polls the status")
	chain.Advance(151)
	a := <-done
	if !errors.Is(a.err, ErrTxExpired) || a.sig.IsZero() {
		t.Fatalf("Pay of a dropped transaction: %v %v", a.sig, a.err)
	}
}

// TestClientRetriesWithProof: when the agent cannot check a payment in
// time, the error names the transaction and nonce, and the same request
// retried with that proof is served without paying again.
func TestClientRetriesWithProof(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(pc *PaymentConfig) { pc.RPCTimeout = rpcTimeoutShort })
	c := payingClient(t, h, h.chain)
	c.ProofWait = 300 * time.Millisecond
	ctx := context.Background()
	card, err := c.Card(ctx, h.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	h.chain.Fail("getTransaction", soltest.RPCError)
	_, err = c.Call(ctx, card, "echo", []byte(`{"q":1}`))
	var pe *PaymentError
	if !errors.As(err, &pe) || pe.Signature == "" || pe.Nonce == "" || pe.Challenge.Code != ErrRPC.Code {
		t.Fatalf("call with the agent's RPC down: %v", err)
	}
	h.chain.Heal()
	var refused *PaymentError
	if _, err := c.CallWithProof(ctx, card, "echo", []byte(`{"q":2}`), pe.Signature, pe.Nonce); !errors.As(err, &refused) ||
		refused.Challenge.Code != ErrPaymentBinding.Code {
		t.Fatalf("proof retried with another body: %v", err)
	}
	res, err := c.CallWithProof(ctx, card, "echo", []byte(`{"q":1}`), pe.Signature, pe.Nonce)
	if err != nil || res.Status != 200 || res.Signature != pe.Signature {
		t.Fatalf("proof retried: %+v %v", res, err)
	}
	if got := h.chain.Balance(h.provider.PublicKey()); got != testPrice || h.served.Load() != 1 {
		t.Fatalf("provider received %d, skill ran %d times", got, h.served.Load())
	}
}
