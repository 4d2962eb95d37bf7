package interop

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/agentmesh/mesh/identity"
)

// rpcAnswer is a decoded JSON-RPC answer of the A2A endpoint.
type rpcAnswer struct {
	status int
	ID     json.RawMessage `json:"id"`
	Result *a2aTask        `json:"result"`
	Error  *struct {
		Code    int             `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
	raw string
}

// rpc posts a raw JSON-RPC body to the agent's A2A endpoint.
func (h *harness) rpc(body string) rpcAnswer {
	h.t.Helper()
	res, err := http.Post(h.srv.URL+"/", "application/json", strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	a := rpcAnswer{status: res.StatusCode, raw: string(raw)}
	if err := json.Unmarshal(raw, &a); err != nil {
		h.t.Fatalf("answer is not JSON-RPC: %d %s", res.StatusCode, raw)
	}
	return a
}

// send sends message/send with the given parts and metadata.
func (h *harness) send(taskID string, parts []any, meta map[string]any) rpcAnswer {
	h.t.Helper()
	msg := map[string]any{"kind": "message", "messageId": fmt.Sprint("m", h.served.Load()), "role": "user", "parts": parts}
	if taskID != "" {
		msg["taskId"] = taskID
	}
	if meta != nil {
		msg["metadata"] = meta
	}
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 7, "method": "message/send", "params": map[string]any{"message": msg}})
	return h.rpc(string(b))
}

// dataPart names a skill call.
func dataPart(skill, input string) []any {
	return []any{map[string]any{"kind": "data", "data": map[string]any{"skill": skill, "input": json.RawMessage(input)}}}
}

// meta reads the metadata key of a task's status message.
func (a rpcAnswer) meta(t *testing.T, key string, v any) {
	t.Helper()
	if a.Result == nil || a.Result.Status.Message == nil {
		t.Fatalf("no task status message: %s", a.raw)
	}
	raw, ok := a.Result.Status.Message.Metadata[key]
	if !ok {
		t.Fatalf("no metadata %s: %s", key, a.raw)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatal(err)
	}
}

// artifact is the task's answer as JSON text.
func (a rpcAnswer) artifact(t *testing.T) string {
	t.Helper()
	if a.Result == nil || len(a.Result.Artifacts) != 1 || len(a.Result.Artifacts[0].Parts) != 1 {
		t.Fatalf("no artifact: %s", a.raw)
	}
	p := a.Result.Artifacts[0].Parts[0]
	if p.Kind == "data" {
		return string(p.Data)
	}
	return *p.Text
}

// schemaDef compiles one definition of a JSON schema file of testdata.
func schemaDef(t *testing.T, file, def string) *jsonschema.Schema {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource(file, doc); err != nil {
		t.Fatal(err)
	}
	loc := file
	if def != "" {
		loc += "#/definitions/" + url.PathEscape(def)
	}
	return c.MustCompile(loc)
}

// validate checks a JSON text against a schema.
func validate(t *testing.T, s *jsonschema.Schema, what, raw string) {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(v); err != nil {
		t.Fatalf("%s does not validate: %v\n%s", what, err, raw)
	}
}

// invalid checks that a JSON value fails a schema: the schema can fail.
func invalid(t *testing.T, s *jsonschema.Schema, what string, v any) {
	t.Helper()
	b, _ := json.Marshal(v)
	doc, _ := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if s.Validate(doc) == nil {
		t.Fatalf("the schema takes %s", what)
	}
}

// TestCardValidatesAgainstA2ASchemas: the card names the A2A interfaces
// in the form each version's clients read, and validates against each
// version's schema: the full card (spec 2.3 with A2A 0.3's fields and
// supportedInterfaces) against 0.3's, the card a client asking for
// A2A-Version 1.0 gets against 1.0's, which takes no other field.
func TestCardValidatesAgainstA2ASchemas(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	v03 := schemaDef(t, "testdata/a2a/agent-card.schema.json", "")
	v1 := schemaDef(t, "testdata/a2a/a2a-v1.schema.json", "Agent Card")
	var cards []map[string]any
	for _, path := range []string{"/.well-known/agent-card.json", "/.well-known/agent.json"} {
		r := h.call(nil, "GET", path, "")
		if r.status != 200 || !strings.Contains(r.header.Get("Vary"), HeaderA2AVersion) {
			t.Fatalf("GET %s: %d %v %s", path, r.status, r.header, r.raw)
		}
		validate(t, v03, "the card at "+path, r.raw)
		cards = append(cards, r.body)
	}
	if !reflect.DeepEqual(cards[0], cards[1]) {
		t.Fatalf("the two well-known paths serve different cards:\n%v\n%v", cards[0], cards[1])
	}
	card := cards[0]
	// Every field of spec 2.3 stays, with the spec's shape.
	for _, k := range []string{"name", "version", "description", "url", "defaultInputModes", "defaultOutputModes",
		"protocols", "pricing", "availability", "contact", "skills", "payment"} {
		if _, ok := card[k]; !ok {
			t.Errorf("card lacks spec field %s", k)
		}
	}
	contact := card["contact"].(map[string]any)
	if contact["a2a"] != h.srv.URL+"/.well-known/agent-card.json" || contact["http"] != h.srv.URL+"/v1" {
		t.Errorf("contact %v", contact)
	}
	if card["url"] != h.srv.URL || card["preferredTransport"] != "JSONRPC" || card["protocolVersion"] != "0.3.0" {
		t.Errorf("A2A 0.3 interface: url %v, transport %v, version %v", card["url"], card["preferredTransport"], card["protocolVersion"])
	}
	interfaces := []any{
		map[string]any{"url": h.srv.URL, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
		map[string]any{"url": h.srv.URL, "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
	}
	if !reflect.DeepEqual(card["supportedInterfaces"], interfaces) {
		t.Errorf("supportedInterfaces %v", card["supportedInterfaces"])
	}
	if !strings.Contains(fmt.Sprint(card["protocols"]), "a2a") {
		t.Errorf("protocols %v lack a2a", card["protocols"])
	}
	// The full card has fields 1.0 does not define: not a 1.0 card.
	invalid(t, v1, "the full card as a 1.0 card", card)
	delete(card, "capabilities")
	invalid(t, v03, "a card without capabilities", card)

	// A client that asks for A2A 1.0 gets 1.0's card, with every field
	// the proto marks REQUIRED.
	for _, version := range []string{"1.0", "1.0.0"} {
		r := h.call(nil, "GET", "/.well-known/agent-card.json", "", HeaderA2AVersion, version)
		validate(t, v1, "the 1.0 card", r.raw)
		for _, k := range []string{"name", "description", "supportedInterfaces", "version", "capabilities", "defaultInputModes", "defaultOutputModes", "skills"} {
			if _, ok := r.body[k]; !ok {
				t.Errorf("the 1.0 card lacks REQUIRED field %s: %s", k, r.raw)
			}
		}
		if !reflect.DeepEqual(r.body["supportedInterfaces"], interfaces) || r.body["url"] != nil {
			t.Fatalf("1.0 card: %s", r.raw)
		}
		ext := fmt.Sprint(r.body["capabilities"])
		if !strings.Contains(ext, X402A2AExtension) || !strings.Contains(ext, X402A2AExtensionV01) {
			t.Errorf("the card does not declare the x402 extension: %s", ext)
		}
		r.body["url"] = h.srv.URL
		invalid(t, v1, "a 1.0 card with a url", r.body)
	}
}

func TestA2ASendGetCancel(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r := h.send("", dataPart("ping", `{}`), nil)
	if r.Error != nil || r.Result.Status.State != "completed" || r.artifact(t) != `"pong"` || string(r.ID) != "7" {
		t.Fatalf("free skill: %s", r.raw)
	}
	id := r.Result.ID
	got := h.rpc(`{"jsonrpc":"2.0","id":"g","method":"tasks/get","params":{"id":"` + id + `"}}`)
	if got.Error != nil || got.Result.ID != id || got.Result.Status.State != "completed" || string(got.ID) != `"g"` {
		t.Fatalf("tasks/get: %s", got.raw)
	}
	// Errors answer the JSON-RPC and A2A codes.
	for _, c := range []struct {
		name, body string
		code       int
	}{
		{"cancel a completed task", `{"jsonrpc":"2.0","id":1,"method":"tasks/cancel","params":{"id":"` + id + `"}}`, -32002},
		{"unknown task", `{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"task_nope"}}`, -32001},
		{"bad JSON", `{"jsonrpc":"2.0",`, -32700},
		{"not a request", `[1,2]`, -32600},
		{"no jsonrpc", `{"id":1,"method":"tasks/get","params":{}}`, -32600},
		{"unknown method", `{"jsonrpc":"2.0","id":1,"method":"tasks/nope","params":{}}`, -32601},
		{"streaming", `{"jsonrpc":"2.0","id":1,"method":"message/stream","params":{}}`, -32004},
		{"params not an object", `{"jsonrpc":"2.0","id":1,"method":"message/send","params":[]}`, -32602},
		{"no message", `{"jsonrpc":"2.0","id":1,"method":"message/send","params":{}}`, -32602},
	} {
		a := h.rpc(c.body)
		if a.status != 200 || a.Error == nil || a.Error.Code != c.code {
			t.Errorf("%s: want %d, got %d %s", c.name, c.code, a.status, a.raw)
		}
	}
	for _, c := range []struct {
		name  string
		parts []any
		code  int
	}{
		{"unknown skill", dataPart("nope", `1`), -32602},
		{"text to an agent of two skills", []any{map[string]any{"kind": "text", "text": "hi"}}, -32602},
		{"a file", []any{map[string]any{"kind": "file", "file": map[string]any{"uri": "https://x"}}}, -32005},
		{"data without skill", []any{map[string]any{"kind": "data", "data": map[string]any{"input": 1}}}, -32602},
		{"no parts", []any{}, -32602},
	} {
		a := h.send("", c.parts, nil)
		if a.Error == nil || a.Error.Code != c.code {
			t.Errorf("%s: want %d, got %s", c.name, c.code, a.raw)
		}
	}
	// An input the skill refuses rejects the task with the {detail, code}.
	r = h.send("", dataPart("ping", `{}`), map[string]any{MetaSig: "v1 garbage"})
	if r.Error != nil || r.Result.Status.State != "rejected" || !strings.Contains(r.raw, `"code":"invalid_signature"`) {
		t.Fatalf("bad signature: %s", r.raw)
	}
	// A paid call's task awaits payment; it can be canceled once.
	r = h.send("", dataPart("echo", `{"x":1}`), nil)
	cancel := `{"jsonrpc":"2.0","id":1,"method":"tasks/cancel","params":{"id":"` + r.Result.ID + `"}}`
	if a := h.rpc(cancel); a.Error != nil || a.Result.Status.State != "canceled" {
		t.Fatalf("cancel: %s", a.raw)
	}
	if a := h.rpc(cancel); a.Error == nil || a.Error.Code != -32002 {
		t.Fatalf("cancel twice: %s", a.raw)
	}
}

// sigFor is the Mesh-Sig of a call of skill with input, signed by key.
func (h *harness) sigFor(key ed25519.PrivateKey, skill, input, apiKey string) string {
	req, _ := http.NewRequest("POST", h.srv.URL+"/v1/"+skill, nil)
	if apiKey != "" {
		req.Header.Set(HeaderAPIKey, apiKey)
	}
	identity.SignRequest(req, key, []byte(input), h.clock.Now())
	return req.Header.Get(identity.SigHeaderName)
}

func TestA2APaysThroughTheCascade(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r := h.send("", dataPart("echo", `{"x":1}`), nil)
	if r.Error != nil || r.Result.Status.State != "input-required" {
		t.Fatalf("unpaid: %s", r.raw)
	}
	var status string
	r.meta(t, MetaPaymentStatus, &status)
	req := r.required(t)
	if status != PaymentStatusRequired || req.X402Version != 1 || len(req.Accepts) != 1 || req.Error != "payment required" {
		t.Fatalf("payment requirements: %s", r.raw)
	}
	o := req.Accepts[0]
	if o.PayTo != h.provider.Address() || o.MaxAmountRequired != fmt.Sprint(testPrice) || o.Network != "solana-devnet" ||
		o.Resource != h.srv.URL+"/v1/echo" || o.Extra.Network != NetworkDevnet || o.Extra.ChainPayURL == "" || o.MaxTimeoutSeconds != 300 {
		t.Fatalf("offer %+v", o)
	}
	task := r.Result.ID
	sig := h.pay(NewWallet(), testPrice, o.Extra.Nonce)
	submit := map[string]any{MetaPaymentStatus: PaymentStatusSubmitted, MetaPaymentPayload: map[string]any{
		"x402Version": 1, "scheme": "exact", "network": NetworkDevnet, "payload": map[string]any{"signature": sig.String(), "nonce": o.Extra.Nonce}}}
	r = h.send(task, []any{map[string]any{"kind": "text", "text": "paid"}}, submit)
	if r.Error != nil || r.Result.ID != task || r.Result.Status.State != "completed" {
		t.Fatalf("submission: %s", r.raw)
	}
	if a := r.artifact(t); a != `{"echo":{"x":1},"paid_by":"x402"}` {
		t.Fatalf("artifact %s", a)
	}
	var receipts []struct {
		Success     bool   `json:"success"`
		Transaction string `json:"transaction"`
	}
	r.meta(t, MetaPaymentStatus, &status)
	r.meta(t, MetaPaymentReceipts, &receipts)
	if status != PaymentStatusCompleted || len(receipts) != 1 || !receipts[0].Success || receipts[0].Transaction != sig.String() {
		t.Fatalf("receipts: %s", r.raw)
	}
	// The completed task takes no more messages.
	if a := h.send(task, nil, submit); a.Error == nil || a.Error.Code != -32004 {
		t.Fatalf("message to a completed task: %s", a.raw)
	}
	// A replayed submission (same call, same proof) gets the same answer
	// from the cascade's cache: the skill does not run, nothing is charged.
	again := h.send("", dataPart("echo", `{"x":1}`), submit)
	var httpMeta struct {
		Status  int               `json:"status"`
		Headers map[string]string `json:"headers"`
	}
	again.meta(t, MetaHTTP, &httpMeta)
	if again.Result.Status.State != "completed" || again.artifact(t) != r.artifact(t) || httpMeta.Headers[HeaderPaymentReplay] != "true" {
		t.Fatalf("replay: %s", again.raw)
	}
	if n := h.served.Load(); n != 1 {
		t.Fatalf("skill ran %d times for one payment", n)
	}
	// The proof bound to {"x":1} does not pay for another input: the
	// payment fails, and the task awaits a payment of fresh requirements.
	other := h.send("", dataPart("echo", `{"x":2}`), submit)
	var perr string
	other.meta(t, MetaPaymentError, &perr)
	other.meta(t, MetaPaymentStatus, &status)
	if other.Result.Status.State != "input-required" || perr != "payment_binding_mismatch" || status != PaymentStatusFailed ||
		other.required(t).Accepts[0].Extra.Nonce == o.Extra.Nonce {
		t.Fatalf("proof for another input: %s", other.raw)
	}
}

// x402RequiredT is the extension's x402.payment.required as a test reads it.
type x402RequiredT struct {
	X402Version int    `json:"x402Version"`
	Error       string `json:"error"`
	Accepts     []struct {
		Scheme, Network, MaxAmountRequired, Resource, Description, MimeType, PayTo, Asset string
		MaxTimeoutSeconds                                                                 int
		Extra                                                                             struct {
			Nonce, Network, ChainPayURL, ExpiresAt string
		}
	} `json:"accepts"`
}

func (a rpcAnswer) required(t *testing.T) x402RequiredT {
	t.Helper()
	var req x402RequiredT
	a.meta(t, MetaPaymentRequired, &req)
	if len(req.Accepts) == 0 {
		t.Fatalf("no requirements: %s", a.raw)
	}
	return req
}

func TestA2ABalanceFreeTierAndPostpay(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(pc *PaymentConfig) { pc.FreeCallsPerDay = 1 })
	key := identity.GenerateKey()
	// The free tier counts a Mesh-Sig sent in metadata.
	signedCall := func(apiKey string) rpcAnswer {
		meta := map[string]any{MetaSig: h.sigFor(key, "echo", `{"x":1}`, apiKey)}
		if apiKey != "" {
			meta[MetaAPIKey] = apiKey
		}
		return h.send("", dataPart("echo", `{"x":1}`), meta)
	}
	if r := signedCall(""); r.Result.Status.State != "completed" || !strings.Contains(r.artifact(t), `"paid_by":"free"`) {
		t.Fatalf("free call: %s", r.raw)
	}
	if r := signedCall(""); r.Result.Status.State != "input-required" {
		t.Fatalf("allowance spent: %s", r.raw)
	}
	// A prepaid balance is debited through mesh.api_key.
	c := &Client{Key: key, Wallet: NewWallet(), Chain: NewChain(h.chain.URL, CommitmentConfirmed, 0), MaxLamports: 1_000_000, Now: h.clock.Now}
	card := h.agent.Card()
	top := h.deposit(c, &card, 100_000)
	r := signedCall(top.APIKey)
	var hm struct {
		Headers map[string]string `json:"headers"`
	}
	r.meta(t, MetaHTTP, &hm)
	if r.Result.Status.State != "completed" || !strings.Contains(r.artifact(t), `"paid_by":"balance"`) ||
		hm.Headers[HeaderDebitedLamports] != fmt.Sprint(testPrice) || hm.Headers[identity.ReceiptHeaderName] == "" {
		t.Fatalf("balance call: %s", r.raw)
	}
	// Post-pay: a trusted caller is served and handed the invoice.
	score := 0.9
	h.reg.mu.Lock()
	h.reg.agents[identity.EncodePublicKey(key.Public().(ed25519.PublicKey))], h.reg.score = "caller-1", &score
	h.reg.mu.Unlock()
	h.agent.paywall.cfg.PostpayMinReputation = &score
	r = signedCall("")
	r.meta(t, MetaHTTP, &hm)
	if r.Result.Status.State != "completed" || !strings.Contains(r.artifact(t), `"paid_by":"postpay"`) ||
		hm.Headers[HeaderPostpayDue] == "" || !strings.HasPrefix(hm.Headers[HeaderPaymentNonce], invoicePrefix) {
		t.Fatalf("post-pay call: %s", r.raw)
	}
}

func FuzzDecodeRPC(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{}}}`,
		`{"jsonrpc":"2.0","id":"a","method":"tasks/get","params":{"id":"x"}}`,
		`{"jsonrpc":"1.0","id":null,"method":""}`, `[]`, `{`, ``, `{"id":{"a":1}}`, `{"jsonrpc":"2.0","id":-1e999,"method":"m"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		req, e := decodeRPC(b)
		if req.ID != nil && !validID(req.ID) {
			t.Fatalf("id %s returned", req.ID)
		}
		if e != nil {
			if e.Code != rpcParseError && e.Code != rpcInvalidRequest {
				t.Fatalf("code %d", e.Code)
			}
			return
		}
		if req.JSONRPC != "2.0" || req.Method == "" || !json.Valid(req.ID) {
			t.Fatalf("accepted %q as %+v", b, req)
		}
	})
}

// pathLog records the paths of the requests an HTTP client sends.
type pathLog struct {
	mu    sync.Mutex
	paths []string
}

func (l *pathLog) RoundTrip(r *http.Request) (*http.Response, error) {
	l.mu.Lock()
	l.paths = append(l.paths, r.Method+" /"+strings.TrimPrefix(r.URL.Path, "/"))
	l.mu.Unlock()
	return http.DefaultTransport.RoundTrip(r)
}

// TestClientCallsOverA2A: a card that offers A2A and no HTTP skill
// endpoint is called over A2A, and the client pays, retries with a proof,
// and spends a balance as over HTTP.
func TestClientCallsOverA2A(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	c := payingClient(t, h, h.chain)
	card := h.card(c)
	card.Contact.HTTP = ""
	log := &pathLog{}
	c.HTTP = &http.Client{Transport: log}
	res, err := c.Call(ctx, card, "echo", []byte(`{"hello": "<world>"}`))
	if err != nil || res.Status != 200 || res.Lamports != testPrice || res.Signature == "" || res.Receipt == "" ||
		string(res.Body) != `{"echo":{"hello":"\u003cworld\u003e"},"paid_by":"x402"}` {
		t.Fatalf("paid call: %+v %v", res, err)
	}
	if got := h.chain.Balance(h.provider.PublicKey()); got != testPrice {
		t.Fatalf("provider balance %d", got)
	}
	if res, err := c.Call(ctx, card, "ping", nil); err != nil || string(res.Body) != `"pong"` {
		t.Fatalf("free skill: %+v %v", res, err)
	}
	// A skill that fails after the payment: the proof serves a retry.
	h.fail.Store(true)
	_, err = c.Call(ctx, card, "echo", []byte(`{}`))
	var pe *PaymentError
	if !errors.As(err, &pe) || pe.Signature == "" {
		t.Fatalf("a failed skill after paying: %v", err)
	}
	h.fail.Store(false)
	if res, err := c.CallWithProof(ctx, card, "echo", []byte(`{}`), pe.Signature, pe.Nonce); err != nil || res.Status != 200 {
		t.Fatalf("retry with the proof: %+v %v", res, err)
	}
	for _, p := range log.paths {
		if p != "POST /" {
			t.Fatalf("the client called %s, not the A2A endpoint", p)
		}
	}
	// A prepaid balance is spent over A2A too.
	c.HTTP = nil
	top := h.deposit(c, card, 0)
	c.APIKey, c.Wallet = top.APIKey, nil
	res, err = c.Call(ctx, card, "echo", []byte(`{}`))
	if err != nil || res.Header.Get(HeaderDebitedLamports) != fmt.Sprint(testPrice) {
		t.Fatalf("call on balance: %+v %v", res, err)
	}
	// An unknown skill is the agent's JSON-RPC error, as a client error.
	if _, err := c.Call(ctx, card, "nope", nil); err == nil || !strings.Contains(err.Error(), "unknown") {
		t.Fatalf("unknown skill: %v", err)
	}
}

// TestClientReadsCardAtEitherPath: the client reads A2A 0.3's
// agent-card.json, and an older agent's agent.json when that is 404.
func TestClientReadsCardAtEitherPath(t *testing.T) {
	t.Parallel()
	for _, path := range []string{"/.well-known/agent-card.json", "/.well-known/agent.json"} {
		mux := http.NewServeMux()
		mux.HandleFunc("GET "+path, func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte(`{"name":"only at ` + path + `","url":"http://a.example"}`))
		})
		srv := httptest.NewServer(mux)
		card, err := (&Client{}).Card(context.Background(), srv.URL)
		srv.Close()
		if err != nil || card.Name != "only at "+path {
			t.Fatalf("card at %s: %+v %v", path, card, err)
		}
	}
}

// TestA2ATasksAreBounded: at most MaxTasks are kept, the oldest forgotten
// first, and none past TaskTTL after its last change.
func TestA2ATasksAreBounded(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Unix(1_800_000_000, 0)}
	s := newTaskStore(A2AConfig{MaxTasks: 2, TaskTTL: time.Minute}, clk.Now)
	put := func(id string) {
		s.put(a2aTask{ID: id, Status: a2aStatus{State: stateInputRequired}}, a2aCall{skill: "echo", input: []byte("1")})
	}
	has := func(id string) bool { _, _, ok := s.get(id); return ok }
	put("a")
	put("b")
	put("c")
	if has("a") || !has("b") || !has("c") {
		t.Fatal("the oldest task was not forgotten when the store was full")
	}
	clk.Advance(40 * time.Second)
	put("b") // a change keeps b another minute
	clk.Advance(30 * time.Second)
	if !has("b") || has("c") {
		t.Fatal("tasks are not kept TaskTTL after their last change")
	}
	if _, e := s.cancel("c", clk.Now()); e == nil || e.Code != rpcTaskNotFound {
		t.Fatalf("cancel of an expired task: %v", e)
	}
	put("d")
	put("e")
	if len(s.tasks) != 2 {
		t.Fatalf("%d tasks kept, want at most 2", len(s.tasks))
	}
}
