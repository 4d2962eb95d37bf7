package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gagliardetto/solana-go"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/agenttest"
	"github.com/agentmesh/mesh/interop"
	"github.com/agentmesh/mesh/interop/soltest"
)

// TestEchoAgent runs the example's configuration on a fake chain: a
// signed caller gets its free calls, then pays per call.
func TestEchoAgent(t *testing.T) {
	chain := soltest.New(t)
	provider := interop.NewWallet()
	cfg, err := config(options{id: "echo-1", dataDir: t.TempDir(), listen: "127.0.0.1:0", wallet: provider.Address(),
		rpc: chain.URL, network: interop.NetworkDevnet, price: 5000})
	if err != nil {
		t.Fatal(err)
	}
	n := agenttest.Start(t, cfg)

	wallet := interop.NewWallet()
	chain.Fund(wallet.PublicKey(), solana.LAMPORTS_PER_SOL)
	c := &interop.Client{Key: identity.GenerateKey(), Wallet: wallet, Chain: interop.NewChain(chain.URL, "", time.Second), MaxLamports: 5000}
	defer c.Chain.Close()
	var paidBy []string
	for range 6 {
		res, _, err := c.CallAgent(context.Background(), n.URL(), "echo-1", "echo", []byte(`{"text":"hello"}`))
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			Echo   map[string]string `json:"echo"`
			PaidBy string            `json:"paid_by"`
		}
		if err := json.Unmarshal(res.Body, &out); err != nil || out.Echo["text"] != "hello" {
			t.Fatalf("answer %s", res.Body)
		}
		paidBy = append(paidBy, out.PaidBy)
	}
	if paidBy[0] != "free" || paidBy[4] != "free" || paidBy[5] != "x402" {
		t.Fatalf("paid by %v: want 5 free calls, then x402", paidBy)
	}
	if got := chain.Balance(provider.PublicKey()); got != 5000 {
		t.Fatalf("provider got %d", got)
	}
}

// TestEchoAgentFree: with --free the agent starts without a wallet or an
// RPC, prints its card (an A2A card of both versions, and A2A 1.0's own
// form) and answers an A2A message of each version.
func TestEchoAgentFree(t *testing.T) {
	cfg, err := config(options{id: "echo-free", dataDir: t.TempDir(), listen: "127.0.0.1:0", free: true,
		rpc: "http://127.0.0.1:1", network: interop.NetworkDevnet, price: 5000})
	if err != nil {
		t.Fatal(err)
	}
	n := agenttest.Start(t, cfg)
	var out bytes.Buffer
	if err := printCard(context.Background(), &out, n.URL(), ""); err != nil {
		t.Fatal(err)
	}
	var card interop.Card
	if err := json.Unmarshal(out.Bytes(), &card); err != nil || card.Payment != nil || card.ProtocolVersion != interop.A2AVersion ||
		!card.Skills[0].Pricing[0].IsFree() || len(card.SupportedInterfaces) != 2 || card.SupportedInterfaces[0].ProtocolVersion != "1.0" {
		t.Fatalf("card %s (%v)", out.Bytes(), err)
	}
	out.Reset()
	if err := printCard(context.Background(), &out, n.URL(), "1.0"); err != nil {
		t.Fatal(err)
	}
	var v1 map[string]any
	if err := json.Unmarshal(out.Bytes(), &v1); err != nil || v1["supportedInterfaces"] == nil || v1["url"] != nil || v1["pricing"] != nil {
		t.Fatalf("1.0 card %s (%v)", out.Bytes(), err)
	}
	for _, c := range []struct{ body, state string }{
		{`{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"kind":"message","messageId":"m1",
		"role":"user","parts":[{"kind":"text","text":"{\"text\":\"hi\"}"}]}}}`, `"state":"completed"`},
		{`{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m1",
		"role":"ROLE_USER","parts":[{"text":"{\"text\":\"hi\"}"}]}}}`, `"state":"TASK_STATE_COMPLETED"`},
	} {
		res, err := http.Post(n.URL()+"/", "application/json", strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if !strings.Contains(string(b), c.state) || !strings.Contains(string(b), `"echo":{"text":"hi"}`) {
			t.Fatalf("A2A echo: %s", b)
		}
	}
}

// TestListenFlagAlias: --http, the earlier name of --listen, still sets
// the listen address, and the help names only --listen.
func TestListenFlagAlias(t *testing.T) {
	for _, args := range [][]string{{"--http", "127.0.0.1:9"}, {"--listen", "127.0.0.1:9"}, {"--http=127.0.0.1:9", "--free"}} {
		o, err := parseFlags(args)
		if err != nil || o.listen != "127.0.0.1:9" {
			t.Errorf("%q: listen %q (%v)", args, o.listen, err)
		}
	}
	if help := flags(&options{}).FlagUsages(); strings.Contains(help, "--http") || !strings.Contains(help, "--listen") {
		t.Errorf("help:\n%s", help)
	}
}

// TestEchoAgentPricedInUSDC: --price-usdc adds a USDC row, which the 402
// offers in x402 v2's PAYMENT-REQUIRED through the fee payer of
// --fee-payer-key; with --price 0 echo is priced in USDC alone: its card
// has that row only and its 402 offers nothing in lamports. A price finer
// than USDC's six decimals is refused, and so is --price 0 alone.
func TestEchoAgentPricedInUSDC(t *testing.T) {
	chain := soltest.New(t)
	provider, feePayer := interop.NewWallet(), interop.NewWallet()
	keyFile := filepath.Join(t.TempDir(), "fee-payer.json")
	if err := os.WriteFile(keyFile, feePayer.MarshalKeyFile(), 0o600); err != nil {
		t.Fatal(err)
	}
	o := options{id: "echo-usdc", listen: "127.0.0.1:0", wallet: provider.Address(), rpc: chain.URL,
		network: interop.NetworkDevnet, priceUSDC: "0.01", feePayerKey: keyFile}
	for _, price := range []uint64{5000, 0} {
		o.price, o.dataDir = price, t.TempDir()
		cfg, err := config(o)
		if err != nil {
			t.Fatal(err)
		}
		n := agenttest.Start(t, cfg)
		res, err := http.Post(n.URL()+"/v1/echo", "application/json", strings.NewReader(`{"text":"hi"}`))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		pr, ok := interop.ParsePaymentRequired(res.Header)
		if res.StatusCode != 402 || !ok || len(pr.Accepts) != 1 {
			t.Fatalf("--price %d: 402: %d %v", price, res.StatusCode, res.Header)
		}
		a := pr.Accepts[0]
		if a.Amount != "10000" || a.Asset != interop.MintUSDCDevnet || a.Network != interop.CAIP2Devnet || a.PayTo != provider.Address() ||
			a.Extra.FeePayer != feePayer.Address() || pr.Resource.URL != n.URL()+"/v1/echo" {
			t.Fatalf("--price %d: PAYMENT-REQUIRED %+v", price, pr)
		}
		_, seedErr := interop.ParseChallenge(res.Header, body)
		wantRows := 2 // lamports and USDC
		if price == 0 {
			wantRows = 1
		}
		if rows := len(n.Agent().Card().Skills[0].Pricing); (price == 0) != (seedErr != nil) || rows != wantRows {
			t.Fatalf("--price %d: %d pricing rows, the seed's challenge %s (%v)", price, rows, body, seedErr)
		}
	}
	o.priceUSDC = "0.0000001"
	if _, err := config(o); err == nil {
		t.Fatal("a price of a tenth of USDC's smallest unit was taken")
	}
	o.priceUSDC = ""
	if _, err := config(o); err == nil || !strings.Contains(err.Error(), "--price-usdc") {
		t.Fatalf("--price 0 alone: %v", err)
	}
}
