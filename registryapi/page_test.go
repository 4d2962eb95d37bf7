package registryapi

import (
	"errors"
	"testing"
	"time"

	"github.com/agentmesh/mesh/internal/httpx"
)

func TestWantsJSON(t *testing.T) {
	for accept, want := range map[string]bool{
		"":                 false,
		"*/*":              false,
		"application/json": true,
		"application/ld+json;q=0.9, text/html;q=0.5":                      true,
		"text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8": false,
		"application/json;q=0.5, text/html":                               false,
		"application/json, text/html":                                     false,
		"application/json;q=0, */*":                                       false,
		"text/plain, application/json;q=0.2":                              true,
		"garbage;;;, application/json":                                    true,
		"application/json;q=nonsense":                                     true,
	} {
		if got := wantsJSON(accept); got != want {
			t.Errorf("Accept %q: JSON %v, want %v", accept, got, want)
		}
	}
}

// TestLivenessTransitions: a failure starts a run of failures that the
// next success ends; last reachable and last failure stay.
func TestLivenessTransitions(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	down := errors.New("unreachable: connection refused")
	var l Liveness
	l = l.after(at(0), nil)
	if !l.IsReachable() || l.Reachable != at(0).Unix() || l.FailingSince != 0 {
		t.Fatalf("after a success: %+v", l)
	}
	l = l.after(at(10), down)
	l = l.after(at(20), errors.New("unexpected status 500"))
	if l.IsReachable() || l.FailingSince != at(10).Unix() || l.Failed != at(20).Unix() || l.Reason != "unexpected status 500" || l.Reachable != at(0).Unix() {
		t.Fatalf("after two failures: %+v", l)
	}
	l = l.after(at(30), nil)
	if !l.IsReachable() || l.FailingSince != 0 || l.Failed != at(20).Unix() || l.Checked != at(30).Unix() {
		t.Fatalf("after recovering: %+v", l)
	}
	long := errors.New(string(make([]byte, 500)) + "é")
	if r := l.after(at(40), long).Reason; len(r) > maxReasonLen+len("…") {
		t.Fatalf("reason of %d bytes kept", len(r))
	}
}

// TestMirrorCompletesA2AFields: a card lacking what A2A requires gets it,
// and keeps every field it has, unknown ones included.
func TestMirrorCompletesA2AFields(t *testing.T) {
	raw, _, err := parseFullCard([]byte(`{"name":"N","x-extra":{"a":1},"version":"2","skills":[{"id":"s1"}],"pricing":{"unit":"request","amount":10,"currency":"lamports"}}`))
	if err != nil {
		t.Fatal(err)
	}
	a := &Agent{ID: "agent-1", Reg: 1, Endpoint: "https://a.example", Capabilities: []string{"c1"}, FullCard: raw}
	m, err := mirrorCard(a)
	if err != nil {
		t.Fatal(err)
	}
	skill := m["skills"].([]any)[0].(map[string]any)
	if m["name"] != "N" || m["version"] != "2" || m["url"] != "https://a.example" || m["protocolVersion"] != A2AProtocolVersion ||
		m["x-extra"] == nil || m["description"] != "" || skill["name"] != "s1" || skill["tags"] == nil {
		t.Fatalf("mirror %v", m)
	}
	if _, err := mirrorCard(&Agent{ID: "listed", Listing: &Listing{Name: "L"}}); !errors.Is(err, ErrNoCard) {
		t.Fatalf("a listing's card: %v", err)
	}
	for _, bad := range []string{`[]`, `"x"`, `{"skills":[{"name":"no id"}]}`, `{"capabilities":[]}`, `{"pricing":[1]}`, `{`} {
		if _, _, err := parseFullCard([]byte(bad)); err == nil {
			t.Errorf("card %s was taken", bad)
		}
	}
}

// FuzzFullCard: any bytes are refused with a client answer, or kept as a
// card that the mirror and the page's reads take without failing.
func FuzzFullCard(f *testing.F) {
	for _, s := range []string{`{"name":"a","skills":[{"id":"x","tags":["t"]}],"pricing":{"unit":"request","amount":1,"currency":"lamports"}}`,
		`{"pricing":[{"unit":"request","amount":0,"currency":"free"}],"capabilities":{}}`, `{}`, `[`, `null`, `{"skills":[1]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		raw, _, err := parseFullCard(b)
		if err != nil {
			if _, ok := httpx.AsError(err); !ok {
				t.Fatalf("%q: error without a client answer: %v", b, err)
			}
			return
		}
		a := &Agent{ID: "a", Reg: 1, FullCard: raw, Capabilities: []string{"c"}}
		if _, err := mirrorCard(a); err != nil {
			t.Fatalf("%q kept but not mirrored: %v", b, err)
		}
		a.texts()
		a.skills()
		a.pricing()
	})
}
