package admission

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Budget is a token bucket's size: Rate tokens a second, held up to Burst.
// A zero Rate is unlimited.
type Budget struct {
	Rate  float64 `json:"rate"`
	Burst int     `json:"burst"`
}

// Unlimited reports whether b lets everything through.
func (b Budget) Unlimited() bool { return b.Rate == 0 }

// String is b as ParseBudget reads it: "RATE/BURST", or "0" when unlimited.
func (b Budget) String() string {
	if b.Unlimited() {
		return "0"
	}
	return strconv.FormatFloat(b.Rate, 'g', -1, 64) + "/" + strconv.Itoa(b.burst())
}

// burst is Burst, or twice the rate (at least 1) when Burst is not set.
func (b Budget) burst() int {
	if b.Burst > 0 {
		return b.Burst
	}
	return max(1, int(min(2*b.Rate, 1<<30)))
}

func (b Budget) validate() error {
	if !(b.Rate >= 0) || math.IsInf(b.Rate, 0) || b.Burst < 0 {
		return fmt.Errorf("budget %s: want a rate a second of at least 0 (0 is unlimited) and a burst of at least 0", b)
	}
	return nil
}

// ParseBudget reads "RATE/BURST" (RATE tokens a second, up to BURST at
// once), "RATE" (bursts of twice the rate) or "0" (unlimited).
func ParseBudget(s string) (Budget, error) {
	rs, bs, hasBurst := strings.Cut(strings.TrimSpace(s), "/")
	var b Budget
	var err error
	if b.Rate, err = strconv.ParseFloat(rs, 64); err != nil {
		return Budget{}, fmt.Errorf("budget %q: want RATE/BURST, e.g. 5/100 (5 a second, 100 at once), or 0 for unlimited", s)
	}
	if hasBurst {
		if b.Burst, err = strconv.Atoi(bs); err != nil || b.Burst < 1 {
			return Budget{}, fmt.Errorf("budget %q: the burst must be a whole number of at least 1", s)
		}
	}
	return b, b.validate()
}
