package registryapi

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/storetest"
)

func rep(success bool, latency int64, quality int, paid, disputed bool) Report {
	r := Report{Success: &success, LatencyMS: &latency, Paid: paid, Disputed: disputed}
	if quality != 0 {
		r.Quality = &quality
	}
	return r
}

func f(v float64) *float64 { return &v }

// TestRollUpTable checks the rollup against values computed by hand from
// spec 2.7: weights 0.4/0.3/0.2/0.1, renormalised over dimensions with signal.
func TestRollUpTable(t *testing.T) {
	cases := []struct {
		name    string
		reports []Report
		want    Rollup
	}{
		{"no reports", nil, Rollup{}},
		{"one perfect report", []Report{rep(true, 500, 5, true, false)},
			Rollup{N: 1, Score: f(1), Dims: Dims{Reliability: f(1), Speed: f(1), Quality: f(1), Settlement: f(1)}}},
		// reliability 1/2, speed (1+0)/2, quality (3-1)/4 from one report,
		// settlement absent: (0.4*.5+0.3*.5+0.2*.5)/0.9 = 0.5
		{"settlement without signal", []Report{rep(true, 1000, 3, false, false), rep(false, 30000, 0, false, false)},
			Rollup{N: 2, Score: f(0.5), Dims: Dims{Reliability: f(0.5), Speed: f(0.5), Quality: f(0.5)}}},
		// speed 1-(15500-1000)/29000 = 0.5; score (0.4*1+0.2*0.5)/0.6 = 5/6
		{"quality and settlement without signal", []Report{rep(true, 15500, 0, false, false)},
			Rollup{N: 1, Score: f(5.0 / 6), Dims: Dims{Reliability: f(1), Speed: f(0.5)}}},
		// speed (1-1000/29000 + 1)/2; quality (0+1)/2; settlement 1/2
		{"all dimensions", []Report{rep(true, 2000, 1, true, true), rep(false, 0, 5, true, false)},
			Rollup{N: 2, Score: f(0.4*0.5 + 0.3*0.5 + 0.2*(1-1000.0/29000+1)/2 + 0.1*0.5),
				Dims: Dims{Reliability: f(0.5), Speed: f((1 - 1000.0/29000 + 1) / 2), Quality: f(0.5), Settlement: f(0.5)}}},
		// A report without latency_ms gives no speed signal: speed is the
		// mean over the one report that carries it.
		{"report without latency", []Report{rep(true, 15500, 0, false, false), {Success: new(false)}},
			Rollup{N: 2, Score: f((0.4*0.5 + 0.2*0.5) / 0.6), Dims: Dims{Reliability: f(0.5), Speed: f(0.5)}}},
		{"speed clamps beyond 30 s", []Report{rep(false, 120000, 0, true, true)},
			Rollup{N: 1, Score: f(0), Dims: Dims{Reliability: f(0), Speed: f(0), Settlement: f(0)}}},
	}
	for _, c := range cases {
		got := RollUp(c.reports)
		if got.N != c.want.N {
			t.Errorf("%s: n = %d, want %d", c.name, got.N, c.want.N)
		}
		for _, p := range []struct {
			dim       string
			got, want *float64
		}{
			{"score", got.Score, c.want.Score}, {"reliability", got.Dims.Reliability, c.want.Dims.Reliability},
			{"speed", got.Dims.Speed, c.want.Dims.Speed}, {"quality", got.Dims.Quality, c.want.Dims.Quality},
			{"settlement", got.Dims.Settlement, c.want.Dims.Settlement},
		} {
			switch {
			case (p.got == nil) != (p.want == nil):
				t.Errorf("%s: %s = %v, want %v", c.name, p.dim, fmtp(p.got), fmtp(p.want))
			case p.got != nil && math.Abs(*p.got-*p.want) > 1e-12:
				t.Errorf("%s: %s = %v, want %v", c.name, p.dim, *p.got, *p.want)
			}
		}
	}
}

func fmtp(p *float64) any {
	if p == nil {
		return "no signal"
	}
	return *p
}

func TestSpeedScale(t *testing.T) {
	for _, c := range []struct {
		ms   int64
		want float64
	}{{0, 1}, {1000, 1}, {1001, 1 - 1.0/29000}, {15500, 0.5}, {29999, 1.0 / 29000}, {30000, 0}, {90000, 0}} {
		if got := speedOf(c.ms); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("speedOf(%d) = %v, want %v", c.ms, got, c.want)
		}
	}
}

// TestDefaulterScoreFalls: the report a provider files when a post-paid
// invoice is overdue lowers the caller's score. Its earlier shape (success
// with latency 0) counted as a perfect call and raised it.
func TestDefaulterScoreFalls(t *testing.T) {
	decode := func(body string) Report {
		var r Report
		if err := json.Unmarshal([]byte(body), &r); err != nil {
			t.Fatal(err)
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		return r
	}
	history := []Report{decode(`{"success":false,"latency_ms":20000}`), decode(`{"success":true,"latency_ms":9000}`)}
	before := *RollUp(history).Score
	score := func(report string) float64 { return *RollUp(append(slices.Clone(history), decode(report))).Score }
	if old := score(`{"success":true,"latency_ms":0,"paid":true,"disputed":true}`); old <= before {
		t.Fatalf("scenario: the old default report should have raised %v, got %v", before, old)
	}
	if got := score(`{"success":false,"paid":true,"disputed":true,"capability":"echo"}`); got >= before {
		t.Fatalf("a defaulter's score went from %v to %v", before, got)
	}
}

// TestReputationAfterASnapshotReadMeanwhile: a node that installs a
// snapshot in which an agent it knew without reports has some answers
// them once the snapshot is in, though it was read all along: the rows
// read while the index was built (which said, as it was before, that the
// agent has none) do not keep that.
func TestReputationAfterASnapshotReadMeanwhile(t *testing.T) {
	src := newHarness(t)
	src.registerPlain("target")
	src.want(src.signed(identity.GenerateKey(), "POST", "/v1/agents/target/feedback", goodReport), 200, "")
	for i := range 2000 { // an index that takes a while to build
		src.do("POST", "/v1/agents/register", fmt.Sprintf(`{"agent_id":"other-%d","capabilities":["x","y"]}`, i))
	}
	buf := storetest.Snapshot(t, src.log)

	dst := newHarness(t)
	dst.registerPlain("target") // the same registration (the log's first entry), without its report yet
	if r := dst.do("GET", "/v1/agents/target", ""); r.body["reputation"].(map[string]any)["n"] != 0.0 {
		t.Fatalf("before the snapshot: %s", r.raw)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		for !stop.Load() {
			getBody(dst, "/v1/agents/target") // whatever it answers while the state is replaced
		}
	})
	_, err := dst.log.Restore(buf)
	stop.Store(true)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if r := dst.do("GET", "/v1/agents/target", ""); r.body["reputation"].(map[string]any)["n"] != 1.0 {
		t.Fatalf("after the snapshot: %s", r.raw)
	}
}
