package interop

import (
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/rpc"
)

// An x402 v2 payment moves tokens to the wallet's associated token
// account of the mint, which must exist first: a transfer to a missing one
// fails, and the network refuses the payment in simulation
// (payment_tx_rejected). The agent does not create it (that costs rent,
// and a facilitator has no key of the agent's to pay it with): it looks at
// Start, and again whenever the network refuses a payment, and logs each
// one missing with the command that creates it.

// tokenAccounts are the mints the skills are priced in, and what was
// learned of the wallet's account of each.
type tokenAccounts struct {
	mu     sync.Mutex
	rows   []Price         // one per mint, in the order the skills name them
	exists map[string]bool // by mint, once looked up: whether the wallet's account exists
}

// watch adds the mints of rows.
func (ta *tokenAccounts) watch(rows Prices) {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	for _, r := range rows {
		if !slices.ContainsFunc(ta.rows, func(w Price) bool { return w.Asset == r.Asset }) {
			ta.rows = append(ta.rows, r)
		}
	}
}

// unseen are the rows whose account was not seen yet.
func (ta *tokenAccounts) unseen() []Price {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	var out []Price
	for _, r := range ta.rows {
		if !ta.exists[r.Asset] {
			out = append(out, r)
		}
	}
	return out
}

func (ta *tokenAccounts) learn(mint string, exists bool) {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	if ta.exists == nil {
		ta.exists = map[string]bool{}
	}
	ta.exists[mint] = exists
}

// missing reports whether the wallet's account of mint was found missing
// at the last look.
func (ta *tokenAccounts) missing(mint string) bool {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	exists, known := ta.exists[mint]
	return known && !exists
}

// checkTokenAccounts looks for the wallet's account of each mint not seen
// yet and warns of each one missing. It never fails: a lookup that fails
// is logged.
func (p *Paywall) checkTokenAccounts(ctx context.Context) {
	if p.settler == nil {
		return
	}
	for _, row := range p.accounts.unseen() {
		if exists, known := p.lookTokenAccount(ctx, row); known {
			p.accounts.learn(row.Asset, exists)
		}
	}
}

// lookTokenAccount tells whether the wallet's account of row's mint
// exists (known false when that could not be learned), and logs why not.
func (p *Paywall) lookTokenAccount(ctx context.Context, row Price) (exists, known bool) {
	mint, err := solana.PublicKeyFromBase58(row.Asset)
	if err != nil {
		return false, false
	}
	prog, ok, err := p.chain.accountOwner(ctx, mint)
	switch {
	case err != nil:
		p.log.Warn("x402 v2: could not look up the mint of a token price", "currency", row.Currency, "mint", mint, "err", err)
		return false, false
	case !ok:
		p.log.Warn("x402 v2: the mint of a token price does not exist on the payment network: no payment in it can land",
			"currency", row.Currency, "mint", mint, "network", p.cfg.Network)
		return false, false
	}
	ata, err := associatedTokenAccount(p.wallet, mint, prog)
	if err != nil {
		return false, false
	}
	if _, exists, err = p.chain.accountOwner(ctx, ata); err != nil {
		p.log.Warn("x402 v2: could not look up the wallet's token account", "currency", row.Currency, "account", ata, "err", err)
		return false, false
	}
	if !exists {
		p.log.Warn("x402 v2: the wallet has no token account of a mint a skill is priced in: every payment in it is refused until it exists",
			"currency", row.Currency, "mint", mint, "wallet", p.cfg.Wallet, "account", ata,
			"create_with", "spl-token create-account "+mint.String()+" --owner "+p.cfg.Wallet+" --url "+clusterMoniker(p.cfg))
	}
	return exists, true
}

// rejected is the client's error for a payment in row that the network
// (or the facilitator) refused with err: that the wallet has no account
// of its mint, when that is why.
func (p *Paywall) rejected(ctx context.Context, row Price, err error) error {
	p.checkTokenAccounts(ctx)
	if p.accounts.missing(row.Asset) {
		return ErrTxRejected.With("the provider's wallet %s has no %s account yet, so no payment in %s can land until its operator creates it; nothing was paid",
			p.cfg.Wallet, row.Currency, row.Currency)
	}
	return err
}

// clusterMoniker names the payment network as the Solana CLI's --url
// does (never the RPC URL, which may carry a key).
func clusterMoniker(cfg PaymentConfig) string {
	switch {
	case cfg.GenesisHash != "":
		return "<your RPC URL>"
	case cfg.Network == NetworkMainnet:
		return "mainnet-beta"
	}
	return "devnet"
}

// accountOwner is the program that owns addr; ok is false when the
// account does not exist.
func (c *Chain) accountOwner(ctx context.Context, addr solana.PublicKey) (owner solana.PublicKey, ok bool, err error) {
	err = c.call(ctx, "getAccountInfo", func(ctx context.Context) error {
		res, err := c.client.GetAccountInfoWithOpts(ctx, addr, &rpc.GetAccountInfoOpts{Commitment: c.commitment})
		switch {
		case errors.Is(err, rpc.ErrNotFound):
			return nil
		case err != nil:
			return err
		}
		owner, ok = res.Value.Owner, true
		return nil
	})
	return owner, ok, err
}
