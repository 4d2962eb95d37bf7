package interop

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/rpc"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/npmtest"
)

// litesvmDir is the JSON-RPC shim over LiteSVM (npm's litesvm: the real
// Solana runtime in process).
const litesvmDir = "testdata/litesvm-rpc"

// npmPackage is npmtest.Require.
var npmPackage = npmtest.Require

// startLiteSVM runs the shim and returns its URL and genesis hash (see
// npmPackage for what it needs).
func startLiteSVM(t testing.TB) (string, string) {
	t.Helper()
	npmPackage(t, litesvmDir, "litesvm")
	cmd := exec.Command("node", "server.mjs")
	cmd.Dir = litesvmDir
	f := startReady(t, cmd, 2)
	return "http://127.0.0.1:" + f[0], f[1]
}

// startReady starts a helper process that prints "ready" and n fields
// once it serves, and returns those fields. It stops with the test: its
// stdin is closed (the helpers exit then) and it is killed.
func startReady(t testing.TB, cmd *exec.Cmd, n int) []string {
	t.Helper()
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() })
	ready := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) == n+1 && f[0] == "ready" {
				ready <- f[1:]
				return
			}
		}
		close(ready)
	}()
	select {
	case f, ok := <-ready:
		if !ok {
			t.Fatalf("%s exited before it was ready", cmd.Args)
		}
		return f
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not start within 60 s", cmd.Args)
	}
	return nil
}

// TestLiteSVMPayAndDeposit pays for a call and funds a prepaid balance on
// the real Solana runtime: the caller's client builds, signs and sends the
// transfer-plus-memo transaction, the provider verifies it through RPC,
// and the deposit poller credits the top-up.
func TestLiteSVMPayAndDeposit(t *testing.T) {
	t.Parallel()
	url, genesis := startLiteSVM(t)
	ctx := context.Background()
	h := newHarnessOn(t, url, genesis)
	rpcc := rpc.New(url)
	// The provider wallet must exist (rent-exempt) before small payments land.
	for _, w := range []*Wallet{h.provider} {
		if _, err := rpcc.RequestAirdrop(ctx, w.PublicKey(), solana.LAMPORTS_PER_SOL, rpc.CommitmentFinalized); err != nil {
			t.Fatal(err)
		}
	}
	payer := NewWallet()
	if _, err := rpcc.RequestAirdrop(ctx, payer.PublicKey(), 2*solana.LAMPORTS_PER_SOL, rpc.CommitmentFinalized); err != nil {
		t.Fatal(err)
	}
	chain := NewChain(url, CommitmentFinalized, 10*time.Second)
	defer chain.Close()
	c := &Client{Key: identity.GenerateKey(), Wallet: payer, Chain: chain, MaxLamports: testPrice, Now: h.clock.Now, GenesisHash: genesis}
	card, err := c.Card(ctx, h.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := chain.Balance(ctx, h.provider.PublicKey())
	res, err := c.Call(ctx, card, "echo", []byte(`{"on":"litesvm"}`))
	if err != nil || res.Status != 200 || res.Signature == "" {
		t.Fatalf("paid call: %+v %v", res, err)
	}
	after, _ := chain.Balance(ctx, h.provider.PublicKey())
	if after-before != testPrice {
		t.Fatalf("provider received %d lamports, want %d", after-before, testPrice)
	}
	// The same proof again, by the payer for the same request: served from
	// the entitlement, nothing charged. Anyone else is refused.
	if r := h.call(c.Key, "POST", "/v1/echo", `{"on":"litesvm"}`, HeaderPaymentProof, res.Signature); r.status != 200 || r.header.Get(HeaderPaymentReplay) != "true" {
		t.Fatalf("replay: %d %s", r.status, r.raw)
	}
	if r := h.withProof(solana.MustSignatureFromBase58(res.Signature), ""); r.status != 402 || r.body["code"] != "payment_binding_mismatch" {
		t.Fatalf("replay by another caller: %d %s", r.status, r.raw)
	}

	top := h.deposit(c, card, 3*testPrice)
	bal, err := c.Balance(ctx, card, top.APIKey)
	if err != nil || bal.Lamports != 3*testPrice {
		t.Fatalf("balance after deposit: %+v %v", bal, err)
	}
	c.APIKey, c.Wallet = top.APIKey, nil
	res, err = c.Call(ctx, card, "echo", []byte(`{}`))
	if err != nil || res.Header.Get(HeaderBalanceRemaining) != "10000" {
		t.Fatalf("call on the deposit: %+v %v", res, err)
	}
}
