package main

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"os"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/interop"
)

func callCmd() *cobra.Command {
	var data, nodeURL, keyFile, walletFile, rpcURL, apiKey string
	var maxLamports uint64
	c := &cobra.Command{
		Use:   "call AGENT-ID SKILL",
		Short: "Call an agent's skill, paying on 402 within --max-lamports",
		Long: `Resolve AGENT-ID through a mesh node, fetch its card, and call SKILL with
--data signed by --key (Mesh-Sig). When the agent answers 402 the call is
paid from the wallet (--wallet-key FILE or the MESH_WALLET_KEY environment
variable) on the card's network, to the card's wallet, if the price is at
most --max-lamports; then it is retried with the proof. The answer is
printed on stdout; what was paid on stderr.`,
		Example: `  mesh call echo-1 echo --data '{"text":"hi"}' --max-lamports 10000 \
    --wallet-key ~/.config/solana/id.json --rpc https://api.devnet.solana.com`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			key, err := callerKey(keyFile)
			if err != nil {
				return err
			}
			wallet, err := loadWallet(walletFile)
			if err != nil {
				return err
			}
			cl := &interop.Client{Key: key, Wallet: wallet, MaxLamports: maxLamports, APIKey: apiKey}
			if wallet != nil {
				if rpcURL == "" {
					return errors.New("a wallet needs --rpc (env MESH_RPC)")
				}
				cl.Chain = interop.NewChain(rpcURL, "", 0)
				defer cl.Chain.Close()
			}
			res, _, err := cl.CallAgent(cmd.Context(), nodeURL, args[0], args[1], []byte(data))
			var pe *interop.PaymentError
			if errors.As(err, &pe) {
				for _, o := range pe.Challenge.Offers {
					fmt.Fprintf(cmd.ErrOrStderr(), "price: %d lamports (%s) to %s on %s\n", o.Lamports, interop.FormatCoins(o.Lamports), o.PayTo, o.Network)
				}
			}
			if err != nil {
				return err
			}
			if res.Signature != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "paid %d lamports, transaction %s\n", res.Lamports, res.Signature)
			}
			if d := res.Header.Get(interop.HeaderDebitedLamports); d != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "debited %s lamports from the balance, %s left\n", d, res.Header.Get(interop.HeaderBalanceRemaining))
			}
			fmt.Fprint(cmd.OutOrStdout(), string(res.Body))
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&data, "data", "{}", "JSON input of the skill")
	f.StringVar(&nodeURL, "node", env("MESH_NODE", "http://127.0.0.1:7777"), "any mesh node, to resolve the agent (env MESH_NODE)")
	f.StringVarP(&keyFile, "key", "k", env("MESH_KEY", ""), "identity key file that signs the call; empty: a throw-away key (env MESH_KEY)")
	f.StringVar(&walletFile, "wallet-key", env("MESH_WALLET_KEY_FILE", ""), "wallet keypair file (Solana CLI JSON); or put the key in env MESH_WALLET_KEY (env MESH_WALLET_KEY_FILE)")
	f.StringVar(&rpcURL, "rpc", env("MESH_RPC", ""), "Solana JSON-RPC URL used to pay (env MESH_RPC)")
	f.StringVar(&apiKey, "api-key", env("MESH_API_KEY", ""), "prepaid api_key (tk_...) sent as X-Api-Key (env MESH_API_KEY)")
	f.Uint64Var(&maxLamports, "max-lamports", envUint("MESH_MAX_LAMPORTS", 0), "most lamports to pay for this call; 0 pays nothing (env MESH_MAX_LAMPORTS)")
	return c
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

func envUint(name string, def uint64) uint64 {
	if v, ok := os.LookupEnv(name); ok {
		if n, err := strconv.ParseUint(v, 10, 64); err == nil {
			return n
		}
	}
	return def
}
