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

// callFixture is a node that embeds a paid agent (echo-1, 5,000 lamports
// a call) on a fake chain, and the arguments of mesh call with a funded
// wallet.
type callFixture struct {
	chain    *soltest.Chain
	provider *interop.Wallet
	args     []string
	key      []byte // the wallet's key file
	node     string // the node's URL
}

func newCallFixture(t *testing.T) *callFixture {
	t.Helper()
	f := &callFixture{chain: soltest.New(t), provider: interop.NewWallet()}
	cfg := node.DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.Agent = &node.AgentConfig{ID: "echo-1", AgentConfig: interop.AgentConfig{
		Card: interop.Card{Name: "Echo"},
		Skills: []interop.Skill{{ID: "echo", Pricing: interop.Prices{interop.Lamports(5000, interop.NetworkDevnet)},
			Handler: func(_ context.Context, in json.RawMessage) (any, error) { return map[string]any{"echo": in}, nil }}},
		Payment: &interop.PaymentConfig{Network: interop.NetworkDevnet, Wallet: f.provider.Address(), RPCURL: f.chain.URL},
	}}
	f.node = agenttest.Start(t, cfg).URL()
	wallet := interop.NewWallet()
	f.chain.Fund(wallet.PublicKey(), solana.LAMPORTS_PER_SOL)
	wfile := filepath.Join(t.TempDir(), "wallet.json")
	f.key = wallet.MarshalKeyFile()
	os.WriteFile(wfile, f.key, 0o600)
	f.args = []string{"call", "echo-1", "echo", "--node", f.node, "--data", `{"text":"hi"}`, "--wallet-key", wfile, "--rpc", f.chain.URL}
	return f
}

// runCLI runs mesh with args and returns its output, its error output
// and its error.
func runCLI(args ...string) (string, string, error) {
	var out, errOut bytes.Buffer
	root := rootCmd()
	root.SetArgs(args)
	root.SetOut(&out)
	root.SetErr(&errOut)
	err := root.Execute()
	return out.String(), errOut.String(), err
}

// TestCallCommand runs `mesh call` against a node that embeds a paid
// agent on a fake chain: without a wallet it reports the price and fails;
// with one it pays within --max-lamports and prints the answer.
func TestCallCommand(t *testing.T) {
	t.Parallel()
	f := newCallFixture(t)
	chain, provider, args := f.chain, f.provider, f.args
	_, stderr, err := runCLI("call", "echo-1", "echo", "--node", f.node, "--data", `{"text":"hi"}`)
	if err == nil || !strings.Contains(stderr, "price: 5000 lamports") || !strings.Contains(err.Error(), "no wallet") {
		t.Fatalf("call without a wallet: %v %q", err, stderr)
	}
	if _, _, err := runCLI(append(args, "--max-lamports", "4999")...); err == nil || !strings.Contains(err.Error(), "over the cap") {
		t.Fatalf("over the cap: %v", err)
	}
	stdout, stderr, err := runCLI(append(args, "--max-lamports", "5000")...)
	if err != nil || !strings.Contains(stdout, `"text":"hi"`) || !strings.Contains(stderr, "paid 5000 lamports") {
		t.Fatalf("paid call: %v\nstdout %s\nstderr %s", err, stdout, stderr)
	}
	if strings.Contains(stdout+stderr, string(f.key)) {
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
	_, stderr, err = runCLI(append(args, "--timeout", "5s")...)
	m := regexp.MustCompile(`paid: transaction (\S+) for nonce (\S+),`).FindStringSubmatch(stderr)
	if err == nil || m == nil || !strings.Contains(stderr, "--proof "+m[1]) {
		t.Fatalf("paid call not served in time: %v\n%s", err, stderr)
	}
	chain.Heal()
	stdout, stderr, err = runCLI(append(args, "--proof", m[1], "--nonce", m[2])...)
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
	t.Parallel()
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
	out, errOut, err := runCLI("call", "usdc-1", "echo", "--node", n.URL(), "--wallet-key", wfile, "--rpc", chain.URL, "--max-lamports", "1000000")
	if err == nil || !strings.Contains(errOut, "price: 0.01 USDC to") || !strings.Contains(err.Error(), "@x402/fetch") || out != "" {
		t.Fatalf("mesh call of a skill priced only in USDC: %v\nstdout %s\nstderr %s", err, out, errOut)
	}
	if got := chain.Balance(wallet.PublicKey()); got != solana.LAMPORTS_PER_SOL {
		t.Fatalf("the wallet holds %d lamports", got)
	}
}

// TestCallCapFromEnvironment: the cap of mesh call may come from the
// environment (MESH_MAX_LAMPORTS); a malformed one is an error, not a
// silent default.
func TestCallCapFromEnvironment(t *testing.T) { // not parallel: it sets the environment
	f := newCallFixture(t)
	t.Setenv("MESH_MAX_LAMPORTS", "lots")
	if _, _, err := runCLI(f.args...); err == nil || !strings.Contains(err.Error(), "MESH_MAX_LAMPORTS") {
		t.Fatalf("a malformed MESH_MAX_LAMPORTS: %v", err)
	}
	t.Setenv("MESH_MAX_LAMPORTS", "4999")
	if _, _, err := runCLI(f.args...); err == nil || !strings.Contains(err.Error(), "over the cap") {
		t.Fatalf("over the cap from MESH_MAX_LAMPORTS: %v", err)
	}
}

// TestShellQuote: the retry command mesh call prints after a paid call
// failed pastes into a shell as the same arguments, whatever the data.
func TestShellQuote(t *testing.T) {
	t.Parallel()
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
