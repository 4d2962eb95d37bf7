package interop

import (
	"context"
	"errors"
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

// tokenAccounts are the mints the skills are priced in, and which of the
// wallet's accounts of them were seen.
type tokenAccounts struct {
	mu    sync.Mutex
	rows  []Price         // one per mint, in the order the skills name them
	found map[string]bool // by mint: the wallet's account exists
}

// watch adds the mints of rows.
func (ta *tokenAccounts) watch(rows Prices) {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	for _, r := range rows {
		if !ta.watching(r.Asset) {
			ta.rows = append(ta.rows, r)
		}
	}
}

func (ta *tokenAccounts) watching(mint string) bool {
	for _, r := range ta.rows {
		if r.Asset == mint {
			return true
		}
	}
	return false
}

// unseen are the rows whose account was not seen yet.
func (ta *tokenAccounts) unseen() []Price {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	var out []Price
	for _, r := range ta.rows {
		if !ta.found[r.Asset] {
			out = append(out, r)
		}
	}
	return out
}

func (ta *tokenAccounts) seen(mint string) {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	if ta.found == nil {
		ta.found = map[string]bool{}
	}
	ta.found[mint] = true
}

// checkTokenAccounts looks for the wallet's account of each mint not seen
// yet and warns of each one missing. It never fails: a lookup that fails
// is logged.
func (p *Paywall) checkTokenAccounts(ctx context.Context) {
	if p.settler == nil {
		return
	}
	for _, row := range p.accounts.unseen() {
		if p.checkTokenAccount(ctx, row) {
			p.accounts.seen(row.Asset)
		}
	}
}

// checkTokenAccount reports whether the wallet's account of row's mint
// exists, and logs why not.
func (p *Paywall) checkTokenAccount(ctx context.Context, row Price) bool {
	mint, err := solana.PublicKeyFromBase58(row.Asset)
	if err != nil {
		return false
	}
	prog, ok, err := p.chain.accountOwner(ctx, mint)
	switch {
	case err != nil:
		p.log.Warn("x402 v2: could not look up the mint of a token price", "currency", row.Currency, "mint", mint, "err", err)
		return false
	case !ok:
		p.log.Warn("x402 v2: the mint of a token price does not exist on the payment network: no payment in it can land",
			"currency", row.Currency, "mint", mint, "network", p.cfg.Network)
		return false
	}
	ata, err := associatedTokenAccount(p.wallet, mint, prog)
	if err != nil {
		return false
	}
	if _, ok, err = p.chain.accountOwner(ctx, ata); err != nil {
		p.log.Warn("x402 v2: could not look up the wallet's token account", "currency", row.Currency, "account", ata, "err", err)
		return false
	}
	if !ok {
		p.log.Warn("x402 v2: the wallet has no token account of a mint a skill is priced in: every payment in it is refused until it exists",
			"currency", row.Currency, "mint", mint, "wallet", p.cfg.Wallet, "account", ata,
			"create_with", "spl-token create-account "+mint.String()+" --owner "+p.cfg.Wallet+" --url "+clusterMoniker(p.cfg))
	}
	return ok
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
