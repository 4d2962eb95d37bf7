package interop

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/rpc"
)

// a2aJSDir drives the A2A project's JavaScript clients (npm's @a2a-js/sdk
// 1.3.0, and 0.3.13 as a2a-v03) against an agent.
const a2aJSDir = "testdata/a2a-js"

// jsStep is one line the JavaScript client prints.
type jsStep struct {
	Step            string               `json:"step"`
	Name            string               `json:"name"`
	ProtocolVersion string               `json:"protocolVersion"`
	Interfaces      []map[string]any     `json:"interfaces"`
	Task            string               `json:"task"`
	State           string               `json:"state"`
	X402            map[string]any       `json:"x402"`
	Artifact        json.RawMessage      `json:"artifact"`
	Raw             json.RawMessage      `json:"raw"`
	Payload         json.RawMessage      `json:"payload"`
	Activated       *string              `json:"activated"`
	Error           *string              `json:"error"`
	Code            *int                 `json:"code"`
	HTTP            struct{ Status int } `json:"http"`
}

func (s jsStep) status() string { return fmt.Sprint(s.X402[MetaPaymentStatus]) }

// required is the step's x402.payment.required.
func (s jsStep) required(t *testing.T) x402RequiredT {
	t.Helper()
	var req x402RequiredT
	b, _ := json.Marshal(s.X402[MetaPaymentRequired])
	if json.Unmarshal(b, &req) != nil || len(req.Accepts) == 0 {
		t.Fatalf("%s: no payment requirements: %v", s.Step, s.X402)
	}
	return req
}

// receipts is the step's x402.payment.receipts.
func (s jsStep) receipts(t *testing.T) []SettleResponse {
	t.Helper()
	var r []SettleResponse
	b, _ := json.Marshal(s.X402[MetaPaymentReceipts])
	if json.Unmarshal(b, &r) != nil {
		t.Fatalf("%s: receipts %v", s.Step, s.X402)
	}
	return r
}

// TestA2AJSClientsV1AndV03: the A2A project's own JavaScript clients, the
// current one (1.3.0, A2A 1.0, its default ClientFactory) and the last of
// A2A 0.3 (0.3.13), each read the card by its default path, call a free
// skill, get its task, see an unknown skill refused, see a paid skill's
// task await payment with the x402 extension's requirements, cancel it
// (once), pay a second one on the real Solana runtime (LiteSVM) and get
// the completed task with its receipt, submit a payment in x402's stock
// shape (refused: it pays nothing; the task awaits a fresh payment) and
// then reject paying. What the agent sends validates against the A2A 1.0
// schema (1.0's tasks) and the x402 extension's.
func TestA2AJSClientsV1AndV03(t *testing.T) {
	t.Parallel()
	url, genesis := startLiteSVM(t)
	npmPackage(t, a2aJSDir, "@a2a-js/sdk")
	npmPackage(t, a2aJSDir, "a2a-v03")
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
	meta := schemaDef(t, "testdata/a2a-x402/x402-a2a.schema.json", "AgentMetadata")
	payload := schemaDef(t, "testdata/a2a-x402/x402-a2a.schema.json", "PaymentPayload")
	taskV1 := schemaDef(t, "testdata/a2a/a2a-v1.schema.json", "Task")

	for _, version := range []string{"1.0", "0.3"} {
		t.Run(version, func(t *testing.T) {
			next, stdin := runJSClient(t, version, h.srv.URL)
			// Every task: its x402 metadata as the extension's reference
			// types read it, and under 1.0 the task as 1.0's schema has it.
			task := func(want, state string) jsStep {
				t.Helper()
				s := next(want)
				if s.State != state {
					t.Fatalf("%s: state %s, want %s: %s", want, s.State, state, s.Raw)
				}
				if len(s.X402) > 0 {
					b, _ := json.Marshal(s.X402)
					validate(t, meta, want+"'s x402 metadata", string(b))
				}
				if version == "1.0" {
					validate(t, taskV1, want+"'s task", string(s.Raw))
				}
				return s
			}
			refused := func(want string, code int, text string) {
				t.Helper()
				s := next(want)
				if s.Error == nil || !strings.Contains(*s.Error, text) || version == "1.0" && (s.Code == nil || *s.Code != code) {
					t.Fatalf("%s: want error %d %q, got %+v", want, code, text, s)
				}
			}

			card := next("card")
			if card.Name != "Echo" {
				t.Fatalf("card: %+v", card)
			}
			if version == "1.0" && (card.ProtocolVersion != "1.0" || len(card.Interfaces) != 2 || card.Interfaces[0]["protocolVersion"] != "1.0") ||
				version == "0.3" && card.ProtocolVersion != A2AVersion {
				t.Fatalf("card: %+v", card)
			}
			if s := task("free", "completed"); string(s.Artifact) != `"\"pong\""` {
				t.Fatalf("free skill: %s", s.Artifact)
			}
			if s := task("get", "completed"); string(s.Artifact) != `"\"pong\""` {
				t.Fatalf("get: %s", s.Artifact)
			}
			refused("unknown", rpcInvalidParams, `skill "nope" is unknown`)

			req := task("required", "input-required")
			o := req.required(t).Accepts[0]
			if req.status() != PaymentStatusRequired || o.PayTo != h.provider.Address() || o.MaxAmountRequired != fmt.Sprint(testPrice) || o.Network != "solana-devnet" {
				t.Fatalf("payment required: %+v", req)
			}
			task("cancel", "canceled")
			refused("cancel-again", rpcTaskNotCancelable, "cannot be canceled")

			toPay := task("to-pay", "input-required")
			if toPay.Activated == nil || *toPay.Activated != X402A2AExtension {
				t.Fatalf("the agent did not activate the x402 extension: %+v", toPay.Activated)
			}
			nonce := toPay.required(t).Accepts[0].Extra.Nonce
			sig, err := chain.Pay(ctx, payer, h.provider.PublicKey(), testPrice, nonce)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintln(stdin, sig.String())
			want := fmt.Sprintf(`{"echo":{"on":"a2a-js-%s"},"paid_by":"x402"}`, version)
			for _, step := range []string{"paid", "get-paid"} {
				paid := task(step, "completed")
				r := paid.receipts(t)
				if paid.Task != toPay.Task || paid.status() != PaymentStatusCompleted || len(r) != 1 || !r[0].Success ||
					r[0].Transaction != sig.String() || r[0].Network != "solana-devnet" || !jsonEqual(paid.Artifact, want) {
					t.Fatalf("%s: %+v %s", step, paid, paid.Artifact)
				}
			}

			validate(t, payload, "the stock payload", string(next("stock-payload").Payload))
			stock := task("stock", "input-required")
			if stock.status() != PaymentStatusFailed || stock.X402[MetaPaymentError] == nil || len(stock.receipts(t)) != 1 ||
				stock.receipts(t)[0].Success || len(stock.required(t).Accepts) != 1 {
				t.Fatalf("stock payload: %+v", stock)
			}
			if s := task("rejected", "canceled"); s.status() != PaymentStatusRejected || len(s.receipts(t)) != 1 {
				t.Fatalf("rejected: %+v", s)
			}
		})
	}
	after, _ := chain.Balance(ctx, h.provider.PublicKey())
	if after-before != 2*testPrice || h.served.Load() != 2 {
		t.Fatalf("provider received %d lamports and the skill ran %d times, want %d twice", after-before, h.served.Load(), testPrice)
	}
}

// jsonEqual: raw holds the JSON text want (as a JSON object or as a string
// holding it, as a text part does).
func jsonEqual(raw json.RawMessage, want string) bool {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		raw = json.RawMessage(s)
	}
	var a, b any
	return json.Unmarshal(raw, &a) == nil && json.Unmarshal([]byte(want), &b) == nil && fmt.Sprint(a) == fmt.Sprint(b)
}

// runJSClient starts client.mjs of version against the agent at base and
// returns a reader of its steps and its standard input.
func runJSClient(t *testing.T, version, base string) (func(string) jsStep, io.Writer) {
	cmd := exec.Command("node", "client.mjs", version, base)
	cmd.Dir = a2aJSDir
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() })
	kill := time.AfterFunc(2*time.Minute, func() { cmd.Process.Kill() })
	t.Cleanup(func() { kill.Stop() })
	lines := bufio.NewScanner(stdout)
	lines.Buffer(nil, 1<<20)
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
	return next, stdin
}
