package registryapi

import (
	"math"
	"testing"
	"time"

	"github.com/agentmesh/mesh/identity"
)

const goodReport = `{"success":true,"latency_ms":500,"quality":5,"paid":true,"disputed":false,"capability":"echo"}`

func TestFeedbackAuth(t *testing.T) {
	h := newHarness(t)
	key := identity.GenerateKey()
	h.registerKeyed("target", key)
	path := "/v1/agents/target/feedback"
	h.want(h.do("POST", path, goodReport), 401, "signature_required")
	h.want(h.signed(key, "POST", path, goodReport), 403, "self_rating")
	caller := identity.GenerateKey()
	h.want(h.signed(caller, "POST", "/v1/agents/nobody/feedback", goodReport), 404, "agent_not_found")

	// A replayed request is refused; so is a stale or future one.
	sig := identity.Sign(caller, "POST", path, []byte(goodReport), h.clock.Now())
	h.want(h.do("POST", path, goodReport, identity.SigHeaderName, sig), 200, "")
	h.want(h.do("POST", path, goodReport, identity.SigHeaderName, sig), 401, "nonce_reused")
	h.clock.Advance(identity.ClockTolerance)
	h.want(h.do("POST", path, goodReport, identity.SigHeaderName, sig), 401, "nonce_reused")
	h.clock.Advance(time.Second)
	h.want(h.do("POST", path, goodReport, identity.SigHeaderName, sig), 401, "stale_signature")
	future := identity.Sign(caller, "POST", path, []byte(goodReport), h.clock.Now().Add(121*time.Second))
	h.want(h.do("POST", path, goodReport, identity.SigHeaderName, future), 401, "stale_signature")
	// The signature covers the query string.
	qsig := identity.Sign(caller, "POST", path, []byte(goodReport), h.clock.Now())
	h.want(h.do("POST", path+"?x=1", goodReport, identity.SigHeaderName, qsig), 401, "invalid_signature")
	h.want(h.signed(caller, "POST", path+"?x=1", goodReport), 200, "")
}

func TestFeedbackDailyLimitAndWindow(t *testing.T) {
	h := newHarness(t)
	h.registerPlain("target")
	// Start close to midnight UTC, to cross a day boundary.
	h.clock.Advance(11*time.Hour + 50*time.Minute)
	path := "/v1/agents/target/feedback"
	caller, other := identity.GenerateKey(), identity.GenerateKey()
	agentN := func() any { // the agent's record shows its reputation too
		return h.want(h.do("GET", "/v1/agents/target", ""), 200, "").body["reputation"].(map[string]any)["n"]
	}
	if n := agentN(); n != 0.0 {
		t.Fatalf("reputation before any report: %v", n)
	}
	for i := 1; i <= ReportsPerDay+2; i++ {
		r := h.want(h.signed(caller, "POST", path, goodReport), 200, "")
		rep := r.body["reputation"].(map[string]any)
		wantN := float64(min(i, ReportsPerDay))
		if r.body["counted"] != (i <= ReportsPerDay) || rep["n"] != wantN || r.str("status") != "recorded" {
			t.Fatalf("report %d: %s", i, r.raw)
		}
	}
	if n := agentN(); n != float64(ReportsPerDay) {
		t.Fatalf("the agent's record counts %v reports", n)
	}
	// Another reporter has its own allowance.
	h.want(h.signed(other, "POST", path, `{"success":false,"latency_ms":30000}`), 200, "")
	// A new UTC day: the first reporter counts again.
	h.clock.Advance(15 * time.Minute)
	r := h.want(h.signed(caller, "POST", path, goodReport), 200, "")
	if r.body["counted"] != true {
		t.Fatalf("next day: %s", r.raw)
	}
	rp := h.want(h.do("GET", "/v1/agents/target/reputation", ""), 200, "")
	if rp.body["n"] != 7.0 || rp.str("agent") != "target" || rp.body["updated_at"] == nil {
		t.Fatalf("reputation %s", rp.raw)
	}
	// 6 perfect reports and 1 failure at 30 s without quality or payment.
	wantScore := (0.4*6/7 + 0.3*1 + 0.2*6/7 + 0.1*1) / 1.0
	if s := rp.body["score"].(float64); math.Abs(s-wantScore) > 1e-9 {
		t.Fatalf("score %v, want %v", s, wantScore)
	}
	// 90 days after the first six, only the last one remains in the window.
	h.clock.Advance(ReputationWindow - 10*time.Minute)
	if rp := h.do("GET", "/v1/agents/target/reputation", ""); rp.body["n"] != 1.0 {
		t.Fatalf("window: %s", rp.raw)
	}
	h.clock.Advance(time.Hour)
	rp = h.do("GET", "/v1/agents/target/reputation", "")
	if rp.body["n"] != 0.0 || rp.body["score"] != nil || rp.body["updated_at"] != nil {
		t.Fatalf("empty window: %s", rp.raw)
	}
}

func TestReputationResetsWithNewOwner(t *testing.T) {
	h := newHarness(t)
	_, tok := h.registerPlain("flip")
	h.want(h.signed(identity.GenerateKey(), "POST", "/v1/agents/flip/feedback", goodReport), 200, "")
	h.want(h.do("DELETE", "/v1/agents/me", "", bearer(tok)...), 200, "")
	h.want(h.do("GET", "/v1/agents/flip/reputation", ""), 404, "agent_not_found")
	h.registerPlain("flip")
	if rp := h.do("GET", "/v1/agents/flip/reputation", ""); rp.body["n"] != 0.0 {
		t.Fatalf("a new owner inherited reports: %s", rp.raw)
	}
}
