// Package caltime holds the time arithmetic shared by the business calendars
// of package idem and the cron schedules of module github.com/idemgo/idem/cron.
//
// Instants are handled as Unix seconds and local wall-clock times as "wall
// seconds": seconds since 1970-01-01 00:00 of the wall clock, i.e. the Unix
// time the wall clock reading would denote in UTC. Dates are handled as day
// numbers, days since 1970-01-01.
package caltime

import (
	"fmt"
	"math"
	"time"
)

// SecondsPerDay is the number of seconds in a calendar day of wall-clock
// time (and in a day number step).
const SecondsPerDay = 86400

// FloorDiv returns a/b rounded towards negative infinity. b must not be 0.
func FloorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// FloorMod returns a - FloorDiv(a, b)*b, which has the sign of b.
func FloorMod(a, b int64) int64 { return a - FloorDiv(a, b)*b }

// Civil converts a day number (days since 1970-01-01) to a calendar date.
func Civil(day int64) (year int, month time.Month, dayOfMonth int) {
	return time.Unix(day*SecondsPerDay, 0).UTC().Date()
}

// DayNumber converts a calendar date to a day number (days since
// 1970-01-01). Out-of-range months and days are normalized as by time.Date,
// so DayNumber(y, m+1, 1) is the first day of the following month.
func DayNumber(year int, month time.Month, dayOfMonth int) int64 {
	return FloorDiv(time.Date(year, month, dayOfMonth, 0, 0, 0, 0, time.UTC).Unix(), SecondsPerDay)
}

// Weekday returns the day of the week of a day number.
func Weekday(day int64) time.Weekday {
	return time.Weekday(FloorMod(day+4, 7)) // 1970-01-01 was a Thursday
}

// Canonical layouts of sub-day period names: the period's Start instant in
// UTC, with seconds only when the instant is not a whole minute (which
// happens only for historical local-mean-time offsets).
const (
	utcLayout        = "2006-01-02T15:04Z"
	utcLayoutSeconds = "2006-01-02T15:04:05Z"
)

// UTCName returns the canonical name of a sub-day period starting at the
// instant sec (Unix seconds): "2006-01-02T15:04Z", or
// "2006-01-02T15:04:05Z" when sec is not a whole minute. Names are unique
// and, for years 0000–9999, sort in time order as plain strings.
func UTCName(sec int64) string {
	t := time.Unix(sec, 0).UTC()
	if sec%60 == 0 {
		return t.Format(utcLayout)
	}
	return t.Format(utcLayoutSeconds)
}

// ParseUTCName is the inverse of UTCName: it returns the instant (Unix
// seconds) named by name, and false if name is not exactly UTCName of some
// instant. Whether a period of a particular schedule starts at that instant
// is for the caller to check.
func ParseUTCName(name string) (int64, bool) {
	for _, layout := range []string{utcLayout, utcLayoutSeconds} {
		if t, err := time.Parse(layout, name); err == nil {
			if sec := t.Unix(); UTCName(sec) == name {
				return sec, true
			}
		}
	}
	return 0, false
}

// WallSeconds returns the local wall clock of t in loc as wall seconds
// (seconds since 1970-01-01 00:00 of the wall clock), floored to a whole
// second.
func WallSeconds(t time.Time, loc *time.Location) int64 {
	_, off := t.In(loc).Zone()
	return t.Unix() + int64(off)
}

// Segment returns the UTC offset (seconds east of UTC) in effect in loc at
// the instant u (Unix seconds), and the maximal interval [start, end) around
// u during which that offset does not change. Adjacent zone periods with the
// same offset (e.g. a mere change of abbreviation) are merged. start is
// math.MinInt64 and end math.MaxInt64 when unbounded.
func Segment(loc *time.Location, u int64) (off, start, end int64) {
	t := time.Unix(u, 0).In(loc)
	_, o := t.Zone()
	off = int64(o)
	s, e := t.ZoneBounds()
	start, end = math.MinInt64, math.MaxInt64
	if !s.IsZero() {
		start = s.Unix()
	}
	if !e.IsZero() {
		end = e.Unix()
	}
	for i := 0; i < 16 && start != math.MinInt64; i++ {
		p := time.Unix(start-1, 0).In(loc)
		if _, po := p.Zone(); int64(po) != off {
			break
		}
		ps, _ := p.ZoneBounds()
		if ps.IsZero() {
			start = math.MinInt64
		} else {
			start = ps.Unix()
		}
	}
	for i := 0; i < 16 && end != math.MaxInt64; i++ {
		n := time.Unix(end, 0).In(loc)
		if _, no := n.Zone(); int64(no) != off {
			break
		}
		_, ne := n.ZoneBounds()
		if ne.IsZero() {
			end = math.MaxInt64
		} else {
			end = ne.Unix()
		}
	}
	return off, start, end
}

// resolveWindow bounds the search around a wall time; UTC offsets never
// exceed ±16h, so 26h is ample.
const resolveWindow = 26 * 3600

// Resolve maps the local wall time w (wall seconds, see WallSeconds) in loc
// to an instant (Unix seconds): the first instant at which the wall clock
// reads w or later. This is the gap/fold policy shared by all schedules:
//
//   - an ordinary wall time maps to the instant it occurs;
//   - a wall time that occurs twice because the clock falls back maps to its
//     first occurrence;
//   - a wall time skipped because the clock springs forward maps to the
//     transition instant that ends the gap.
//
// Resolve is non-decreasing in w.
func Resolve(loc *time.Location, w int64) int64 {
	u := w - resolveWindow
	for i := 0; i < 64; i++ {
		off, s, e := Segment(loc, u)
		if c := w - off; c >= s && c < e {
			return c
		}
		if e == math.MaxInt64 || e > w+resolveWindow {
			break
		}
		nextOff, _, _ := Segment(loc, e)
		if e+off <= w && w < e+nextOff {
			return e // w lies in the gap opened at e
		}
		u = e
	}
	// Not reachable for real zone data; fall back to the offset at w.
	off, _, _ := Segment(loc, w)
	return w - off
}

// Instant returns the instant sec (Unix seconds) expressed in loc.
func Instant(sec int64, loc *time.Location) time.Time {
	return time.Unix(sec, 0).In(loc)
}

// MustLocation panics with "idem: <fn>: nil *time.Location" if loc is nil.
// fn names the exported constructor that received loc.
func MustLocation(loc *time.Location, fn string) {
	if loc == nil {
		panic("idem: " + fn + ": nil *time.Location")
	}
}

// InvalidName returns the error a Schedule's Parse reports for a name that
// is not one of its canonical period names: it wraps sentinel (which is
// idem.ErrInvalidPeriod) and mentions the name and the schedule.
func InvalidName(sentinel error, schedule fmt.Stringer, name string) error {
	return fmt.Errorf("%w %q for %s", sentinel, name, schedule)
}
