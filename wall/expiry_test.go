package wall

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestProposedTakesOnlySelfCertifyingOps: the directory takes from other
// nodes only creations and deletions, and a public creation gets the
// directory's own join deadline whatever the proposer wrote; joins and
// expiries are the directory's alone.
func TestProposedTakesOnlySelfCertifyingOps(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.JoinWindow = time.Hour })
	at := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	create := `{"create":{"body":"{}","sig":"x"},"join_by":1}`
	op, err := h.svc.Proposed(json.RawMessage(create), at)
	if err != nil || op.Create == nil || op.JoinBy != at.Add(time.Hour).UnixNano() {
		t.Fatalf("a creation: %+v, %v; want the directory's deadline", op, err)
	}
	op, err = h.svc.Proposed(json.RawMessage(`{"delete":{"body":"{}","sig":"x"},"join_by":5}`), at)
	if err != nil || op.Delete == nil || op.JoinBy != 0 {
		t.Fatalf("a deletion: %+v, %v", op, err)
	}
	for _, raw := range []string{`{"joined":"c_x"}`, `{"expire":["c_x"]}`, `{}`, `{"create":{"body":"{}","sig":"x"},"delete":{"body":"{}","sig":"x"}}`,
		`{"create":{"body":"{}","sig":"x"},"expire":["c_x"]}`, `[]`,
		`{"create":{"body":"` + strings.Repeat("x", MaxRecordSize+1) + `","sig":"x"}}`} {
		if op, err := h.svc.Proposed(json.RawMessage(raw), at); err == nil {
			t.Errorf("Proposed(%s) = %+v, want a refusal", raw, op)
		}
	}
	none := newHarness(t, nil) // no join window: clusters never expire
	if op, _ := none.svc.Proposed(json.RawMessage(create), at); op.JoinBy != 0 {
		t.Errorf("without a join window a creation gets deadline %d", op.JoinBy)
	}
}
