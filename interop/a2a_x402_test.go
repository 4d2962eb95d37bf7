package interop

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// x402 reads a task's x402 metadata and checks it against the extension's
// schema (what its reference library reads).
func (a rpcAnswer) x402(t *testing.T, meta *jsonschema.Schema) map[string]json.RawMessage {
	t.Helper()
	if a.Result == nil || a.Result.Status.Message == nil {
		t.Fatalf("no status message: %s", a.raw)
	}
	out := map[string]json.RawMessage{}
	for k, v := range a.Result.Status.Message.Metadata {
		if strings.HasPrefix(k, "x402.") {
			out[k] = v
		}
	}
	b, _ := json.Marshal(out)
	validate(t, meta, "the x402 metadata", string(b))
	return out
}

func str(raw json.RawMessage) string {
	var s string
	json.Unmarshal(raw, &s)
	return s
}

// TestA2AX402ExtensionAsWritten: the A2A x402 extension (v0.2) as written:
// the agent activates it when asked (echoing the header the client used);
// a refused payment moves the task's payment to payment-failed with a
// failed receipt and fresh requirements to retry with, and a payment on
// the same task then completes it with both receipts; x402's stock payload
// shape is taken; payment-rejected ends the task with nothing charged.
// Every x402 object the agent sends validates against the extension's
// schema.
func TestA2AX402ExtensionAsWritten(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	meta := schemaDef(t, "testdata/a2a-x402/x402-a2a.schema.json", "AgentMetadata")

	// Activation, in the header the client used; unknown URIs are not echoed.
	send := `{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"kind":"message","messageId":"m","role":"user",` +
		`"parts":[{"kind":"data","data":{"skill":"ping","input":{}}}]}}}`
	for _, c := range []struct{ header, value, want string }{
		{HeaderA2AExtensionsV03, X402A2AExtension, X402A2AExtension},
		{HeaderA2AExtensions, "https://x.example/other, " + X402A2AExtensionV01, X402A2AExtensionV01},
		{HeaderA2AExtensions, "https://x.example/other", ""},
	} {
		r := h.call(nil, "POST", "/", send, c.header, c.value)
		if got := r.header.Get(c.header); got != c.want {
			t.Errorf("%s: %s activated %q, want %q", c.header, c.value, got, c.want)
		}
	}

	unpaid := h.send("", dataPart("echo", `{"x":1}`), nil)
	x := unpaid.x402(t, meta)
	if str(x[MetaPaymentStatus]) != PaymentStatusRequired {
		t.Fatalf("unpaid: %s", unpaid.raw)
	}
	task, first := unpaid.Result.ID, unpaid.required(t).Accepts[0].Extra.Nonce

	// A proof the chain does not know: payment-failed, a failed receipt,
	// fresh requirements; the task still awaits payment.
	bogus := h.pay(NewWallet(), testPrice-1, first) // pays too little
	h.clock.Advance(time.Second)                    // the fresh nonce expires a second later
	submit := func(sig, nonce string) map[string]any {
		return map[string]any{MetaPaymentStatus: PaymentStatusSubmitted, MetaPaymentPayload: map[string]any{
			"x402Version": 1, "scheme": "exact", "network": "solana-devnet", "payload": map[string]any{"signature": sig, "nonce": nonce}}}
	}
	failed := h.send(task, []any{map[string]any{"kind": "text", "text": "paid"}}, submit(bogus.String(), first))
	x = failed.x402(t, meta)
	var receipts []SettleResponse
	json.Unmarshal(x[MetaPaymentReceipts], &receipts)
	fresh := failed.required(t).Accepts[0].Extra.Nonce
	if failed.Result.ID != task || failed.Result.Status.State != stateInputRequired || str(x[MetaPaymentStatus]) != PaymentStatusFailed ||
		str(x[MetaPaymentError]) != "payment_underpaid" || len(receipts) != 1 || receipts[0].Success ||
		receipts[0].Transaction != bogus.String() || !strings.Contains(receipts[0].ErrorReason, "the price is 5000") || fresh == first {
		t.Fatalf("refused payment: %s", failed.raw)
	}
	// The retry pays the fresh requirements: completed, both receipts.
	good := h.pay(NewWallet(), testPrice, fresh)
	done := h.send(task, []any{map[string]any{"kind": "text", "text": "paid"}}, submit(good.String(), fresh))
	x = done.x402(t, meta)
	json.Unmarshal(x[MetaPaymentReceipts], &receipts)
	if done.Result.Status.State != stateCompleted || str(x[MetaPaymentStatus]) != PaymentStatusCompleted || len(receipts) != 2 ||
		receipts[0].Success || !receipts[1].Success || receipts[1].Transaction != good.String() || receipts[1].Network != "solana-devnet" {
		t.Fatalf("paid retry: %s", done.raw)
	}

	// x402's stock payload ({transaction}) is taken, not refused as params.
	stockTask := h.send("", dataPart("echo", `{"x":2}`), nil).Result.ID
	stock := map[string]any{MetaPaymentStatus: PaymentStatusSubmitted, MetaPaymentPayload: map[string]any{
		"x402Version": 1, "scheme": "exact", "network": "solana-devnet", "payload": map[string]any{"transaction": "AQID"}}}
	r := h.send(stockTask, []any{map[string]any{"kind": "text", "text": "paid"}}, stock)
	x = r.x402(t, meta)
	if r.Error != nil || r.Result.Status.State != stateInputRequired || str(x[MetaPaymentStatus]) != PaymentStatusFailed {
		t.Fatalf("stock payload: %s", r.raw)
	}
	// payment-rejected ends the task: canceled, the skill never ran.
	served := h.served.Load()
	rej := h.send(stockTask, []any{map[string]any{"kind": "text", "text": "no"}}, map[string]any{MetaPaymentStatus: PaymentStatusRejected})
	x = rej.x402(t, meta)
	if rej.Result.Status.State != stateCanceled || str(x[MetaPaymentStatus]) != PaymentStatusRejected || h.served.Load() != served {
		t.Fatalf("rejected: %s", rej.raw)
	}
	if a := h.send(stockTask, nil, stock); a.Error == nil || a.Error.Code != rpcUnsupported {
		t.Fatalf("message to a task whose payment was rejected: %s", a.raw)
	}
	if a := h.send("", dataPart("echo", `{}`), map[string]any{MetaPaymentStatus: PaymentStatusRejected}); a.Error == nil || a.Error.Code != rpcInvalidParams {
		t.Fatalf("payment-rejected without a task: %s", a.raw)
	}
	for _, p := range []any{"nope", map[string]any{"x402Version": 3, "payload": map[string]any{"transaction": "AQID"}},
		map[string]any{"x402Version": 1, "payload": map[string]any{"transaction": 7}}, map[string]any{"x402Version": 1}} {
		bad := map[string]any{MetaPaymentStatus: PaymentStatusSubmitted, MetaPaymentPayload: p}
		if a := h.send("", dataPart("echo", `{}`), bad); a.Error == nil || a.Error.Code != rpcInvalidParams {
			t.Fatalf("payload %v: %s", p, a.raw)
		}
	}
}

// TestA2AX402Payloads: each payload shape reaches the skill's handler as
// the HTTP header its clients send: this project's proof as
// X-Payment-Proof and X-Payment-Nonce, an x402 PaymentPayload as x402's
// X-PAYMENT (version 1) or PAYMENT-SIGNATURE (version 2), base64 of the
// very JSON.
func TestA2AX402Payloads(t *testing.T) {
	t.Parallel()
	v1 := `{"x402Version":1,"scheme":"exact","network":"solana-devnet","payload":{"transaction":"AQID"}}`
	v2 := `{"x402Version":2,"accepted":{"scheme":"exact","network":"solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1"},"payload":{"transaction":"AQID"}}`
	mesh := `{"x402Version":1,"scheme":"exact","network":"chain-devnet","payload":{"signature":"5sig","nonce":"n1"}}`
	evm := `{"x402Version":1,"scheme":"exact","network":"base","payload":{"signature":"0x1","authorization":{"from":"0x2"}}}`
	for _, c := range []struct {
		payload string
		want    map[string]string
	}{
		{v1, map[string]string{"X-Payment": base64.StdEncoding.EncodeToString([]byte(v1))}},
		{v2, map[string]string{"Payment-Signature": base64.StdEncoding.EncodeToString([]byte(v2))}},
		{mesh, map[string]string{HeaderPaymentProof: "5sig", HeaderPaymentNonce: "n1"}},
		{evm, map[string]string{"X-Payment": base64.StdEncoding.EncodeToString([]byte(evm))}},
	} {
		sub := submission{header: http.Header{}}
		if e := sub.payload(json.RawMessage(c.payload)); e != nil {
			t.Fatalf("%s: %v", c.payload, e)
		}
		if len(sub.header) != len(c.want) {
			t.Fatalf("%s: headers %v", c.payload, sub.header)
		}
		for k, v := range c.want {
			if sub.header.Get(k) != v {
				t.Fatalf("%s: %s is %q, want %q", c.payload, k, sub.header.Get(k), v)
			}
		}
	}
}

// TestA2AX402ReadsV2Answers: the extension carries what an x402 v2
// paywall answers (the PAYMENT-REQUIRED header's requirements, as x402
// version 1 requirements, and the PAYMENT-RESPONSE settlement as the
// receipt), so that a v2 payment through the extension needs no change
// of the A2A edge.
func TestA2AX402ReadsV2Answers(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	meta := schemaDef(t, "testdata/a2a-x402/x402-a2a.schema.json", "AgentMetadata")
	required := `{"x402Version":2,"resource":{"url":"https://a.example/v1/echo","description":"Echo","mimeType":"application/json"},` +
		`"accepts":[{"scheme":"exact","network":"solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1","amount":"10000",` +
		`"asset":"4zMMC9srt5Ri5X14GAgXhaHii3GnPAEERYPJgZJDncDU","payTo":"` + h.provider.Address() + `","maxTimeoutSeconds":60,"extra":{"feePayer":"` + h.provider.Address() + `"}}]}`
	rec := &capture{header: http.Header{}, status: http.StatusPaymentRequired}
	rec.header.Set("PAYMENT-REQUIRED", base64.StdEncoding.EncodeToString([]byte(required)))
	rec.body.WriteString(`{"detail":"payment required","code":"payment_required"}`)
	var task a2aTask
	m := map[string]any{}
	h.agent.x402Meta(m, &task, a2aCall{skill: "echo"}, rec, "payment_required", "payment required", submission{})
	b, _ := json.Marshal(m)
	validate(t, meta, "metadata of a v2 402", string(b))
	req := m[MetaPaymentRequired].(*x402Required)
	if len(req.Accepts) != 1 || req.Accepts[0].Network != "solana-devnet" || req.Accepts[0].MaxAmountRequired != "10000" ||
		req.Accepts[0].Resource != "https://a.example/v1/echo" || req.Accepts[0].Extra["feePayer"] != h.provider.Address() {
		t.Fatalf("requirements of a v2 402: %s", b)
	}
	settledV2 := `{"success":true,"transaction":"5tx","network":"solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1","payer":"P"}`
	ok := &capture{header: http.Header{}, status: http.StatusOK}
	ok.header.Set("PAYMENT-RESPONSE", base64.StdEncoding.EncodeToString([]byte(settledV2)))
	m = map[string]any{}
	h.agent.x402Meta(m, &task, a2aCall{skill: "echo"}, ok, "", "", submission{submitted: true})
	b, _ = json.Marshal(m)
	validate(t, meta, "metadata of a v2 settlement", string(b))
	if r := task.receiptList(); len(r) != 1 || r[0] != (SettleResponse{Success: true, Transaction: "5tx", Network: CAIP2Devnet, Payer: "P"}) ||
		m[MetaPaymentStatus] != PaymentStatusCompleted {
		t.Fatalf("receipt of a v2 settlement: %s", b)
	}
	for in, want := range map[string]string{NetworkDevnet: "solana-devnet", NetworkMainnet: "solana",
		"solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp": "solana", "solana:": "solana:", "eip155:8453": "eip155:8453"} {
		if got := x402NetworkV1(in); got != want {
			t.Errorf("x402NetworkV1(%q) = %q, want %q", in, got, want)
		}
	}
}
