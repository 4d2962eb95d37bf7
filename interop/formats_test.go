package interop

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/storetest"
)

const addr = "9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin"

func TestCoins(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		lamports uint64
		coins    string
	}{{0, "0"}, {1, "0.000000001"}, {5000, "0.000005"}, {1_500_000_000, "1.5"}, {2_000_000_000, "2"}, {18446744073709551615, "18446744073.709551615"}} {
		if got := FormatCoins(c.lamports); got != c.coins {
			t.Errorf("FormatCoins(%d) = %s, want %s", c.lamports, got, c.coins)
		}
		if got, err := ParseCoins(c.coins); err != nil || got != c.lamports {
			t.Errorf("ParseCoins(%s) = %d, %v", c.coins, got, err)
		}
	}
	for _, bad := range []string{"", "-1", "1e9", "0.0000000001", ".5", "5.", "1,5", "18446744073.709551616", "99999999999999999999", " 1"} {
		if _, err := ParseCoins(bad); !errors.Is(err, ErrBadAmount) {
			t.Errorf("ParseCoins(%q) accepted", bad)
		}
	}
}

// TestParseUnits reads token amounts with their own decimals: USDC's six.
func TestParseUnits(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]uint64{"0.01": 10_000, "1": 1_000_000, "0.000001": 1, "12.5": 12_500_000} {
		if got, err := ParseUnits(s, 6); err != nil || got != want {
			t.Errorf("ParseUnits(%s, 6) = %d, %v", s, got, err)
		}
	}
	for _, bad := range []string{"0.0000001", "", "-1", "1e6", "18446744073709.551616"} {
		if _, err := ParseUnits(bad, 6); !errors.Is(err, ErrBadAmount) {
			t.Errorf("ParseUnits(%q, 6) accepted", bad)
		}
	}
}

func TestPayLink(t *testing.T) {
	t.Parallel()
	p := PayLink{Address: addr, Lamports: 5000, Label: "/v1/echo skill", Memo: "x4_a-b_c"}
	s := p.String()
	if s != "solana:"+addr+"?amount=0.000005&label=%2Fv1%2Fecho+skill&memo=x4_a-b_c" {
		t.Fatalf("link %s", s)
	}
	if back, err := ParsePayLink(s); err != nil || back != p {
		t.Fatalf("round trip: %+v %v", back, err)
	}
	for _, bad := range []string{
		"", "bitcoin:" + addr + "?amount=1", "solana:notanaddress?amount=1", "solana:" + addr,
		"solana:" + addr + "?amount=1&amount=2", "solana:" + addr + "?amount=1&spl-token=" + addr,
		"solana:" + addr + "?amount=abc", "solana:" + addr + "?amount=1&memo=" + strings.Repeat("m", 300),
		"solana:" + addr + "?amount=1&%zz",
	} {
		if _, err := ParsePayLink(bad); !errors.Is(err, ErrBadPayLink) {
			t.Errorf("ParsePayLink(%q) = %v", bad, err)
		}
	}
}

func FuzzParsePayLink(f *testing.F) {
	f.Add(PayLink{Address: addr, Lamports: 1, Label: "l", Memo: "m"}.String())
	f.Add("solana:" + addr + "?amount=0.5")
	f.Add("solana:?")
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePayLink(s)
		if err != nil {
			return
		}
		back, err := ParsePayLink(p.String())
		if err != nil || back != p {
			t.Fatalf("%q parsed to %+v, which does not round-trip (%+v, %v)", s, p, back, err)
		}
	})
}

func TestParseChallengeShapes(t *testing.T) {
	t.Parallel()
	exp := time.Unix(1_900_000_000, 0).UTC()
	h := http.Header{}
	emitted := BuildChallenge(h, Offer{Network: NetworkDevnet, PayTo: addr, Lamports: 7, Nonce: "n1", Resource: "/v1/s", ExpiresAt: exp}, "payment_required", "pay")
	shapeB := fmt.Sprintf(`{"x402Version":1,"accepts":[{"scheme":"exact","network":"chain-devnet","address":%q,"amount":7,"currency":"lamports","nonce":"n1","expiresAt":%q}],"chainPayUrl":"solana:%s?amount=0.000000007&memo=n1","nonce":"n1"}`, addr, exp.Format(time.RFC3339), addr)
	shapeBTopNonce := fmt.Sprintf(`{"x402Version":1,"accepts":[{"scheme":"exact","network":"chain-devnet","address":%q,"amount":"7","currency":"lamports","expiresAt":%d}],"nonce":"n1"}`, addr, exp.Unix())
	for name, c := range map[string]struct {
		h    http.Header
		body string
	}{
		"emitted (A)":   {nil, string(emitted)},
		"B":             {nil, shapeB},
		"B, top nonce":  {nil, shapeBTopNonce},
		"header form":   {h, ""},
		"header, junk":  {h, "<html>402</html>"},
		"header, empty": {h, `{"x402Version":1,"accepts":[]}`},
	} {
		ch, err := ParseChallenge(c.h, []byte(c.body))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		o := ch.Offers[0]
		if o.Network != NetworkDevnet || o.PayTo != addr || o.Lamports != 7 || o.Nonce != "n1" || !o.ExpiresAt.Equal(exp) {
			t.Errorf("%s: offer %+v", name, o)
		}
	}
	for _, bad := range []string{``, `{}`, `{"x402Version":2,"accepts":[{"network":"n","payTo":"` + addr + `","lamports":"1","nonce":"n"}]}`,
		`{"accepts":[{"network":"n","address":"` + addr + `","amount":1,"currency":"USDC","nonce":"n"}]}`,
		`{"accepts":[{"network":"n","payTo":"nope","lamports":"1","nonce":"n"}]}`,
		`{"accepts":[{"network":"n","payTo":"` + addr + `","lamports":"0","nonce":"n"}]}`,
		`{"accepts":[{"network":"n","payTo":"` + addr + `","lamports":"1","nonce":"has space"}]}`} {
		if _, err := ParseChallenge(nil, []byte(bad)); !errors.Is(err, ErrBadChallenge) {
			t.Errorf("ParseChallenge(%s) = %v", bad, err)
		}
	}
}

func FuzzParseChallenge(f *testing.F) {
	f.Add(BuildChallenge(http.Header{}, Offer{Network: NetworkDevnet, PayTo: addr, Lamports: 7, Nonce: "n1"}, "c", "d"), "", "")
	f.Add([]byte(`{"x402Version":1,"accepts":[{"address":"`+addr+`","amount":"7","network":"x"}],"nonce":"n"}`), "5", "n")
	f.Add([]byte(`[]`), "abc", "")
	f.Fuzz(func(t *testing.T, body []byte, amount, nonce string) {
		h := http.Header{}
		h.Set(HeaderPaymentNetwork, NetworkDevnet)
		h.Set(HeaderPaymentAddress, addr)
		h.Set(HeaderPaymentAmount, amount)
		h.Set(HeaderPaymentNonce, nonce)
		c, err := ParseChallenge(h, body)
		if err != nil {
			return
		}
		for _, o := range c.Offers {
			if !o.valid() {
				t.Fatalf("accepted an invalid offer %+v", o)
			}
		}
	})
}

func TestPricesWireForms(t *testing.T) {
	t.Parallel()
	var one, many Prices
	if err := json.Unmarshal([]byte(`{"unit":"request","amount":5,"currency":"lamports","network":"chain"}`), &one); err != nil || len(one) != 1 {
		t.Fatalf("object: %v %v", one, err)
	}
	if err := json.Unmarshal([]byte(`[{"unit":"request","amount":5,"currency":"lamports","network":"chain"},{"unit":"request","amount":1,"currency":"lamports","network":"chain-devnet"}]`), &many); err != nil || len(many) != 2 {
		t.Fatalf("array: %v %v", many, err)
	}
	if p, ok := many.For(NetworkDevnet); !ok || p.Amount != 1 {
		t.Fatalf("For: %v", p)
	}
	if b, _ := json.Marshal(one); b[0] != '{' {
		t.Fatalf("one row marshals as %s", b)
	}
	if b, _ := json.Marshal(many); b[0] != '[' {
		t.Fatalf("rows marshal as %s", b)
	}
	if b, _ := json.Marshal(Prices{Free()}); string(b) != `{"unit":"request","amount":0,"currency":"free"}` {
		t.Fatalf("free row %s", b)
	}
}

func TestCardOfFreeAndPaidAgents(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r := h.call(nil, "GET", "/.well-known/agent.json", "")
	if r.status != 200 {
		t.Fatal(r.raw)
	}
	var card Card
	json.Unmarshal([]byte(r.raw), &card)
	if card.URL != h.srv.URL || card.Contact.A2A != h.srv.URL+"/.well-known/agent-card.json" || card.Payment.Wallet != h.provider.Address() ||
		card.Payment.Deposit == nil || card.Skills[0].Pricing[0].Amount != testPrice || card.Skills[1].Pricing[0].Currency != CurrencyFree {
		t.Fatalf("card %s", r.raw)
	}
	free, err := NewAgent(AgentConfig{Card: Card{Name: "f"}, Skills: []Skill{{ID: "s", Handler: func(context.Context, json.RawMessage) (any, error) { return 1, nil }}}}, AgentDeps{DB: storetest.DB(t)})
	if err != nil {
		t.Fatal(err)
	}
	c := free.Card()
	if len(c.Pricing) != 1 || !c.Pricing[0].IsFree() || c.Pricing[0].Unit != UnitRequest || c.Payment != nil {
		t.Fatalf("free card %+v", c)
	}
}

func TestAgentConfigRefuses(t *testing.T) {
	t.Parallel()
	ok := func(context.Context, json.RawMessage) (any, error) { return nil, nil }
	// paying is an agent whose payment configuration edit changed.
	paying := func(edit func(*PaymentConfig)) AgentConfig {
		pc := &PaymentConfig{Network: NetworkDevnet, Wallet: addr, RPCURL: "http://x"}
		edit(pc)
		return AgentConfig{Card: Card{Name: "a"}, Skills: []Skill{{ID: "s", Handler: ok}}, Payment: pc}
	}
	for name, cfg := range map[string]AgentConfig{
		"no skills":          {Card: Card{Name: "a"}},
		"reserved id":        {Card: Card{Name: "a"}, Skills: []Skill{{ID: "whoami", Handler: ok}}},
		"reserved 2":         {Card: Card{Name: "a"}, Skills: []Skill{{ID: "agents", Handler: ok}}},
		"bad id":             {Card: Card{Name: "a"}, Skills: []Skill{{ID: "Echo/x", Handler: ok}}},
		"no handler":         {Card: Card{Name: "a"}, Skills: []Skill{{ID: "s"}}},
		"duplicate":          {Card: Card{Name: "a"}, Skills: []Skill{{ID: "s", Handler: ok}, {ID: "s", Handler: ok}}},
		"paid, no pay":       {Card: Card{Name: "a"}, Skills: []Skill{{ID: "s", Handler: ok, Pricing: Prices{Lamports(1, NetworkDevnet)}}}},
		"no network":         {Card: Card{Name: "a"}, Skills: []Skill{{ID: "s", Handler: ok, Pricing: Prices{{Unit: "request", Amount: 1, Currency: "lamports"}}}}},
		"poll too fast":      {Card: Card{Name: "a"}, Skills: []Skill{{ID: "s", Handler: ok}}, Payment: &PaymentConfig{Network: NetworkDevnet, Wallet: addr, RPCURL: "http://x", PollInterval: time.Second}},
		"unfunded per IP":    paying(func(pc *PaymentConfig) { pc.MaxUnfundedPerIP = -1 }),
		"negative A2A tasks": {Card: Card{Name: "a"}, Skills: []Skill{{ID: "s", Handler: ok}}, A2A: A2AConfig{MaxTasks: -1}},
		"top-ups per key":    paying(func(pc *PaymentConfig) { pc.TopupsPerHourPerKey = -1 }),
		"unfunded accounts":  paying(func(pc *PaymentConfig) { pc.MaxUnfundedAccounts = -1 }),
		"account TTL":        paying(func(pc *PaymentConfig) { pc.UnfundedAccountTTL = time.Minute }),
		"invoice retention":  paying(func(pc *PaymentConfig) { pc.InvoiceRetention = time.Minute }),
	} {
		if err := cfg.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestWalletNeverShown(t *testing.T) {
	w := NewWallet()
	secret := string(w.MarshalKeyFile())
	back, err := ParseWallet([]byte(secret))
	if err != nil || back.Address() != w.Address() {
		t.Fatal(err)
	}
	var sb strings.Builder
	log := slog.New(slog.NewJSONHandler(&sb, nil))
	log.Info("x", "wallet", w)
	j, _ := json.Marshal(struct{ W *Wallet }{w})
	for _, s := range []string{fmt.Sprint(w), fmt.Sprintf("%v %+v %#v %s", w, w, w, w), sb.String(), string(j)} {
		if strings.Contains(s, secret[1:20]) || strings.Contains(s, w.key.String()) || !strings.Contains(s, w.Address()) {
			t.Fatalf("wallet rendering reveals or hides the wrong thing: %s", s)
		}
	}
	t.Setenv(WalletEnv, w.key.String())
	if e, err := WalletFromEnv(); err != nil || e.Address() != w.Address() {
		t.Fatalf("from env: %v", err)
	}
	if _, err := ParseWallet([]byte("[1,2,3]")); !errors.Is(err, ErrBadWallet) {
		t.Fatal("short keypair accepted")
	}
}

// TestBadInput: every endpoint answers bad input with 4xx {detail, code}.
func TestBadInput(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	k := identity.GenerateKey()
	for _, c := range []struct {
		key                bool
		method, path, body string
		hdr                []string
		status             int
	}{
		{false, "POST", "/v1/echo", `{"x":`, nil, 400},
		{false, "POST", "/v1/echo", strings.Repeat("a", 70<<10), nil, 413},
		{false, "POST", "/v1/echo", `{}`, []string{identity.SigHeaderName, "v1 junk"}, 401},
		{false, "POST", "/v1/ping", `not json`, nil, 400},
		{false, "POST", "/v1/echo", `{}`, []string{HeaderAPIKey, "tk_nope"}, 401},
		{false, "POST", "/v1/echo", `{}`, []string{HeaderPaymentProof, strings.Repeat("1", 500)}, 402},
		{false, "POST", "/v1/echo", `{}`, []string{HeaderPaymentProof, "1111", HeaderPaymentNonce, "has space"}, 402},
		{false, "GET", "/v1/whoami", "", nil, 401},
		{false, "POST", "/v1/topup", `{"payer_address":"` + addr + `"}`, nil, 401},
		{true, "POST", "/v1/topup", `{"payer_address":"nope"}`, nil, 400},
		{true, "POST", "/v1/topup", `[]`, nil, 400},
		{true, "POST", "/v1/topup", ``, nil, 400},
		{false, "GET", "/v1/balance", "", nil, 401},
		{false, "GET", "/v1/balance", "", []string{HeaderAPIKey, strings.Repeat("k", 4000)}, 401},
	} {
		var key ed25519.PrivateKey
		if c.key {
			key = k
		}
		r := h.call(key, c.method, c.path, c.body, c.hdr...)
		if r.status != c.status || r.body["code"] == nil || r.body["detail"] == nil {
			t.Errorf("%s %s %.40q: %d %.200s, want %d with code and detail", c.method, c.path, c.body, r.status, r.raw, c.status)
		}
	}
	// Two Mesh-Sig headers, each valid on its own: which signed the call
	// is ambiguous, so neither is taken.
	sigOf := func(key ed25519.PrivateKey) string {
		return identity.Sign(key, "GET", "/v1/whoami", nil, h.clock.Now())
	}
	if r := h.call(nil, "GET", "/v1/whoami", "", identity.SigHeaderName, sigOf(k), identity.SigHeaderName, sigOf(identity.GenerateKey())); r.status != 401 || r.body["code"] != "invalid_signature" {
		t.Fatalf("whoami with two Mesh-Sig headers: %d %s", r.status, r.raw)
	}
	r := h.call(k, "GET", "/v1/whoami", "")
	if r.status != 200 || r.body["verified"] != true || r.body["did"] != identity.DIDFromPublicKey(k.Public().(ed25519.PublicKey)) || r.body["agent_id"] != nil {
		t.Fatalf("whoami: %s", r.raw)
	}
}

// FuzzOpenNonce: whatever a caller sends as a nonce, opening it never
// panics, and only a nonce issued to the same binding opens.
func FuzzOpenNonce(f *testing.F) {
	key := bytes.Repeat([]byte{7}, macKeySize)
	b := bindingOf("echo", []byte(`{}`), Caller{})
	good := newNonce(key, NetworkDevnet, addr, nonceTerms{Expires: time.Unix(1_900_000_000, 0), Lamports: 5000}, b)
	f.Add(good)
	f.Add("x4_")
	f.Add("x4_AQ")
	f.Add(good[:len(good)-1] + "A")
	f.Fuzz(func(t *testing.T, nonce string) {
		terms, err := openNonce(key, NetworkDevnet, addr, nonce, b)
		if err != nil {
			return
		}
		// Only nonces issued here open; each worker issues its own (random
		// salt), so the terms, not the string, are what can be compared,
		// and the nonce opens for no other request, wallet or key.
		if terms.Lamports != 5000 || terms.Expires.Unix() != 1_900_000_000 || terms.Keyed {
			t.Fatalf("nonce %q opened with terms %+v", nonce, terms)
		}
		other := bindingOf("echo", []byte(`{"x":1}`), Caller{})
		otherKey := bytes.Repeat([]byte{8}, macKeySize)
		if _, err := openNonce(key, NetworkDevnet, addr, nonce, other); err == nil {
			t.Fatalf("nonce %q opened for another request", nonce)
		}
		if _, err := openNonce(otherKey, NetworkDevnet, addr, nonce, b); err == nil {
			t.Fatalf("nonce %q opened under another key", nonce)
		}
	})
}
