package interop

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/rpc"
)

// a2aJSDir drives the A2A project's JavaScript client (npm's @a2a-js/sdk)
// against an agent.
const a2aJSDir = "testdata/a2a-js"

// jsStep is one line the JavaScript client prints.
type jsStep struct {
	Step            string          `json:"step"`
	Name            string          `json:"name"`
	ProtocolVersion string          `json:"protocolVersion"`
	Kind            string          `json:"kind"`
	State           string          `json:"state"`
	Status          string          `json:"status"`
	Task            string          `json:"task"`
	Error           *string         `json:"error"`
	Artifact        json.RawMessage `json:"artifact"`
	Accepts         []struct {
		Nonce, PayTo, Lamports string
	} `json:"accepts"`
	Receipts []struct {
		Success     bool   `json:"success"`
		Transaction string `json:"transaction"`
	} `json:"receipts"`
	HTTP struct {
		Headers map[string]string `json:"headers"`
	} `json:"http"`
}

// TestA2AJSClient: the A2A project's own JavaScript client resolves the
// card by its default path, gets a free skill's answer as an artifact, gets
// a paid skill's task awaiting payment, and, once the call is paid on the
// real Solana runtime (LiteSVM), submits the payment and gets the
// completed task; the same submission again is served from the paid answer
// and charges nothing more.
func TestA2AJSClient(t *testing.T) {
	url, genesis := startLiteSVM(t)
	npmPackage(t, a2aJSDir, "@a2a-js/sdk")
	ctx := context.Background()
	h := newHarnessOn(t, url, genesis)
	rpcc := rpc.New(url)
	payer := NewWallet()
	for _, w := range []*Wallet{h.provider, payer} {
		if _, err := rpcc.RequestAirdrop(ctx, w.PublicKey(), solana.LAMPORTS_PER_SOL, rpc.CommitmentFinalized); err != nil {
			t.Fatal(err)
		}
	}
	chain := NewChain(url, CommitmentFinalized, 10*time.Second)
	defer chain.Close()
	before, _ := chain.Balance(ctx, h.provider.PublicKey())

	cmd := exec.Command("node", "client.mjs", h.srv.URL)
	cmd.Dir = a2aJSDir
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() })
	kill := time.AfterFunc(2*time.Minute, func() { cmd.Process.Kill() })
	defer kill.Stop()
	lines := bufio.NewScanner(stdout)
	next := func(want string) jsStep {
		t.Helper()
		if !lines.Scan() {
			t.Fatalf("the JavaScript client stopped before step %s", want)
		}
		var s jsStep
		if err := json.Unmarshal(lines.Bytes(), &s); err != nil || s.Step != want {
			t.Fatalf("want step %s, got %s", want, lines.Text())
		}
		return s
	}

	if s := next("card"); s.Name != "Echo" || s.ProtocolVersion != A2AVersion {
		t.Fatalf("card: %+v", s)
	}
	if s := next("free"); s.Kind != "task" || s.State != "completed" || !strings.Contains(string(s.Artifact), `"text":"\"pong\""`) {
		t.Fatalf("free skill: %+v %s", s, s.Artifact)
	}
	if s := next("unknown"); s.Error == nil || !strings.Contains(*s.Error, "-32602") {
		t.Fatalf("unknown skill: %+v", s)
	}
	req := next("required")
	if req.State != "input-required" || req.Status != PaymentStatusRequired || len(req.Accepts) != 1 ||
		req.Accepts[0].PayTo != h.provider.Address() || req.Accepts[0].Lamports != fmt.Sprint(testPrice) {
		t.Fatalf("payment required: %+v", req)
	}
	sig, err := chain.Pay(ctx, payer, h.provider.PublicKey(), testPrice, req.Accepts[0].Nonce)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(stdin, sig.String())
	want := `{"echo":{"on":"a2a-js"},"paid_by":"x402"}`
	paid := next("paid")
	if paid.Task != req.Task || paid.State != "completed" || paid.Status != PaymentStatusCompleted ||
		len(paid.Receipts) != 1 || paid.Receipts[0].Transaction != sig.String() || !strings.Contains(string(paid.Artifact), want) {
		t.Fatalf("paid: %+v %s", paid, paid.Artifact)
	}
	if s := next("get"); s.State != "completed" || !strings.Contains(string(s.Artifact), want) {
		t.Fatalf("tasks/get: %+v", s)
	}
	if s := next("replay"); s.State != "completed" || s.HTTP.Headers[HeaderPaymentReplay] != "true" || !strings.Contains(string(s.Artifact), want) {
		t.Fatalf("replayed submission: %+v", s)
	}
	after, _ := chain.Balance(ctx, h.provider.PublicKey())
	if after-before != testPrice || h.served.Load() != 1 {
		t.Fatalf("provider received %d lamports and the skill ran %d times, want %d once", after-before, h.served.Load(), testPrice)
	}
}
