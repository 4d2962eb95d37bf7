package cron

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	robfig "github.com/netresearch/go-cron"
)

// maxSchedule bounds the length of a schedule: five fields of lists and
// ranges need far less, and the library need not see a megabyte of commas.
const maxSchedule = 256

// fiveFields parses exactly minute, hour, day of month, month and day of
// week; of two restricted day fields either may match, as in Vixie cron.
var fiveFields = robfig.NewParser(robfig.Minute | robfig.Hour | robfig.Dom | robfig.Month | robfig.Dow | robfig.DowOrDom)

// Schedule is a parsed five-field cron expression.
type Schedule struct {
	expr string
	s    robfig.Schedule
}

// ParseSchedule reads a schedule of exactly five space-separated fields
// made of 0-9 * / , and -. Aliases (@daily), names (MON, JAN), a seconds
// or a year field, ? L W # and H are refused before the library sees the
// expression, so that every daemon reads a schedule the same way whatever
// the library would also accept.
func ParseSchedule(expr string) (Schedule, error) {
	if len(expr) > maxSchedule {
		return Schedule{}, fmt.Errorf("%w: longer than %d characters", ErrSchedule, maxSchedule)
	}
	for i, r := range expr {
		if !(r >= '0' && r <= '9' || strings.ContainsRune("*/,- ", r)) {
			return Schedule{}, fmt.Errorf("%w: character %q at %d; only 0-9 * / , - and spaces", ErrSchedule, r, i)
		}
	}
	fields := strings.Fields(expr)
	if len(fields) != 5 {
		return Schedule{}, fmt.Errorf("%w: %d fields; want exactly 5 (minute hour day-of-month month day-of-week)", ErrSchedule, len(fields))
	}
	for i, f := range fields {
		if err := checkField(f); err != nil {
			return Schedule{}, fmt.Errorf("%w: field %d %q: %v", ErrSchedule, i+1, f, err)
		}
	}
	s, err := fiveFields.Parse(strings.Join(fields, " "))
	if err != nil {
		return Schedule{}, fmt.Errorf("%w: %v", ErrSchedule, err)
	}
	// A date that does not exist (31 2) parses but never comes.
	if s.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
		return Schedule{}, fmt.Errorf("%w: %q never fires", ErrSchedule, expr)
	}
	return Schedule{expr: strings.Join(fields, " "), s: s}, nil
}

// checkField checks one field's grammar: a comma-separated list of *, N or
// N-M (N <= M), each with an optional /STEP. Bounds are the library's.
func checkField(f string) error {
	for _, item := range strings.Split(f, ",") {
		rng, step, stepped := strings.Cut(item, "/")
		if stepped && !number(step) {
			return fmt.Errorf("step %q is not a number", step)
		}
		if rng == "*" {
			continue
		}
		lo, hi, isRange := strings.Cut(rng, "-")
		switch {
		case !number(lo):
			return fmt.Errorf("%q is not *, N or N-M", rng)
		case !isRange:
		case !number(hi):
			return fmt.Errorf("%q is not *, N or N-M", rng)
		case atoi(lo) > atoi(hi):
			return fmt.Errorf("range %q runs backwards", rng)
		}
	}
	return nil
}

// number is a run of 1 to 4 digits: more is out of every field's bounds.
func number(s string) bool {
	if len(s) == 0 || len(s) > 4 {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return n
}

// Next is the first time after t the schedule fires (minute precision);
// the zero time when it never does.
func (s Schedule) Next(t time.Time) time.Time { return s.s.Next(t) }

func (s Schedule) String() string { return s.expr }

// MarshalJSON writes the expression.
func (s Schedule) MarshalJSON() ([]byte, error) { return json.Marshal(s.expr) }
