package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gagliardetto/solana-go"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/agenttest"
	"github.com/agentmesh/mesh/interop"
	"github.com/agentmesh/mesh/interop/soltest"
	"github.com/agentmesh/mesh/node"
)

// TestCallCommand runs `mesh call` against a node that embeds a paid
// agent on a fake chain: without a wallet it reports the price and fails;
// with one it pays within --max-lamports and prints the answer.
func TestCallCommand(t *testing.T) {
	chain := soltest.New(t)
	provider := interop.NewWallet()
	cfg := node.DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.Agent = &node.AgentConfig{ID: "echo-1", AgentConfig: interop.AgentConfig{
		Card: interop.Card{Name: "Echo"},
		Skills: []interop.Skill{{ID: "echo", Pricing: interop.Prices{interop.Lamports(5000, interop.NetworkDevnet)},
			Handler: func(_ context.Context, in json.RawMessage) (any, error) { return map[string]any{"echo": in}, nil }}},
		Payment: &interop.PaymentConfig{Network: interop.NetworkDevnet, Wallet: provider.Address(), RPCURL: chain.URL},
	}}
	n := agenttest.Start(t, cfg)

	run := func(args ...string) (string, string, error) {
		var out, errOut bytes.Buffer
		root := rootCmd()
		root.SetArgs(args)
		root.SetOut(&out)
		root.SetErr(&errOut)
		err := root.Execute()
		return out.String(), errOut.String(), err
	}
	_, stderr, err := run("call", "echo-1", "echo", "--node", n.URL(), "--data", `{"text":"hi"}`)
	if err == nil || !strings.Contains(stderr, "price: 5000 lamports") || !strings.Contains(err.Error(), "no wallet") {
		t.Fatalf("call without a wallet: %v %q", err, stderr)
	}

	wallet := interop.NewWallet()
	chain.Fund(wallet.PublicKey(), solana.LAMPORTS_PER_SOL)
	wfile := filepath.Join(t.TempDir(), "wallet.json")
	os.WriteFile(wfile, wallet.MarshalKeyFile(), 0o600)
	args := []string{"call", "echo-1", "echo", "--node", n.URL(), "--data", `{"text":"hi"}`, "--wallet-key", wfile, "--rpc", chain.URL}
	if _, _, err := run(append(args, "--max-lamports", "4999")...); err == nil || !strings.Contains(err.Error(), "over the cap") {
		t.Fatalf("over the cap: %v", err)
	}
	// The cap may come from the environment; a malformed one is an error,
	// not a silent default. The flags given below override it.
	t.Setenv("MESH_MAX_LAMPORTS", "lots")
	if _, _, err := run(args...); err == nil || !strings.Contains(err.Error(), "MESH_MAX_LAMPORTS") {
		t.Fatalf("a malformed MESH_MAX_LAMPORTS: %v", err)
	}
	t.Setenv("MESH_MAX_LAMPORTS", "4999")
	if _, _, err := run(args...); err == nil || !strings.Contains(err.Error(), "over the cap") {
		t.Fatalf("over the cap from MESH_MAX_LAMPORTS: %v", err)
	}
	stdout, stderr, err := run(append(args, "--max-lamports", "5000")...)
	if err != nil || !strings.Contains(stdout, `"text":"hi"`) || !strings.Contains(stderr, "paid 5000 lamports") {
		t.Fatalf("paid call: %v\nstdout %s\nstderr %s", err, stdout, stderr)
	}
	if strings.Contains(stdout+stderr, string(wallet.MarshalKeyFile())) {
		t.Fatal("the wallet key was printed")
	}
	if got := chain.Balance(provider.PublicKey()); got != 5000 {
		t.Fatalf("provider got %d lamports", got)
	}

	// The agent cannot check payments (its RPC fails) until the call times
	// out: the payment is named, and the same call with --proof is served
	// without paying again.
	keyFile := filepath.Join(t.TempDir(), "caller.key")
	if _, err := identity.LoadOrCreateKey(keyFile); err != nil {
		t.Fatal(err)
	}
	args = append(args, "--max-lamports", "5000", "--key", keyFile)
	chain.Fail("getTransaction", soltest.RPCError)
	_, stderr, err = run(append(args, "--timeout", "5s")...)
	m := regexp.MustCompile(`paid: transaction (\S+) for nonce (\S+),`).FindStringSubmatch(stderr)
	if err == nil || m == nil || !strings.Contains(stderr, "--proof "+m[1]) {
		t.Fatalf("paid call not served in time: %v\n%s", err, stderr)
	}
	chain.Heal()
	stdout, stderr, err = run(append(args, "--proof", m[1], "--nonce", m[2])...)
	if err != nil || !strings.Contains(stdout, `"text":"hi"`) || !strings.Contains(stderr, "served for the payment in transaction "+m[1]) {
		t.Fatalf("retry with --proof: %v\nstdout %s\nstderr %s", err, stdout, stderr)
	}
	if got := chain.Balance(provider.PublicKey()); got != 10_000 {
		t.Fatalf("provider got %d lamports for two calls", got)
	}
}

// TestCallTokensOnly: for a skill priced only in USDC, mesh call, which
// pays in lamports, pays nothing: it prints the price and names what pays
// it (an x402 v2 client).
func TestCallTokensOnly(t *testing.T) {
	chain := soltest.New(t)
	cfg := node.DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.Agent = &node.AgentConfig{ID: "usdc-1", AgentConfig: interop.AgentConfig{
		Card: interop.Card{Name: "Echo in USDC"},
		Skills: []interop.Skill{{ID: "echo", Pricing: interop.Prices{interop.Token(10_000, interop.CurrencyUSDC, "", interop.NetworkDevnet)},
			Handler: func(_ context.Context, in json.RawMessage) (any, error) { return map[string]any{"echo": in}, nil }}},
		Payment: &interop.PaymentConfig{Network: interop.NetworkDevnet, Wallet: interop.NewWallet().Address(), RPCURL: chain.URL,
			Modes: []string{interop.ModeX402}, FeePayer: interop.NewWallet()},
	}}
	n := agenttest.Start(t, cfg)
	wallet := interop.NewWallet()
	chain.Fund(wallet.PublicKey(), solana.LAMPORTS_PER_SOL)
	wfile := filepath.Join(t.TempDir(), "wallet.json")
	os.WriteFile(wfile, wallet.MarshalKeyFile(), 0o600)
	var out, errOut bytes.Buffer
	root := rootCmd()
	root.SetArgs([]string{"call", "usdc-1", "echo", "--node", n.URL(), "--wallet-key", wfile, "--rpc", chain.URL, "--max-lamports", "1000000"})
	root.SetOut(&out)
	root.SetErr(&errOut)
	err := root.Execute()
	if err == nil || !strings.Contains(errOut.String(), "price: 0.01 USDC to") || !strings.Contains(err.Error(), "@x402/fetch") || out.Len() != 0 {
		t.Fatalf("mesh call of a skill priced only in USDC: %v\nstdout %s\nstderr %s", err, out.String(), errOut.String())
	}
	if got := chain.Balance(wallet.PublicKey()); got != solana.LAMPORTS_PER_SOL {
		t.Fatalf("the wallet holds %d lamports", got)
	}
}

// TestShellQuote: the retry command mesh call prints after a paid call
// failed pastes into a shell as the same arguments, whatever the data.
func TestShellQuote(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{`{"text":"it's"}`, `'`, `a b $HOME "q" \n`, ``} {
		out, err := exec.Command(sh, "-c", "printf %s "+shellQuote(s)).Output()
		if err != nil || string(out) != s {
			t.Errorf("%q through the shell: %q %v", s, out, err)
		}
	}
}
