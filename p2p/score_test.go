package p2p

import (
	"math"
	"testing"
	"time"
)

// TestScoreFigures: the figures docs/wire.md (2.4 Scoring) gives follow
// from the scoring parameters: an invalid message's count halves in about
// 90 s, and three, four or ten invalid messages in a row keep a peer
// graylisted for about 8 s, 45 s and nearly 3 minutes.
func TestScoreFigures(t *testing.T) {
	tp, th := topicScoreParams(), peerScoreThresholds()
	perSecond := math.Log(tp.InvalidMessageDeliveriesDecay) / peerScoreParams().DecayInterval.Seconds()
	if half := time.Duration(math.Log(0.5) / perSecond * float64(time.Second)); half < 85*time.Second || half > 95*time.Second {
		t.Errorf("an invalid message's count halves in %v, the document says about 90 s", half)
	}
	// graylisted is how long n invalid messages in a row keep a peer under
	// the graylist threshold: until weight × count² rises above it.
	graylisted := func(n float64) time.Duration {
		limit := math.Sqrt(th.GraylistThreshold / tp.InvalidMessageDeliveriesWeight)
		return time.Duration(math.Log(limit/n) / perSecond * float64(time.Second))
	}
	for _, c := range []struct {
		n        float64
		min, max time.Duration
	}{{3, 7 * time.Second, 9 * time.Second}, {4, 40 * time.Second, 50 * time.Second}, {10, 150 * time.Second, 180 * time.Second}} {
		if d := graylisted(c.n); d < c.min || d > c.max {
			t.Errorf("%v invalid messages graylist a peer for %v, the document says %v to %v", c.n, d, c.min, c.max)
		}
	}
}
