package identity

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

var testNow = time.Unix(1_800_000_000, 0)

func TestSignVerifyRoundTrip(t *testing.T) {
	key := GenerateKey()
	body := []byte(`{"success":true}`)
	hdr := Sign(key, "POST", "/v1/agents/a/feedback", body, testNow)
	h, err := Verify(hdr, "POST", "/v1/agents/a/feedback", body, testNow.Add(119*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if !h.Pubkey.Equal(key.Public()) || h.TS != testNow.Unix() || len(h.Nonce) != 32 {
		t.Fatalf("parsed header %+v", h)
	}
	if again := Sign(key, "POST", "/x", body, testNow); strings.Fields(again)[3] == h.Nonce {
		t.Fatal("two signatures share a nonce")
	}
}

// TestSigningStringLayout pins the exact signed bytes of spec section 5.3.
func TestSigningStringLayout(t *testing.T) {
	got := string(SigningString("GET", "/v1/agents/x?y=1", nil, 1700000000, "abc"))
	want := "MESH1\nGET\n/v1/agents/x?y=1\n" +
		"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n1700000000\nabc"
	if got != want {
		t.Fatalf("signing string\n%q\nwant\n%q", got, want)
	}
}

func TestVerifyRejects(t *testing.T) {
	key := GenerateKey()
	other := GenerateKey()
	body := []byte(`{"a":1}`)
	good := Sign(key, "POST", "/p", body, testNow)
	f := strings.Fields(good)
	forged := SigHeader{Pubkey: key.Public().(ed25519.PublicKey), TS: testNow.Unix(), Nonce: "n1",
		Sig: ed25519.Sign(other, SigningString("POST", "/p", body, testNow.Unix(), "n1"))}.String()
	cases := []struct {
		name, hdr, method, path string
		body                    []byte
		now                     time.Time
		want                    error
	}{
		{"empty", "", "POST", "/p", body, testNow, ErrBadSigHeader},
		{"four fields", strings.Join(f[:4], " "), "POST", "/p", body, testNow, ErrBadSigHeader},
		{"version", "v2 " + strings.Join(f[1:], " "), "POST", "/p", body, testNow, ErrBadSigHeader},
		{"pubkey not base64", "v1 %%% " + strings.Join(f[2:], " "), "POST", "/p", body, testNow, ErrBadSigHeader},
		{"pubkey 31 bytes", "v1 " + base64.StdEncoding.EncodeToString(make([]byte, 31)) + " " + strings.Join(f[2:], " "), "POST", "/p", body, testNow, ErrBadSigHeader},
		{"ts not integer", strings.Join([]string{f[0], f[1], "1.5", f[3], f[4]}, " "), "POST", "/p", body, testNow, ErrBadSigHeader},
		{"ts negative", strings.Join([]string{f[0], f[1], "-5", f[3], f[4]}, " "), "POST", "/p", body, testNow, ErrBadSigHeader},
		{"sig short", strings.Join([]string{f[0], f[1], f[2], f[3], base64.StdEncoding.EncodeToString(make([]byte, 63))}, " "), "POST", "/p", body, testNow, ErrBadSigHeader},
		{"nonce too long", strings.Join([]string{f[0], f[1], f[2], strings.Repeat("n", 129), f[4]}, " "), "POST", "/p", body, testNow, ErrBadSigHeader},
		{"huge header", good + strings.Repeat(" ", 600), "POST", "/p", body, testNow, ErrBadSigHeader},
		{"stale", good, "POST", "/p", body, testNow.Add(121 * time.Second), ErrStaleSig},
		{"future", good, "POST", "/p", body, testNow.Add(-121 * time.Second), ErrStaleSig},
		{"other method", good, "PUT", "/p", body, testNow, ErrBadSignature},
		{"other path", good, "POST", "/p?x=1", body, testNow, ErrBadSignature},
		{"other body", good, "POST", "/p", []byte(`{"a":2}`), testNow, ErrBadSignature},
		{"wrong key", forged, "POST", "/p", body, testNow, ErrBadSignature},
	}
	for _, c := range cases {
		if _, err := Verify(c.hdr, c.method, c.path, c.body, c.now); !errors.Is(err, c.want) {
			t.Errorf("%s: error %v, want %v", c.name, err, c.want)
		}
	}
}

// TestBoundSignatures: a v1-bound signature verifies only for the
// receiver and api_key it names, never where only v1 is taken (Verify),
// and its signed string is v1's under another tag plus those two lines.
func TestBoundSignatures(t *testing.T) {
	key := GenerateKey()
	body := []byte(`{"x":1}`)
	at := Binding{Receiver: "https://a.example", APIKey: "tk_a"}
	hdr := SignBound(key, "POST", "/v1/echo", body, testNow, at)
	if !strings.HasPrefix(hdr, SigVersionBound+" ") {
		t.Fatalf("bound header %q", hdr)
	}
	h, err := VerifyBound(hdr, "POST", "/v1/echo", body, testNow, at)
	if err != nil || !h.Bound {
		t.Fatalf("VerifyBound: %+v %v", h, err)
	}
	for name, bd := range map[string]Binding{
		"another receiver": {Receiver: "https://b.example", APIKey: "tk_a"},
		"another api_key":  {Receiver: "https://a.example", APIKey: "tk_b"},
		"no api_key":       {Receiver: "https://a.example"},
	} {
		if _, err := VerifyBound(hdr, "POST", "/v1/echo", body, testNow, bd); !errors.Is(err, ErrBadSignature) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := Verify(hdr, "POST", "/v1/echo", body, testNow); !errors.Is(err, ErrBadSigHeader) {
		t.Errorf("Verify took a bound signature: %v", err)
	}
	// A v1 signature still verifies where bound ones are taken, unbound.
	if h, err := VerifyBound(Sign(key, "POST", "/v1/echo", body, testNow), "POST", "/v1/echo", body, testNow, at); err != nil || h.Bound {
		t.Errorf("v1 under VerifyBound: %+v %v", h, err)
	}
	// A v1 signature relabelled bound does not verify.
	if _, err := VerifyBound(strings.Replace(Sign(key, "POST", "/v1/echo", body, testNow), SigVersion, SigVersionBound, 1), "POST", "/v1/echo", body, testNow, at); !errors.Is(err, ErrBadSignature) {
		t.Errorf("v1 relabelled bound: %v", err)
	}
	got := string(BoundSigningString("GET", "/v1/balance", nil, 1700000000, "abc", Binding{Receiver: "http://127.0.0.1:8080", APIKey: "tk_1"}))
	want := "MESH1-BOUND\nGET\n/v1/balance\n" +
		"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n1700000000\nabc\nhttp://127.0.0.1:8080\ntk_1"
	if got != want {
		t.Fatalf("bound signing string\n%q\nwant\n%q", got, want)
	}
}

// TestSigOf: one Mesh-Sig header is read, two are refused.
func TestSigOf(t *testing.T) {
	h := http.Header{}
	if v, err := SigOf(h); v != "" || err != nil {
		t.Fatalf("no header: %q %v", v, err)
	}
	h.Add(SigHeaderName, "a")
	if v, err := SigOf(h); v != "a" || err != nil {
		t.Fatalf("one header: %q %v", v, err)
	}
	h.Add("mesh-sig", "b")
	if _, err := SigOf(h); !errors.Is(err, ErrAmbiguousSig) {
		t.Fatalf("two headers: %v", err)
	}
}

func TestParseAcceptsBase64Variants(t *testing.T) {
	key := GenerateKey()
	h, _ := ParseSigHeader(Sign(key, "GET", "/", nil, testNow))
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		v := "v1 " + enc.EncodeToString(h.Pubkey) + " " + strconv.FormatInt(h.TS, 10) + " " + h.Nonce + " " + enc.EncodeToString(h.Sig)
		if _, err := Verify(v, "GET", "/", nil, testNow); err != nil {
			t.Errorf("encoding %v: %v", enc, err)
		}
	}
}

func FuzzParseSigHeader(f *testing.F) {
	f.Add(Sign(GenerateKey(), "GET", "/", nil, testNow))
	f.Add("v1 a b c d")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		h, err := ParseSigHeader(s)
		if err != nil {
			return
		}
		if len(h.Pubkey) != ed25519.PublicKeySize || len(h.Sig) != ed25519.SignatureSize || h.TS <= 0 {
			t.Fatalf("accepted %q as %+v", s, h)
		}
		if _, err := ParseSigHeader(h.String()); err != nil {
			t.Fatalf("re-rendered header does not parse: %v", err)
		}
	})
}

// BenchmarkVerify and BenchmarkBareEd25519 compare Mesh-Sig verification
// with the bare signature check it wraps (target: within 1.5x).
func BenchmarkVerify(b *testing.B) {
	key := GenerateKey()
	body := []byte(`{"success":true,"latency_ms":420,"quality":5,"paid":true,"disputed":false,"capability":"echo"}`)
	hdr := Sign(key, "POST", "/v1/agents/echo/feedback", body, testNow)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Verify(hdr, "POST", "/v1/agents/echo/feedback", body, testNow); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkBareEd25519(b *testing.B) {
	key := GenerateKey()
	msg := SigningString("POST", "/v1/agents/echo/feedback", []byte(`{}`), testNow.Unix(), "0123456789abcdef0123456789abcdef")
	sig := ed25519.Sign(key, msg)
	pub := key.Public().(ed25519.PublicKey)
	for b.Loop() {
		if !ed25519.Verify(pub, msg, sig) {
			b.Fatal("bad")
		}
	}
}
