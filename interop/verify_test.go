package interop

import (
	"context"
	"testing"

	"github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/programs/system"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/interop/soltest"
)

// The provider counts what reached its wallet as the system transfers to
// it (top-level and inner), or its balance change when that is larger. In
// these transactions the provider also pays something out (it co-signs),
// so the balance change is below the transfers: only counting the
// transfers finds the price paid.

func TestX402CountsTransfersNotOnlyTheBalance(t *testing.T) {
	t.Parallel()
	other := NewWallet().PublicKey()
	cases := []struct {
		name  string
		build func(h *harness, payer *Wallet, nonce string) (*solana.Transaction, soltest.Land)
		want  int
	}{
		{"top-level transfer, balance change below the price", func(h *harness, payer *Wallet, n string) (*solana.Transaction, soltest.Land) {
			wallet := h.provider.PublicKey()
			return newTx(t, payer, []solana.Instruction{transfer(payer.PublicKey(), wallet, testPrice),
				transfer(wallet, other, 1000), MemoInstruction(n, payer.PublicKey())}, h.provider), soltest.Land{}
		}, 200},
		{"only an inner transfer pays", func(h *harness, payer *Wallet, n string) (*solana.Transaction, soltest.Land) {
			wallet := h.provider.PublicKey()
			tx := newTx(t, payer, []solana.Instruction{cpi(payer.PublicKey(), wallet),
				transfer(wallet, other, 1000), MemoInstruction(n, payer.PublicKey())}, h.provider)
			return tx, soltest.Land{Inner: innerTransfer(t, tx, 0, payer.PublicKey(), wallet, testPrice)}
		}, 200},
		{"transfers below the price", func(h *harness, payer *Wallet, n string) (*solana.Transaction, soltest.Land) {
			wallet := h.provider.PublicKey()
			return newTx(t, payer, []solana.Instruction{transfer(payer.PublicKey(), wallet, testPrice-1),
				transfer(wallet, other, 1000), MemoInstruction(n, payer.PublicKey())}, h.provider), soltest.Land{}
		}, 402},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t)
			payer := NewWallet()
			h.chain.Fund(payer.PublicKey(), solana.LAMPORTS_PER_SOL)
			h.chain.Fund(h.provider.PublicKey(), solana.LAMPORTS_PER_SOL)
			n := h.challenge()
			tx, land := c.build(h, payer, n)
			before := h.chain.Balance(h.provider.PublicKey())
			sig := h.chain.Land(tx, land)
			if got := h.chain.Balance(h.provider.PublicKey()) - before; got >= testPrice {
				t.Fatalf("scenario: the wallet's balance grew by %d, not less than the price", got)
			}
			if r := h.withProof(sig, n); r.status != c.want {
				t.Fatalf("got %d %s, want %d", r.status, r.raw, c.want)
			}
		})
	}
}

// TestDepositCountsTransfers: a deposit is credited with what its bound
// payer transferred, also through an inner instruction (a program's CPI)
// or a TransferWithSeed from a derived account.
func TestDepositCountsTransfers(t *testing.T) {
	t.Parallel()
	seeded := func(payer *Wallet) solana.PublicKey {
		derived, err := solana.CreateWithSeed(payer.PublicKey(), "mesh", solana.SystemProgramID)
		if err != nil {
			t.Fatal(err)
		}
		return derived
	}
	cases := []struct {
		name string
		// funder is the address the top-up binds; pay deposits to key.
		funder func(payer *Wallet) solana.PublicKey
		pay    func(h *harness, payer *Wallet, key string) (*solana.Transaction, soltest.Land)
		want   float64
	}{
		{"inner transfer", (*Wallet).PublicKey, func(h *harness, payer *Wallet, key string) (*solana.Transaction, soltest.Land) {
			wallet := h.provider.PublicKey()
			tx := newTx(t, payer, []solana.Instruction{cpi(payer.PublicKey(), wallet), MemoInstruction(key, payer.PublicKey())})
			return tx, soltest.Land{Inner: innerTransfer(t, tx, 0, payer.PublicKey(), wallet, 12_345)}
		}, 12_345},
		{"transfer with seed", seeded, func(h *harness, payer *Wallet, key string) (*solana.Transaction, soltest.Land) {
			ix := system.NewTransferWithSeedInstruction(7_000, "mesh", solana.SystemProgramID, seeded(payer), payer.PublicKey(), h.provider.PublicKey()).Build()
			return newTx(t, payer, []solana.Instruction{ix, MemoInstruction(key, payer.PublicKey())}), soltest.Land{}
		}, 7_000},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t)
			caller, payer := identity.GenerateKey(), NewWallet()
			funder := c.funder(payer)
			h.chain.Fund(payer.PublicKey(), solana.LAMPORTS_PER_SOL)
			h.chain.Fund(funder, solana.LAMPORTS_PER_SOL)
			r := h.call(caller, "POST", "/v1/topup", `{"payer_address":"`+funder.String()+`"}`)
			if r.status != 201 {
				t.Fatalf("topup: %d %s", r.status, r.raw)
			}
			key := r.body["api_key"].(string)
			h.chain.Land(c.pay(h, payer, key))
			if err := h.agent.paywall.PollNow(context.Background()); err != nil {
				t.Fatal(err)
			}
			if got := h.balance(caller, key); got != c.want {
				t.Fatalf("balance %v after the deposit, want %v", got, c.want)
			}
		})
	}
}
