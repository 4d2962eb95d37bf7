package registryapi

import (
	"time"

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

// rollupBuilder accumulates reports; the result depends only on the reports.
type rollupBuilder struct {
	n, success, speedN, qualityN, paidN, settledN int
	speedSum, qualitySum                          float64
	newest                                        time.Time
}

func (b *rollupBuilder) add(r Report, at time.Time) {
	b.n++
	if *r.Success {
		b.success++
	}
	if r.LatencyMS != nil {
		b.speedN++
		b.speedSum += speedOf(*r.LatencyMS)
	}
	if r.Quality != nil {
		b.qualityN++
		b.qualitySum += float64(*r.Quality-1) / 4
	}
	if r.Paid {
		b.paidN++
		if !r.Disputed {
			b.settledN++
		}
	}
	if at.After(b.newest) {
		b.newest = at
	}
}

func ratio(num float64, den int) *float64 {
	if den == 0 {
		return nil
	}
	v := num / float64(den)
	return &v
}

func (b *rollupBuilder) rollup() Rollup {
	d := Dims{
		Reliability: ratio(float64(b.success), b.n),
		Speed:       ratio(b.speedSum, b.speedN),
		Quality:     ratio(b.qualitySum, b.qualityN),
		Settlement:  ratio(float64(b.settledN), b.paidN),
	}
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
	r := Rollup{N: b.n, Dims: d, UpdatedAt: b.newest}
	if weights > 0 {
		s := sum / weights
		r.Score = &s
	}
	return r
}

// RollUp computes the rollup of reports (spec 2.7).
func RollUp(reports []Report) Rollup {
	var b rollupBuilder
	for _, r := range reports {
		b.add(r, time.Time{})
	}
	return b.rollup()
}
