package registryapi

import (
	"crypto/ed25519"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/agentmesh/mesh/identity"
)

const feedbackPath = "/v1/agents/target/feedback"

// receiptFor is the receipt agent key signs for a call payer paid.
func receiptFor(agentKey ed25519.PrivateKey, agent string, payer ed25519.PrivateKey, ref string, at time.Time) string {
	return identity.SignReceipt(agentKey, identity.Receipt{Agent: agent, Payer: identity.EncodePublicKey(payer.Public().(ed25519.PublicKey)),
		By: "x402", Ref: ref, Lamports: 5000, At: at.Unix()})
}

// report is a report body; with a receipt when receipt is not "".
func report(success bool, receipt string) string {
	body := fmt.Sprintf(`{"success":%v,"latency_ms":500,"quality":%d`, success, map[bool]int{true: 5, false: 1}[success])
	if receipt != "" {
		body += `,"receipt":"` + receipt + `"`
	}
	return body + "}"
}

// weightedScore reads the target's weighted score (0 when it has none).
func (h *harness) weightedScore() float64 {
	h.t.Helper()
	r := h.want(h.do("GET", "/v1/agents/target/reputation", ""), 200, "")
	s, _ := r.body["weighted"].(map[string]any)["score"].(float64)
	return s
}

// TestFreshKeysWeighLittle is issue 19's test: three keys made a minute
// ago move the weighted score by less than one reporter who paid the
// agent does, whether they praise it from nothing or pan it after paying
// customers praised it; the spec's rollup counts them all alike.
func TestFreshKeysWeighLittle(t *testing.T) {
	for _, tc := range []struct {
		name     string
		customer int  // paying customers who praised the agent first
		success  bool // what the newcomers report
	}{
		{"praise from nothing", 0, true},
		{"panning after two customers", 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			move := func(fresh bool) (weighted, spec float64) {
				h := newHarness(t)
				agentKey := identity.GenerateKey()
				h.registerKeyed("target", agentKey)
				for i := range tc.customer {
					c := identity.GenerateKey()
					h.want(h.signed(c, "POST", feedbackPath, report(true, receiptFor(agentKey, "target", c, fmt.Sprint("tx", i), h.clock.Now()))), 200, "")
				}
				before := h.weightedScore()
				specBefore := h.do("GET", "/v1/agents/target/reputation", "").body["score"]
				if fresh {
					for range 3 {
						h.want(h.signed(identity.GenerateKey(), "POST", feedbackPath, report(tc.success, "")), 200, "")
					}
				} else {
					c := identity.GenerateKey()
					h.want(h.signed(c, "POST", feedbackPath, report(tc.success, receiptFor(agentKey, "target", c, "tx-new", h.clock.Now()))), 200, "")
				}
				after := h.want(h.do("GET", "/v1/agents/target/reputation", ""), 200, "")
				specAfter, _ := after.body["score"].(float64)
				specFrom, _ := specBefore.(float64)
				return abs(h.weightedScore() - before), abs(specAfter - specFrom)
			}
			freshW, freshSpec := move(true)
			paidW, _ := move(false)
			if freshW >= paidW {
				t.Fatalf("three fresh keys moved the weighted score by %.3f, one paying reporter by %.3f", freshW, paidW)
			}
			if freshSpec == 0 {
				t.Fatal("the spec's rollup ignored the fresh keys: it must count every report alike")
			}
		})
	}
}

func abs(x float64) float64 { return max(x, -x) }

// TestReceipts: a receipt must be signed by the target's registered key,
// name the target and the report's signer, and date from the window; each
// weighs fully once. Both views are shown wherever the reputation is.
func TestReceipts(t *testing.T) {
	h := newHarness(t)
	agentKey := identity.GenerateKey()
	h.registerKeyed("target", agentKey)
	payer := identity.GenerateKey()
	now := h.clock.Now()
	for name, rc := range map[string]string{
		"signed by another key": receiptFor(identity.GenerateKey(), "target", payer, "tx1", now),
		"for another agent":     receiptFor(agentKey, "other", payer, "tx1", now),
		"for another payer":     receiptFor(agentKey, "target", identity.GenerateKey(), "tx1", now),
		"from the future":       receiptFor(agentKey, "target", payer, "tx1", now.Add(time.Hour)),
		"older than the window": receiptFor(agentKey, "target", payer, "tx1", now.Add(-ReputationWindow-time.Hour)),
		"garbage":               "abc.def",
	} {
		if r := h.signed(payer, "POST", feedbackPath, report(true, rc)); r.status != 400 || r.str("code") != "invalid_receipt" {
			t.Errorf("receipt %s: %d %s", name, r.status, r.raw)
		}
	}
	good := receiptFor(agentKey, "target", payer, "tx1", now)
	r := h.want(h.signed(payer, "POST", feedbackPath, report(true, good)), 200, "")
	if w := r.body["weighted_reputation"].(map[string]any); w["paid"] != 1.0 || w["weight"] != 1.0 {
		t.Fatalf("feedback answer: %s", r.raw)
	}
	// The same receipt again: counted, but as a report bound to no payment.
	h.want(h.signed(payer, "POST", feedbackPath, report(true, good)), 200, "")
	rp := h.want(h.do("GET", "/v1/agents/target/reputation", ""), 200, "")
	w := rp.body["weighted"].(map[string]any)
	if rp.body["n"] != 2.0 || w["n"] != 2.0 || w["paid"] != 1.0 || w["weight"] != 1.1 {
		t.Fatalf("a receipt cited twice: %s", rp.raw)
	}
	// 1.1 of weight, all perfect: score 1.1 / (1.1 + PriorWeight).
	if s := w["score"].(float64); abs(s-1.1/2.1) > 1e-9 || rp.body["score"] != 1.0 {
		t.Fatalf("weighted score %v, spec score %v", s, rp.body["score"])
	}
	// The spec's read form keeps its fields; the weighted view is beside.
	if got := slices.Sorted(maps.Keys(rp.body)); fmt.Sprint(got) != "[agent dims n score updated_at weighted]" {
		t.Fatalf("reputation fields %v", got)
	}
	for _, path := range []string{"/v1/agents/target", "/v1/agents/target/identity"} {
		v := h.want(h.do("GET", path, ""), 200, "").body
		spec, weighted := v["reputation"].(map[string]any), v["weighted_reputation"].(map[string]any)
		if fmt.Sprint(slices.Sorted(maps.Keys(spec))) != "[dims n score]" || spec["n"] != 2.0 || weighted["paid"] != 1.0 {
			t.Errorf("%s: reputation %v, weighted %v", path, spec, weighted)
		}
	}
}
