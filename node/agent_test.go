package node

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gagliardetto/solana-go"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/testkit"
	"github.com/agentmesh/mesh/interop"
	"github.com/agentmesh/mesh/interop/soltest"
)

func echoAgent(id string, chain *soltest.Chain, wallet string) *AgentConfig {
	return &AgentConfig{ID: id, AgentConfig: interop.AgentConfig{
		Card: interop.Card{Name: "Echo", Description: "echoes its input"},
		Skills: []interop.Skill{{ID: "echo", Name: "Echo", Examples: []string{`{"text":"hi"}`},
			Pricing: interop.Prices{interop.Lamports(5000, interop.NetworkDevnet)},
			Handler: func(_ context.Context, in json.RawMessage) (any, error) { return map[string]any{"echo": in}, nil }}},
		Payment: &interop.PaymentConfig{Network: interop.NetworkDevnet, Wallet: wallet, RPCURL: chain.URL,
			Modes: []string{interop.ModeX402, interop.ModeDeposit}},
	}}
}

// TestEmbeddedAgentPaidThroughMesh: an agent embedded in a mesh node
// registers through its node (forwarded to the bootstrap), and a caller
// that knows only the bootstrap resolves it, reads its card, pays on 402
// and gets the answer.
func TestEmbeddedAgentPaidThroughMesh(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	chain := soltest.New(t)
	provider := interop.NewWallet()
	agentKey := identity.GenerateKey()
	dir := t.TempDir()
	cfg := m.config(dir, RoleNode)
	cfg.Key = agentKey // the agent's identity is the node's
	cfg.Agent = echoAgent("echo-1", chain, provider.Address())
	n := m.start(cfg)
	testkit.Eventually(t, 15*time.Second, n.AgentRegistered, "agent never registered")
	if n.DID() != identity.DIDFromPublicKey(agentKey.Public().(ed25519.PublicKey)) {
		t.Fatal("node key is not the agent key")
	}
	st, v := call(t, m.boot, "GET", "/v1/agents/echo-1", "")
	if st != 200 || v["endpoint"] != n.URL() || v["online"] != true || v["did"] != n.DID() {
		t.Fatalf("bootstrap's view of the agent: %d %v", st, v)
	}
	apiKey, err := os.ReadFile(filepath.Join(dir, "agent-echo-1.apikey"))
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "agent-echo-1.apikey")); fi.Mode().Perm() != 0o600 {
		t.Fatalf("api_key file mode %v", fi.Mode().Perm())
	}

	wallet := interop.NewWallet()
	chain.Fund(wallet.PublicKey(), solana.LAMPORTS_PER_SOL)
	caller := identity.GenerateKey()
	c := &interop.Client{Key: caller, Wallet: wallet, Chain: interop.NewChain(chain.URL, "", 5*time.Second),
		MaxLamports: 10_000, Now: m.clock.Now}
	defer c.Chain.Close()
	res, card, err := c.CallAgent(context.Background(), m.boot.URL(), "echo-1", "echo", []byte(`{"text":"hi"}`))
	if err != nil {
		t.Fatal(err)
	}
	if card.URL != n.URL() || card.Payment.Wallet != provider.Address() {
		t.Fatalf("card %+v", card)
	}
	var out map[string]any
	if json.Unmarshal(res.Body, &out); out["echo"].(map[string]any)["text"] != "hi" || res.Lamports != 5000 {
		t.Fatalf("answer %s (%d lamports)", res.Body, res.Lamports)
	}
	if got := chain.Balance(provider.PublicKey()); got != 5000 {
		t.Fatalf("provider received %d", got)
	}

	// whoami names a registered caller's agent id.
	m.register(m.boot, "caller-1", caller)
	testkit.Eventually(t, 10*time.Second, func() bool { _, v := call(t, n, "GET", "/v1/agents/caller-1", ""); return v["agent_id"] == "caller-1" }, "replica never saw caller-1")
	st, v = m.signedCall(n, caller, "GET", "/v1/whoami", "")
	if st != 200 || v["agent_id"] != "caller-1" || v["verified"] != true {
		t.Fatalf("whoami: %d %v", st, v)
	}

	// The paid call's receipt, cited in a report, weighs as a paying
	// customer's in the weighted view.
	report := `{"success":true,"latency_ms":300,"quality":5,"receipt":"` + res.Receipt + `"}`
	if st, v := m.signedCall(m.boot, caller, "POST", "/v1/agents/echo-1/feedback", report); st != 200 ||
		v["weighted_reputation"].(map[string]any)["paid"] != 1.0 {
		t.Fatalf("feedback citing the receipt: %d %v", st, v)
	}
	// Post-pay trust (whoami's reputation is what post-pay reads) is the
	// weighted view: three fresh keys praising caller-1 do not make it
	// trusted, though the spec's score is perfect.
	for range 3 {
		m.signedCall(m.boot, identity.GenerateKey(), "POST", "/v1/agents/caller-1/feedback", `{"success":true,"latency_ms":300,"quality":5}`)
	}
	testkit.Eventually(t, 10*time.Second, func() bool {
		_, v := call(t, n, "GET", "/v1/agents/caller-1/reputation", "")
		return v["n"] == 3.0
	}, "replica never saw the reports on caller-1")

	_, rp := call(t, n, "GET", "/v1/agents/caller-1/reputation", "")
	st, v = m.signedCall(n, caller, "GET", "/v1/whoami", "")
	if weighted := rp["weighted"].(map[string]any)["score"]; st != 200 || rp["score"] != 1.0 || v["reputation"] != weighted || weighted.(float64) > 0.3 {
		t.Fatalf("whoami reputation %v; spec score %v, weighted %v", v["reputation"], rp["score"], weighted)
	}

	// A restart at the same address reuses the stored api_key: no new
	// registration. (A node that moved re-registers: its endpoint changed.)
	seq := m.boot.clog.Seq()
	cfg.HTTPAddr = n.Addr()
	n.Close()
	n2 := m.start(cfg)
	testkit.Eventually(t, 15*time.Second, n2.AgentRegistered, "agent never came back")
	again, _ := os.ReadFile(filepath.Join(dir, "agent-echo-1.apikey"))
	if string(again) != string(apiKey) {
		t.Fatal("restart issued a new api_key")
	}
	if st, _ := call(t, n2, "GET", "/.well-known/agent.json", ""); st != 200 {
		t.Fatalf("card after restart: %d", st)
	}
	if m.boot.clog.Seq() != seq {
		t.Fatalf("restart wrote %d directory commands", m.boot.clog.Seq()-seq)
	}
}

func TestAgentConfigRefusedByNode(t *testing.T) {
	t.Parallel()
	chain := soltest.New(t)
	cfg := testConfig(t, t.TempDir())
	cfg.Agent = echoAgent("echo-1", chain, interop.NewWallet().Address())
	cfg.Agent.Skills[0].ID = "agents"
	if _, err := New(cfg); err == nil {
		t.Fatal("a skill named agents was accepted")
	}
	cfg.Agent = echoAgent("bad/id", chain, interop.NewWallet().Address())
	if _, err := New(cfg); err == nil {
		t.Fatal("a bad agent id was accepted")
	}
	// A payment RPC on another network makes Start fail cleanly.
	chain.SetGenesis(interop.GenesisMainnet)
	cfg.Agent = echoAgent("echo-1", chain, interop.NewWallet().Address())
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); err == nil {
		t.Fatal("started against a mainnet RPC with a devnet wallet")
	}
	n.Close()
	// Everything Start opened is closed: the bridge's address is free.
	ln, err := net.Listen("tcp", n.Addr())
	if err != nil {
		t.Fatalf("the failed node still holds its HTTP address: %v", err)
	}
	ln.Close()
}

// TestAgentCloseLeavesNoGoroutines: the agent's registration loop, poller
// and RPC connections all end with Close.
func TestAgentCloseLeavesNoGoroutines(t *testing.T) { // not parallel: it counts the process's goroutines
	chain := soltest.New(t)
	provider := interop.NewWallet().Address()
	before := runtime.NumGoroutine()
	for range 2 {
		cfg := testConfig(t, t.TempDir())
		cfg.Agent = echoAgent("echo-1", chain, provider)
		n := startNode(t, cfg)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := n.WaitAgent(ctx); err != nil {
			t.Fatal(err)
		}
		cancel()
		if st, _ := call(t, n, "GET", "/.well-known/agent.json", ""); st != 200 {
			t.Fatalf("card: %d", st)
		}
		n.Close()
		n.Close()
	}
	http.DefaultClient.CloseIdleConnections()
	testkit.Eventually(t, 5*time.Second, func() bool { return runtime.NumGoroutine() <= before }, "goroutines left after Close")
}

// TestAgentSettlementReports: the reports an embedded agent files about a
// post-pay caller carry no latency_ms; the registry takes them, they give
// no speed signal, and a default counts as a failure and as unsettled.
func TestAgentSettlementReports(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	cfg := m.config(t.TempDir(), RoleNode)
	cfg.Agent = echoAgent("echo-1", soltest.New(t), interop.NewWallet().Address())
	n := m.start(cfg)
	testkit.Eventually(t, 15*time.Second, n.AgentRegistered, "agent never registered")
	m.register(m.boot, "caller-1", identity.GenerateKey())
	m.waitCaughtUp(n)
	reg := agentRegistry{n}
	ctx := context.Background()
	for _, rep := range []interop.Report{
		{Success: true, Paid: true, Capability: "echo"},                  // a settled invoice
		{Success: false, Paid: true, Disputed: true, Capability: "echo"}, // a default
	} {
		if err := reg.Report(ctx, "caller-1", rep); err != nil {
			t.Fatalf("report %+v: %v", rep, err)
		}
	}
	testkit.Eventually(t, 5*time.Second, func() bool {
		_, v := call(t, n, "GET", "/v1/agents/caller-1/reputation", "")
		d, _ := v["dims"].(map[string]any)
		return v["n"] == 2.0 && d["speed"] == nil && d["reliability"] == 0.5 && d["settlement"] == 0.5
	}, "settlement reports not rolled up as two reports without speed, one failed and unsettled")

}

// TestTrustedProxyNamesTheClient: behind a trusted proxy, the clients it
// names in X-Forwarded-For each get their own free tier and x402 proof
// checks, and a client that prepends an address of its choosing is still
// counted at the one the proxy saw. A node that trusts no proxy ignores
// the header: every caller on 127.0.0.1 shares one budget.
func TestTrustedProxyNamesTheClient(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		proxies []string
		// what a second client gets once the first used its budget
		secondFree  int
		secondProof string
	}{
		{"trusted proxy", []string{"127.0.0.1"}, 200, "payment_not_visible"},
		{"no trusted proxy", nil, 402, "proof_rate_limited"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := newTestClock() // frozen: no proof check comes back mid-test
			cfg := testConfig(t, t.TempDir())
			cfg.Now = clock.Now
			cfg.TrustedProxies = tc.proxies
			cfg.Agent = echoAgent("echo-1", soltest.New(t), interop.NewWallet().Address())
			cfg.Agent.Payment.FreeCallsPerDay = 1
			n := startNode(t, cfg)
			// The agent registers through the bridge in-process, from 127.0.0.1.
			testkit.Eventually(t, 15*time.Second, n.AgentRegistered, "agent never registered")

			free := func(forwardedFor string) int {
				t.Helper()
				body := `{"text":"hi"}`
				sig := identity.Sign(identity.GenerateKey(), "POST", "/v1/echo", []byte(body), clock.Now())
				st, _ := call(t, n, "POST", "/v1/echo", body, identity.SigHeaderName, sig, "X-Forwarded-For", forwardedFor)
				return st
			}
			if st := free("203.0.113.7"); st != 200 {
				t.Fatalf("first client's free call: %d", st)
			}
			if st := free("198.51.100.9"); st != tc.secondFree {
				t.Fatalf("second client's free call: %d, want %d", st, tc.secondFree)
			}
			if st := free("198.51.100.10, 203.0.113.7"); st != 402 {
				t.Fatalf("first client again, claiming another address: %d, want 402", st)
			}

			_, challenge := call(t, n, "POST", "/v1/echo", `{"x":1}`)
			nonce := challenge["accepts"].([]any)[0].(map[string]any)["nonce"].(string)
			proof := func(forwardedFor string, i int) string {
				t.Helper()
				madeUp := solana.Signature{byte(i), byte(i >> 8), 7}.String() // on no chain
				_, v := call(t, n, "POST", "/v1/echo", `{"x":1}`,
					interop.HeaderPaymentProof, madeUp, interop.HeaderPaymentNonce, nonce, "X-Forwarded-For", forwardedFor)
				return fmt.Sprint(v["code"])
			}
			for i := 0; ; i++ { // the first client uses up its proof checks
				code := proof("203.0.113.7", i)
				if code == "proof_rate_limited" && i > 0 {
					break
				}
				if code != "payment_not_visible" || i == 100 {
					t.Fatalf("first client's proof %d: %s", i, code)
				}
			}
			if code := proof("198.51.100.9", 1000); code != tc.secondProof {
				t.Fatalf("second client's proof: %s, want %s", code, tc.secondProof)
			}
		})
	}
}

// TestCloseDoesNotWaitForeverOnAHungSkill: a skill that ignores its
// context and never returns holds up the node's Close for the shutdown
// graces only (the HTTP server's, then the other requests'), not for ever.
func TestCloseDoesNotWaitForeverOnAHungSkill(t *testing.T) {
	t.Parallel()
	chain := soltest.New(t)
	entered, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	cfg := testConfig(t, t.TempDir())
	cfg.ShutdownGrace = 100 * time.Millisecond // Close gives up on the skill after the graces
	cfg.Agent = echoAgent("hang-1", chain, interop.NewWallet().Address())
	cfg.Agent.Skills = append(cfg.Agent.Skills, interop.Skill{ID: "hang", Name: "Hang", Pricing: interop.Prices{interop.Free()},
		Handler: func(context.Context, json.RawMessage) (any, error) {
			close(entered)
			<-release
			return nil, nil
		}})
	n := startNode(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.WaitAgent(ctx); err != nil {
		t.Fatal(err)
	}
	go http.Post(n.URL()+"/v1/hang", "application/json", strings.NewReader("{}"))
	<-entered
	closed := make(chan struct{})
	go func() { n.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(time.Minute):
		t.Fatal("Close still waits for a skill that never returns")
	}
}
