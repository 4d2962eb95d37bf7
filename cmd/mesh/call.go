package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/interop"
)

// callOptions are the flags of mesh call.
type callOptions struct {
	data, nodeURL, keyFile, walletFile, rpcURL, apiKey, genesis, proof, nonce string
	maxLamports                                                               uint64
	timeout                                                                   time.Duration
}

// defaultCallTimeout covers resolving, paying at finalized commitment and
// the client's proof retries (interop.DefaultProofWait).
const defaultCallTimeout = 2 * time.Minute

func callCmd() *cobra.Command {
	var o callOptions
	c := &cobra.Command{
		Use:   "call AGENT-ID SKILL",
		Short: "Call an agent's skill, paying on 402 within --max-lamports",
		Long: `Resolve AGENT-ID through a mesh node, fetch its card, and call SKILL with
--data signed by --key (Mesh-Sig; v1-bound, naming the agent and the
--api-key, when the agent's card lists it, so that the agent cannot replay
the call to another). When the agent answers 402 the call is
paid from the wallet (--wallet-key FILE or the MESH_WALLET_KEY environment
variable) on the card's network, to the card's wallet, if the price is at
most --max-lamports and the --rpc endpoint serves that network; then it is
retried with the proof. The answer is printed on stdout; what was paid on
stderr.

A payment is bound to the request it paid for: the same SKILL, --data and
--key. When a paid call is not served (the agent could not see the payment
in time, the call timed out or was interrupted), the transaction and nonce
are printed: run the same command with --proof SIG --nonce NONCE to be
served without paying again. Without --key the call is signed by a
throw-away key, and such a payment cannot be retried.

An agent whose card offers A2A and no HTTP skill endpoint is called over
A2A (JSON-RPC message/send), and paid the same way.

mesh call pays in lamports only. A skill priced only in SPL tokens (USDC,
wSOL) is paid with x402 v2, which mesh call does not speak: it prints the
prices and fails; pay such a skill with an x402 v2 client (the x402
project's @x402/fetch with @x402/svm).`,
		Example: `  mesh call echo-1 echo --data '{"text":"hi"}' --max-lamports 10000 --key caller.key \
    --wallet-key ~/.config/solana/id.json --rpc https://api.devnet.solana.com
  mesh call echo-1 echo --data '{"text":"hi"}' --key caller.key --proof 5hG... --nonce x4_AQ...`,
		Args:    cobra.ExactArgs(2),
		PreRunE: applyEnvHook,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			ctx, cancel := context.WithTimeout(ctx, o.timeout)
			defer cancel()
			return runCall(ctx, cmd.OutOrStdout(), cmd.ErrOrStderr(), o, args[0], args[1])
		},
	}
	f := c.Flags()
	f.StringVar(&o.data, "data", "{}", "JSON input of the skill")
	f.StringVar(&o.nodeURL, "node", "http://127.0.0.1:7777", "any mesh node, to resolve the agent")
	f.StringVarP(&o.keyFile, "key", "k", "", "identity key file that signs the call; empty: a throw-away key")
	f.StringVar(&o.walletFile, "wallet-key", "", "wallet keypair file (Solana CLI JSON); or put the key in env MESH_WALLET_KEY")
	f.StringVar(&o.rpcURL, "rpc", "", "Solana JSON-RPC URL used to pay")
	f.StringVar(&o.genesis, "genesis-hash", "", "genesis hash --rpc must answer; empty: the known hash of the agent's network (set it only for a local validator)")
	f.StringVar(&o.apiKey, "api-key", "", "prepaid api_key (tk_...) sent as X-Api-Key")
	f.Uint64Var(&o.maxLamports, "max-lamports", 0, "most lamports to pay for this call; 0 pays nothing")
	f.StringVar(&o.proof, "proof", "", "signature of a payment already made for this same call: send it as X-Payment-Proof instead of paying")
	f.StringVar(&o.nonce, "nonce", "", "with --proof: the nonce the payment's memo carries")
	f.DurationVar(&o.timeout, "timeout", defaultCallTimeout, "give up after this long")
	declareEnv(f, map[string]string{"node": "MESH_NODE", "key": "MESH_KEY", "wallet-key": "MESH_WALLET_KEY_FILE", "rpc": "MESH_RPC",
		"genesis-hash": "MESH_GENESIS_HASH", "api-key": "MESH_API_KEY", "max-lamports": "MESH_MAX_LAMPORTS", "timeout": "MESH_CALL_TIMEOUT"})
	return c
}

// runCall resolves the agent, calls it (paying, or with --proof) and
// prints the outcome.
func runCall(ctx context.Context, stdout, stderr io.Writer, o callOptions, id, skill string) error {
	key, err := callerKey(o.keyFile)
	if err != nil {
		return err
	}
	wallet, err := loadWallet(o.walletFile)
	if err != nil {
		return err
	}
	cl := &interop.Client{Key: key, Wallet: wallet, MaxLamports: o.maxLamports, APIKey: o.apiKey, GenesisHash: o.genesis}
	if wallet != nil {
		if o.rpcURL == "" {
			return errors.New("a wallet needs --rpc (env MESH_RPC)")
		}
		cl.Chain = interop.NewChain(o.rpcURL, "", 0)
		defer cl.Chain.Close()
	}
	ep, err := cl.Resolve(ctx, o.nodeURL, id)
	if err != nil {
		return err
	}
	card, err := cl.Card(ctx, ep)
	if err != nil {
		return err
	}
	var res *interop.Result
	if o.proof != "" {
		res, err = cl.CallWithProof(ctx, card, skill, []byte(o.data), o.proof, o.nonce)
	} else {
		res, err = cl.Call(ctx, card, skill, []byte(o.data))
	}
	var pe *interop.PaymentError
	if errors.As(err, &pe) {
		for _, of := range pe.Challenge.Offers {
			fmt.Fprintf(stderr, "price: %d lamports (%s) to %s on %s\n", of.Lamports, interop.FormatCoins(of.Lamports), of.PayTo, of.Network)
		}
		for _, r := range pe.Exact {
			fmt.Fprintf(stderr, "price: %s on %s, paid with x402 v2 (mesh call pays in lamports only)\n", r.PriceText(), r.Network)
		}
		if pe.Signature != "" {
			fmt.Fprintf(stderr, "paid: transaction %s for nonce %s, not served yet\n", pe.Signature, pe.Nonce)
			if o.keyFile == "" {
				fmt.Fprintln(stderr, "the call was signed by a throw-away key, so this payment cannot be retried")
			} else {
				fmt.Fprintf(stderr, "retry without paying again: mesh call %s %s --data %s --key %s --proof %s --nonce %s\n",
					id, skill, shellQuote(o.data), shellQuote(o.keyFile), pe.Signature, pe.Nonce)
			}
		}
	}
	if err != nil {
		return err
	}
	switch {
	case res.Signature != "" && o.proof != "":
		fmt.Fprintf(stderr, "served for the payment in transaction %s\n", res.Signature)
	case res.Signature != "":
		fmt.Fprintf(stderr, "paid %d lamports, transaction %s\n", res.Lamports, res.Signature)
	}
	if inv := res.Invoice; inv != nil {
		fmt.Fprintf(stderr, "served on credit; invoice not paid (%s): %d lamports (%s) to %s on %s, memo %s, due %s\n",
			res.InvoiceReason, inv.Lamports, interop.FormatCoins(inv.Lamports), inv.PayTo, inv.Network, inv.Nonce, inv.ExpiresAt.Format(time.RFC3339))
	}
	if d := res.Header.Get(interop.HeaderDebitedLamports); d != "" {
		fmt.Fprintf(stderr, "debited %s lamports from the balance, %s left\n", d, res.Header.Get(interop.HeaderBalanceRemaining))
	}
	if res.Receipt != "" {
		fmt.Fprintf(stderr, "receipt: %s (cite it as \"receipt\" in a feedback report on %s: the report then weighs as a paying customer's)\n", res.Receipt, id)
	}
	fmt.Fprint(stdout, string(res.Body))
	return nil
}

func callerKey(file string) (ed25519.PrivateKey, error) {
	if file == "" {
		return identity.GenerateKey(), nil
	}
	return identity.LoadKey(file)
}

// loadWallet reads the wallet from a file, else from MESH_WALLET_KEY; nil
// when neither is given. The key is never printed.
func loadWallet(file string) (*interop.Wallet, error) {
	if file != "" {
		return interop.LoadWallet(file)
	}
	return interop.WalletFromEnv()
}

// shellQuote quotes s for a POSIX shell, so that a printed command can be
// pasted whatever s holds.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
