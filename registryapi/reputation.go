package registryapi

import (
	"math"
	"time"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/httpx"
)

// Reputation limits (spec section 8).
const (
	// ReputationWindow is the trailing window of reports that count.
	ReputationWindow = 90 * 24 * time.Hour
	// ReportsPerDay is how many reports one reporter may have counted
	// against one target per UTC day.
	ReportsPerDay = 5
)

// Dimension weights of the score (spec 2.7).
const (
	weightReliability = 0.4
	weightQuality     = 0.3
	weightSpeed       = 0.2
	weightSettlement  = 0.1
)

// Report is the body of POST /v1/agents/<id>/feedback (spec 2.7).
// success is required; the rest are optional. A report without latency_ms
// (a settlement report: no call was timed) gives no speed signal.
type Report struct {
	Success    *bool  `json:"success"`
	LatencyMS  *int64 `json:"latency_ms,omitempty"`
	Quality    *int   `json:"quality,omitempty"`
	Paid       bool   `json:"paid"`
	Disputed   bool   `json:"disputed"`
	Capability string `json:"capability,omitempty"`
	// Receipt is this project's extension: the payment receipt the target
	// agent answered a paid call with (identity.Receipt, header
	// X-Mesh-Receipt), issued to the reporter's key. A report citing one
	// weighs fully in the weighted view.
	Receipt string `json:"receipt,omitempty"`
}

const maxLatencyMS = 24 * 3600 * 1000

// Validate checks required fields and ranges.
func (r *Report) Validate() error {
	switch {
	case r.Success == nil:
		return httpx.ErrInvalid.With("success (boolean) is required")
	case r.LatencyMS != nil && (*r.LatencyMS < 0 || *r.LatencyMS > maxLatencyMS):
		return httpx.ErrInvalid.With("latency_ms must be between 0 and %d", maxLatencyMS)
	case r.Quality != nil && (*r.Quality < 1 || *r.Quality > 5):
		return httpx.ErrInvalid.With("quality must be an integer from 1 to 5")
	}
	if len(r.Receipt) > identity.MaxReceiptLen {
		return httpx.ErrInvalid.With("receipt is longer than %d bytes", identity.MaxReceiptLen)
	}
	return validateText("capability", r.Capability, maxCapabilityLen, false)
}

// Dims are the rollup's dimensions, each in 0..1, or nil when no report
// carries a signal for it.
type Dims struct {
	Reliability *float64 `json:"reliability"`
	Speed       *float64 `json:"speed"`
	Quality     *float64 `json:"quality"`
	Settlement  *float64 `json:"settlement"`
}

// Rollup is the aggregate of the counted reports in the window.
type Rollup struct {
	N     int      `json:"n"`
	Score *float64 `json:"score"`
	Dims  Dims     `json:"dims"`
	// UpdatedAt is the time of the newest counted report, zero if none.
	UpdatedAt time.Time `json:"-"`
	// Weighted is the weighted view of the same reports.
	Weighted Weighted `json:"weighted"`
}

// The weighted view (beyond the spec; docs/api.md, "The weighted view").
// The spec's rollup counts every report alike, so keys made a minute ago
// move it as much as customers do. The weighted view weighs a report
// citing a payment receipt the target issued to the reporter
// (PaidWeight; each receipt once) above one that cites none
// (UnpaidWeight), and its score is shrunk toward 0 by a prior of
// PriorWeight: trust is earned by paid interactions, not asserted by free
// keys. These are constants, not settings: every directory node must roll
// up the same reports to the same figures.
const (
	PaidWeight   = 1.0
	UnpaidWeight = 0.1
	PriorWeight  = 1.0
)

// Weighted is the weighted view of a rollup.
type Weighted struct {
	// N counts the reports (the spec's n); Paid those bound to a payment.
	N    int `json:"n"`
	Paid int `json:"paid"`
	// Weight is the sum of the reports' weights.
	Weight float64 `json:"weight"`
	// Score is the weighted score times Weight / (Weight + PriorWeight).
	Score *float64 `json:"score"`
	// Dims are the weighted means of the dimensions.
	Dims Dims `json:"dims"`
}

// speedOf maps a latency to 0..1: 1 at or below 1 s, 0 at or above 30 s,
// linear between.
func speedOf(latencyMS int64) float64 {
	switch {
	case latencyMS <= 1000:
		return 1
	case latencyMS >= 30000:
		return 0
	}
	return 1 - float64(latencyMS-1000)/29000
}

// rollupBuilder accumulates reports; the result depends only on the
// reports and their order. spec weighs every report 1; weighted weighs it
// PaidWeight or UnpaidWeight.
type rollupBuilder struct {
	spec, weighted dimSums
	n, paid        int
	receipts       map[string]bool // receipts already cited
	newest         time.Time
}

// dimSums are the weighted sums behind the dimensions: for each, the sum
// of the weights of the reports with signal and of weight times signal.
type dimSums struct {
	all, success, speedW, speed, qualityW, quality, paidW, settled float64
}

func (d *dimSums) add(r Report, w float64) {
	d.all += w
	if *r.Success {
		d.success += w
	}
	if r.LatencyMS != nil {
		d.speedW += w
		d.speed += w * speedOf(*r.LatencyMS)
	}
	if r.Quality != nil {
		d.qualityW += w
		d.quality += w * float64(*r.Quality-1) / 4
	}
	if r.Paid {
		d.paidW += w
		if !r.Disputed {
			d.settled += w
		}
	}
}

// add adds a report; receipt is the payment it is bound to ("" for none).
func (b *rollupBuilder) add(r Report, at time.Time, receipt string) {
	b.n++
	w := UnpaidWeight
	if receipt != "" && !b.receipts[receipt] {
		if b.receipts == nil {
			b.receipts = map[string]bool{}
		}
		b.receipts[receipt] = true
		b.paid++
		w = PaidWeight
	}
	b.spec.add(r, 1)
	b.weighted.add(r, w)
	if at.After(b.newest) {
		b.newest = at
	}
}

func ratio(num, den float64) *float64 {
	if den == 0 {
		return nil
	}
	v := num / den
	return &v
}

func (d *dimSums) dims() Dims {
	return Dims{
		Reliability: ratio(d.success, d.all),
		Speed:       ratio(d.speed, d.speedW),
		Quality:     ratio(d.quality, d.qualityW),
		Settlement:  ratio(d.settled, d.paidW),
	}
}

func (b *rollupBuilder) rollup() Rollup {
	r := Rollup{N: b.n, Dims: b.spec.dims(), UpdatedAt: b.newest}
	r.Score = score(r.Dims)
	wd := b.weighted.dims()
	// Sums of tenths are not exact in binary: 1.3, not 1.3000000000000003.
	r.Weighted = Weighted{N: b.n, Paid: b.paid, Weight: math.Round(b.weighted.all*1e9) / 1e9, Dims: wd}
	if s := score(wd); s != nil {
		v := *s * b.weighted.all / (b.weighted.all + PriorWeight)
		r.Weighted.Score = &v
	}
	return r
}

// score is the weighted mean of the dimensions with signal (spec 2.7),
// nil when none has any.
func score(d Dims) *float64 {
	var sum, weights float64
	for _, p := range []struct {
		v *float64
		w float64
	}{{d.Reliability, weightReliability}, {d.Quality, weightQuality}, {d.Speed, weightSpeed}, {d.Settlement, weightSettlement}} {
		if p.v != nil {
			sum += *p.v * p.w
			weights += p.w
		}
	}
	if weights == 0 {
		return nil
	}
	s := sum / weights
	return &s
}

// RollUp computes the rollup of reports (spec 2.7), none bound to a payment.
func RollUp(reports []Report) Rollup {
	var b rollupBuilder
	for _, r := range reports {
		b.add(r, time.Time{}, "")
	}
	return b.rollup()
}
