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
	t.Parallel()
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

// TestSweepSparesAClusterBeingServed: a public cluster past its join
// deadline that a node serves right now (its joined mark was never logged)
// is logged as joined instead of expiring; one nobody serves expires, and
// its slug is free again.
func TestSweepSparesAClusterBeingServed(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	ctx := t.Context()
	now := time.Now()
	create := func(name string) *Record {
		t.Helper()
		rec, signed, _, _, err := newCluster(Public, Meta{Name: name}, now.UnixMilli())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.svc.cfg.Log.Propose(ctx, Kind, now.UnixNano(), Op{Create: &signed, JoinBy: now.Add(-time.Second).UnixNano()}); err != nil {
			t.Fatal(err)
		}
		return rec
	}
	served := create("Served")
	// A registration that came before the cluster's record was applied
	// here: the hook found nothing to mark, so only the sweep's check can.
	if _, err := h.host.Rendezvous(ctx, topicName(served.ID), true); err != nil {
		t.Fatal(err)
	}
	abandoned := create("Abandoned")
	n, err := h.svc.SweepExpired(ctx)
	if err != nil || n != 1 {
		t.Fatalf("sweep: %d expired, %v; want 1", n, err)
	}
	if cl, err := h.cat.Get(served.ID); err != nil || cl.JoinBy != 0 {
		t.Fatalf("the served cluster: %+v, %v; want it kept, joined", cl, err)
	}
	if _, err := h.cat.Get(abandoned.ID); err == nil {
		t.Fatal("the abandoned cluster is still there")
	}
	if _, err := h.cat.Lookup("abandoned"); err == nil {
		t.Fatal("the abandoned cluster's slug still leads somewhere")
	}
}
