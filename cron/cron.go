// Package cron provides idem schedules defined by cron expressions.
//
// It is a separate module, github.com/idemgo/idem/cron, so that its
// dependency on github.com/robfig/cron/v3 (used to parse cron expressions)
// stays out of the core module github.com/idemgo/idem, whose dependencies
// are deliberately kept to a minimum. Programs that do not use cron
// schedules do not pull in robfig/cron.
package cron

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/caltime"
	robfig "github.com/robfig/cron/v3"
)

// New returns the schedule whose periods run from one firing of the cron
// expression spec to the next: the period starting at a slot s_i is
// [s_i, s_{i+1}). spec is a standard five-field cron expression (minute,
// hour, day of month, month, day of week) or one of the descriptors @yearly,
// @annually, @monthly, @weekly, @daily, @midnight and @hourly, as accepted by
// github.com/robfig/cron/v3's ParseStandard, read as Vixie cron and cronie
// read a crontab where the two differ:
//
//   - When both day of month and day of week are restricted, a day matches
//     if either of them matches; when either is unrestricted, both must
//     match. A field is unrestricted when it starts with "*", as in cronie:
//     "0 0 */2 * 1" is the odd days that are Mondays, not the odd days and
//     every Monday (robfig/cron counts only a bare "*").
//   - Day of week 7 is Sunday, as 0 is ("0 0 * * 7", "0 0 * * 5-7").
//
// @every and CRON_TZ=/TZ= prefixes are rejected; the zone is always loc.
//
// Slots are local wall-clock times in loc that match spec, mapped to
// instants as follows:
//
//   - A wall time that does not exist because the clock springs forward over
//     it fires once, at the first instant after the gap (the transition
//     instant). Several skipped wall times (e.g. "*/15 2 * * *" on New York's
//     spring-forward day) collapse into that single slot, which also merges
//     with a slot at the first wall time after the gap (03:00 there).
//   - A wall time that occurs twice because the clock falls back fires once,
//     at its first occurrence. "*/30 1 * * *" on New York's fall-back day has
//     two slots, 01:00 and 01:30 EDT, not four.
//
// Periods are named like idem.Hourly periods, by their Start instant in
// UTC: "2006-01-02T15:04Z". Parse accepts exactly these names and reports
// any other string with an error wrapping idem.ErrInvalidPeriod. The
// schedule's String is "cron(<spec>)@<zone>", e.g.
// "cron(30 1 * * *)@Europe/London".
//
// Options change the daylight-saving policy: [SkipGap] makes a skipped
// wall time fire not at all, [FoldBoth] makes a repeated one fire at both
// occurrences.
//
// New returns an error if spec cannot be parsed or never fires (for
// example "0 0 30 2 *"). It panics if loc is nil. The schedule is immutable
// and safe for concurrent use.
func New(spec string, loc *time.Location, opts ...Option) (idem.Schedule, error) {
	caltime.MustLocation(loc, "cron.New")
	trimmed := strings.TrimSpace(spec)
	if strings.HasPrefix(trimmed, "TZ=") || strings.HasPrefix(trimmed, "CRON_TZ=") {
		return nil, fmt.Errorf("idem: cron spec %q: time zone prefixes are not supported, pass the location instead", spec)
	}
	fields := strings.Fields(trimmed)
	toParse := trimmed
	if len(fields) == 5 {
		// Day of week as cronie reads it: 7 is Sunday too.
		dow, err := sundaySeven(fields[4])
		if err != nil {
			return nil, fmt.Errorf("idem: cron spec %q: %w", spec, err)
		}
		toParse = strings.Join(append(slices.Clone(fields[:4]), dow), " ")
	}
	parsed, err := robfig.ParseStandard(toParse)
	if err != nil {
		return nil, fmt.Errorf("idem: cron spec %q: %w", spec, err)
	}
	ss, ok := parsed.(*robfig.SpecSchedule)
	if !ok {
		return nil, fmt.Errorf("idem: cron spec %q: only calendar expressions are supported, not fixed intervals", spec)
	}
	c := schedule{
		spec:  strings.Join(fields, " "),
		loc:   loc,
		dom:   ss.Dom,
		month: ss.Month,
		dow:   ss.Dow,
	}
	if len(fields) == 5 {
		// The DOM/DOW rule as in Vixie cron and cronie: a field is
		// unrestricted when it starts with "*" ("*/2" too), where robfig
		// counts only a bare "*" (or "*/1").
		c.dom = c.dom&^starBit | starIf(fields[2])
		c.dow = c.dow&^starBit | starIf(fields[4])
	}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("idem: cron spec %q: a nil option", spec)
		}
		o(&c)
	}
	for h := 0; h < 24; h++ {
		if ss.Hour&(1<<uint(h)) != 0 {
			c.hours = append(c.hours, int64(h))
		}
	}
	for m := 0; m < 60; m++ {
		if ss.Minute&(1<<uint(m)) != 0 {
			c.minutes = append(c.minutes, int64(m))
		}
	}
	if len(c.hours) == 0 || len(c.minutes) == 0 || !c.firesEver() {
		return nil, fmt.Errorf("idem: cron spec %q never fires", spec)
	}
	return c, nil
}

// starBit mirrors robfig/cron's marker bit for fields written as "*" or "?".
const starBit = 1 << 63

// starIf is starBit if the day-of-month or day-of-week field f counts as
// unrestricted in the rule "if either is unrestricted, both must match;
// otherwise either may": as in Vixie cron and cronie, when it starts with
// "*" (so "*/2" and "*,5" do, "5,*" does not), or, as in robfig/cron, is
// "?".
func starIf(f string) uint64 {
	if strings.HasPrefix(f, "*") || f == "?" {
		return starBit
	}
	return 0
}

// dowNames are the day-of-week names robfig/cron and cronie accept.
var dowNames = map[string]int{"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6}

// sundaySeven rewrites a day-of-week field for robfig/cron, whose days are
// 0-6, so that 7 means Sunday as in Vixie cron and cronie (days 0-7): each
// element of the list that reaches 7 ("7", "5-7", "1-7/2", "1/2", which is
// "1-7/2") becomes the explicit days it means there, with 7 as 0 ("0",
// "5,6,0", "1,3,5,0"). The other elements are left to robfig/cron,
// unchanged.
func sundaySeven(f string) (string, error) {
	num := func(s string) (int, bool) {
		if n, ok := dowNames[strings.ToLower(s)]; ok {
			return n, true
		}
		n, err := strconv.Atoi(s)
		return n, err == nil
	}
	elems := strings.Split(f, ",")
	for i, e := range elems {
		rng, stepStr, hasStep := strings.Cut(e, "/")
		lo, hi, isRange := strings.Cut(rng, "-")
		a, okA := num(lo)
		b, okB := a, okA
		if isRange {
			b, okB = num(hi)
		}
		if hasStep && !isRange {
			b = 7 // "N/S" is "N-7/S", as robfig/cron reads it "N-6/S"
		}
		if !okA || !okB || (a != 7 && b != 7) {
			continue // not about 7: robfig/cron's reading is cronie's
		}
		step := 1
		if hasStep {
			n, err := strconv.Atoi(stepStr)
			if err != nil || n < 1 {
				return "", fmt.Errorf("day of week %q: the step of %q is not a positive number", f, e)
			}
			step = n
		}
		if a > b {
			return "", fmt.Errorf("day of week %q: the range %q runs backwards", f, e)
		}
		var days []string
		for d := a; d <= b; d += step {
			days = append(days, strconv.Itoa(d%7))
		}
		elems[i] = strings.Join(days, ",")
	}
	return strings.Join(elems, ","), nil
}

// searchDays bounds the search for the neighbouring slots. Matching dates of
// a spec that fires at all are at most 8 years apart (29 February across a
// non-leap century year), so this is never reached.
const searchDays = 4000

// An Option sets a daylight-saving policy of [New].
type Option func(*schedule)

// SkipGap makes a wall time that does not exist on a spring-forward day
// (02:30 in New York on 8 March 2026) no slot at all: the period that
// contains the gap runs on to the next slot. By default it fires at the
// gap's end.
func SkipGap() Option { return func(c *schedule) { c.skipGap = true } }

// FoldBoth makes a wall time that occurs twice on a fall-back day (01:30
// in New York on 1 November 2026) two slots, one at each occurrence, so
// that "30 1 * * *" has two periods starting that night. By default it
// fires at its first occurrence only.
func FoldBoth() Option { return func(c *schedule) { c.foldBoth = true } }

// schedule implements New. All fields are read-only after construction.
type schedule struct {
	spec              string
	loc               *time.Location
	dom, month, dow   uint64
	hours, minutes    []int64 // ascending
	skipGap, foldBoth bool    // the DST policies (SkipGap, FoldBoth)
}

func (c schedule) String() string {
	s := "cron(" + c.spec + ")@" + c.loc.String()
	if c.skipGap {
		s += ",skip-gap"
	}
	if c.foldBoth {
		s += ",fold-both"
	}
	return s
}

// daySlots returns the slots (Unix seconds, ascending, distinct) of the
// matching wall times of local date day under the DST policies.
func (c schedule) daySlots(day int64) []int64 {
	if !c.dayMatches(day) {
		return nil
	}
	var out []int64
	for _, h := range c.hours {
		for _, m := range c.minutes {
			ww := day*caltime.SecondsPerDay + h*3600 + m*60
			x := caltime.Resolve(c.loc, ww)
			if caltime.WallSeconds(time.Unix(x, 0), c.loc) != ww { // in a gap
				if !c.skipGap {
					out = append(out, x)
				}
				continue
			}
			out = append(out, x)
			if c.foldBoth {
				// The second occurrence, in the segment after x's, if the
				// wall clock reads ww there too.
				_, _, end := caltime.Segment(c.loc, x)
				if end != math.MaxInt64 {
					off2, _, _ := caltime.Segment(c.loc, end)
					if y := ww - off2; y >= end && y != x && caltime.WallSeconds(time.Unix(y, 0), c.loc) == ww {
						out = append(out, y)
					}
				}
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// policyBounds is bounds under the DST policies: the latest slot at or
// before s and the first after it, from the slots of the days around.
func (c schedule) policyBounds(s, w int64) (start, end int64) {
	day0 := caltime.FloorDiv(w, caltime.SecondsPerDay)
	found := false
	for day, below := day0+1, 0; day >= day0-searchDays && below < 2; day-- {
		for _, x := range c.daySlots(day) {
			if x <= s && (!found || x > start) {
				start, found = x, true
			}
		}
		if found {
			below++
		}
	}
	if !found {
		panic("idem: " + c.String() + ": no slot found within the search horizon")
	}
	found = false
	for day, above := day0-1, 0; day <= day0+searchDays && above < 2; day++ {
		for _, x := range c.daySlots(day) {
			if x > s && (!found || x < end) {
				end, found = x, true
			}
		}
		if found {
			above++
		}
	}
	if !found {
		panic("idem: " + c.String() + ": no slot found within the search horizon")
	}
	return start, end
}

// dayMatches mirrors robfig/cron's month check and dayMatches: if day of
// month or day of week is "*", both must match; otherwise either may.
func (c schedule) dayMatches(day int64) bool {
	_, m, d := caltime.Civil(day)
	if c.month&(1<<uint(m)) == 0 {
		return false
	}
	domMatch := c.dom&(1<<uint(d)) != 0
	dowMatch := c.dow&(1<<uint(caltime.Weekday(day))) != 0
	if c.dom&starBit != 0 || c.dow&starBit != 0 {
		return domMatch && dowMatch
	}
	return domMatch || dowMatch
}

// firesEver reports whether some date matches; 2000–2007 contains every
// (month, day) combination, including 29 February, and every weekday.
func (c schedule) firesEver() bool {
	from := caltime.DayNumber(2000, time.January, 1)
	to := caltime.DayNumber(2008, time.January, 1)
	for d := from; d < to; d++ {
		if c.dayMatches(d) {
			return true
		}
	}
	return false
}

// bounds returns the latest slot at or before instant s (Unix seconds) and
// the first slot after it. w is the wall time of s (caltime wall seconds).
// Slot instants are caltime.Resolve(matching wall time), which is
// non-decreasing in the wall time, and every matching wall time <= w
// resolves to an instant <= s.
func (c schedule) bounds(s, w int64) (start, end int64) {
	if c.skipGap || c.foldBoth {
		return c.policyBounds(s, w)
	}
	day0 := caltime.FloorDiv(w, caltime.SecondsPerDay)
	lastMin := c.minutes[len(c.minutes)-1]
	var prev int64
	havePrev := false
	for day := day0; day <= day0+searchDays; day++ {
		if !c.dayMatches(day) {
			continue
		}
		for _, h := range c.hours {
			base := day*caltime.SecondsPerDay + h*3600
			lastW := base + lastMin*60
			if lastW <= w {
				continue
			}
			if x := caltime.Resolve(c.loc, lastW); x <= s {
				// The whole hour resolves to or before s (a repeated hour).
				prev, havePrev = x, true
				continue
			}
			for _, m := range c.minutes {
				ww := base + m*60
				if ww <= w {
					continue
				}
				x := caltime.Resolve(c.loc, ww)
				if x > s {
					if !havePrev {
						prev = c.slotAtOrBefore(w)
					}
					return prev, x
				}
				prev, havePrev = x, true
			}
		}
	}
	panic("idem: " + c.String() + ": no slot found within the search horizon")
}

// slotAtOrBefore returns the slot of the latest matching wall time <= w.
func (c schedule) slotAtOrBefore(w int64) int64 {
	day0 := caltime.FloorDiv(w, caltime.SecondsPerDay)
	firstMin := c.minutes[0]
	for day := day0; day >= day0-searchDays; day-- {
		if !c.dayMatches(day) {
			continue
		}
		for hi := len(c.hours) - 1; hi >= 0; hi-- {
			base := day*caltime.SecondsPerDay + c.hours[hi]*3600
			if base+firstMin*60 > w {
				continue
			}
			for mi := len(c.minutes) - 1; mi >= 0; mi-- {
				if ww := base + c.minutes[mi]*60; ww <= w {
					return caltime.Resolve(c.loc, ww)
				}
			}
		}
	}
	panic("idem: " + c.String() + ": no slot found within the search horizon")
}

func (c schedule) At(t time.Time) idem.Period {
	start, end := c.bounds(t.Unix(), caltime.WallSeconds(t, c.loc))
	return idem.Period{
		Name:  caltime.UTCName(start),
		Start: caltime.Instant(start, c.loc),
		End:   caltime.Instant(end, c.loc),
	}
}

func (c schedule) Next(p idem.Period) idem.Period { return c.At(p.End) }

func (c schedule) Prev(p idem.Period) idem.Period { return c.At(p.Start.Add(-time.Nanosecond)) }

func (c schedule) Parse(name string) (idem.Period, error) {
	sec, ok := caltime.ParseUTCName(name)
	if !ok {
		return idem.Period{}, caltime.InvalidName(idem.ErrInvalidPeriod, c, name)
	}
	p := c.At(time.Unix(sec, 0))
	if p.Start.Unix() != sec {
		return idem.Period{}, caltime.InvalidName(idem.ErrInvalidPeriod, c, name)
	}
	return p, nil
}
