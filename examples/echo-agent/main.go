// Command echo-agent is a paid echo agent: a Go program that embeds a mesh
// node, declares its card and one skill priced in lamports, and lets the
// node serve, register and enforce payment.
//
//	go run ./examples/echo-agent --id echo-1 --wallet <provider address> \
//	    --rpc https://api.devnet.solana.com --bootstrap /ip4/.../p2p/...
//
// With --free the skill is free and the agent needs no wallet and no
// Solana RPC: it runs offline. --card prints the card the agent serves
// (GET /.well-known/agent-card.json) and exits; with --a2a-version 1.0 the
// card an A2A 1.0 client is served.
//
//	go run ./examples/echo-agent --free --card
//
// A2A clients of both versions call it at its base URL: 1.0's SendMessage,
// GetTask, CancelTask and ListTasks, 0.3's message/send, tasks/get and
// tasks/cancel (see docs/api.md, "POST / (A2A JSON-RPC)").
//
// --price-usdc (and --price-wsol) add pricing rows in SPL tokens, which
// the x402 project's own clients pay (x402 v2, the exact scheme): the
// agent co-signs their transfers with the fee payer key in
// --fee-payer-key (a Solana CLI keypair file; never the key itself on the
// command line), or has the x402 facilitator at --facilitator do it.
//
//	go run ./examples/echo-agent --wallet <address> --price-usdc 0.01 --fee-payer-key fee-payer.json
//
// With --price 0 echo is priced only in the tokens: its 402 offers nothing
// in lamports, so only x402 v2 clients pay it (not `mesh call`).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/interop"
	"github.com/agentmesh/mesh/node"
)

// options are the example's flags.
type options struct {
	id, dataDir, listen, bootstrap, wallet, rpc, network, genesis, a2aVersion string
	price, priceWSOL                                                          uint64
	priceUSDC, feePayerKey, facilitator                                       string
	free, card                                                                bool
}

// echo is the skill: it answers its input.
func echo(ctx context.Context, in json.RawMessage) (any, error) {
	return map[string]any{"echo": in, "paid_by": interop.CallerFrom(ctx).PaidBy}, nil
}

// config is the whole embedding: a node config with the agent's identity
// key, its card, its skill and how it is paid.
func config(o options) (node.Config, error) {
	key, err := identity.LoadOrCreateKey(o.dataDir + "/agent.key")
	if err != nil {
		return node.Config{}, err
	}
	cfg := node.DefaultConfig()
	cfg.DataDir, cfg.HTTPAddr, cfg.Key = o.dataDir, o.listen, key
	if o.bootstrap != "" {
		cfg.Bootstrap = strings.Split(o.bootstrap, ",")
	}
	pricing, err := prices(o)
	if err != nil {
		return node.Config{}, err
	}
	cfg.Agent = &node.AgentConfig{
		ID: o.id,
		AgentConfig: interop.AgentConfig{
			Card: interop.Card{Name: "Echo", Description: "Answers what it is sent."},
			Skills: []interop.Skill{{
				ID: "echo", Name: "Echo", Description: "Returns its JSON input.",
				Examples: []string{`{"text":"hello"}`}, Tags: []string{"echo", "test"},
				Pricing: pricing,
				Handler: echo,
			}},
			Payment: &interop.PaymentConfig{
				Network: o.network, Wallet: o.wallet, RPCURL: o.rpc, GenesisHash: o.genesis,
				Modes: []string{interop.ModeX402, interop.ModeDeposit}, FreeCallsPerDay: 5,
				FeePayerKeyFile: o.feePayerKey, FacilitatorURL: o.facilitator,
			},
		},
	}
	if o.free {
		cfg.Agent.Skills[0].Pricing, cfg.Agent.Payment = interop.Prices{interop.Free()}, nil
	}
	return cfg, nil
}

// prices are echo's pricing rows: lamports (unless --price 0), and the
// token rows asked for.
func prices(o options) (interop.Prices, error) {
	var rows interop.Prices
	if o.price > 0 {
		rows = append(rows, interop.Lamports(o.price, o.network))
	}
	if o.priceUSDC != "" {
		n, err := interop.ParseUnits(o.priceUSDC, 6)
		if err != nil {
			return nil, fmt.Errorf("--price-usdc: %w", err)
		}
		rows = append(rows, interop.Token(n, interop.CurrencyUSDC, "", o.network))
	}
	if o.priceWSOL > 0 {
		rows = append(rows, interop.Token(o.priceWSOL, interop.CurrencyWSOL, "", o.network))
	}
	if len(rows) == 0 && !o.free {
		return nil, fmt.Errorf("--price 0 needs --price-usdc or --price-wsol (a skill priced only in tokens), or --free")
	}
	return rows, nil
}

func main() {
	o, err := parseFlags(os.Args[1:])
	if errors.Is(err, pflag.ErrHelp) {
		return
	}
	if err == nil {
		err = run(o)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "echo-agent:", err)
		os.Exit(1)
	}
}

// parseFlags reads the command line.
func parseFlags(args []string) (options, error) {
	var o options
	return o, flags(&o).Parse(args)
}

// flags are the example's flags, set into o. --http, the earlier name of
// --listen, still works for one release, hidden from the help.
func flags(o *options) *pflag.FlagSet {
	f := pflag.NewFlagSet("echo-agent", pflag.ContinueOnError)
	f.StringVar(&o.id, "id", "echo-1", "agent id")
	f.StringVar(&o.dataDir, "data", "./echo-data", "data directory")
	f.StringVar(&o.listen, "listen", "127.0.0.1:8080", "HTTP listen address (port 0: any free port)")
	f.StringVar(&o.listen, "http", "127.0.0.1:8080", "")
	f.MarkDeprecated("http", "use --listen")
	f.StringVar(&o.bootstrap, "bootstrap", "", "bootstrap multiaddrs, comma-separated (empty: the node is its own directory)")
	f.StringVar(&o.wallet, "wallet", "", "provider wallet address (base58) that receives payments")
	f.StringVar(&o.rpc, "rpc", "https://api.devnet.solana.com", "Solana JSON-RPC URL")
	f.StringVar(&o.network, "network", interop.NetworkDevnet, "network tag: chain-devnet or chain")
	f.StringVar(&o.genesis, "genesis", "", "expected genesis hash (only for a local validator)")
	f.Uint64Var(&o.price, "price", 5000, "price of one echo in lamports (0 with --price-usdc or --price-wsol: priced only in tokens, which only x402 v2 clients pay)")
	f.StringVar(&o.priceUSDC, "price-usdc", "", "also price one echo in USDC, a decimal (0.01 is a cent): x402 v2 clients pay it")
	f.Uint64Var(&o.priceWSOL, "price-wsol", 0, "also price one echo in wrapped SOL, in lamports: x402 v2 clients pay it")
	f.StringVar(&o.feePayerKey, "fee-payer-key", "", "Solana keypair file of the fee payer that co-signs x402 v2 payments (needed by --price-usdc and --price-wsol)")
	f.StringVar(&o.facilitator, "facilitator", "", "x402 facilitator URL that co-signs x402 v2 payments instead of --fee-payer-key")
	f.BoolVar(&o.free, "free", false, "serve echo free: no wallet, no payment, no Solana RPC needed")
	f.BoolVar(&o.card, "card", false, "print the card the agent serves at /.well-known/agent-card.json, then exit")
	f.StringVar(&o.a2aVersion, "a2a-version", "", "with --card: the A2A-Version to ask the card for (1.0: the card in A2A 1.0's shape; empty: the full card)")
	return f
}

func run(o options) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, err := config(o)
	if err != nil {
		return err
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	if o.card {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	n, err := node.New(cfg)
	if err != nil {
		return err
	}
	if err := n.Start(ctx); err != nil {
		return err
	}
	defer n.Close()
	if o.card {
		return printCard(ctx, os.Stdout, n.URL(), o.a2aVersion)
	}
	fmt.Printf("echo agent %s at %s (did %s)\n", o.id, n.URL(), n.DID())
	<-ctx.Done()
	return nil
}

// printCard prints the card the agent at url serves, as served to a
// client that asks for A2A version (none: the full card).
func printCard(ctx context.Context, w io.Writer, url, version string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/.well-known/agent-card.json", nil)
	if err != nil {
		return err
	}
	if version != "" {
		req.Header.Set(interop.HeaderA2AVersion, version)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /.well-known/agent-card.json: %s", res.Status)
	}
	_, err = io.Copy(w, res.Body)
	return err
}
