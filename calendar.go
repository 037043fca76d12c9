package idem

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/idemgo/idem/internal/caltime"
)

// Period is one business period of a Schedule: the half-open interval
// [Start, End).
//
// Periods returned by a Schedule are plain comparable values: two periods
// of the same schedule are equal (==) exactly when they are the same period.
type Period struct {
	// Name is the canonical name of the period. It is unique within its
	// schedule, and for years 0000–9999 the names of a schedule sort in
	// time order when compared as plain strings. Schedule.Parse turns it
	// back into the Period.
	Name string
	// Start is the first instant of the period (inclusive), expressed in
	// the schedule's location.
	Start time.Time
	// End is the first instant after the period (exclusive), expressed in
	// the schedule's location. It equals the Start of the next period.
	End time.Time
}

// Schedule cuts time into contiguous, non-overlapping business periods in a
// named time zone. Every instant belongs to exactly one period.
//
// Schedules are immutable values and safe for concurrent use.
type Schedule interface {
	// At returns the period containing the instant t, i.e. the period p
	// with p.Start <= t < p.End. The location of t does not matter.
	At(t time.Time) Period
	// Next returns the period that immediately follows p; it is
	// At(p.End). For a p produced by this schedule, Next(p).Start == p.End.
	Next(p Period) Period
	// Prev returns the period that immediately precedes p; it is the
	// period containing the instant just before p.Start.
	Prev(p Period) Period
	// Parse returns the period whose canonical Name is name. Any string
	// that is not a canonical name of this schedule (including
	// differently formatted spellings of a valid period) yields an error
	// wrapping ErrInvalidPeriod.
	Parse(name string) (Period, error)
	// String describes the schedule, e.g. "daily@America/New_York" or
	// "cron(30 1 * * *)@Europe/London".
	String() string
}

// ErrInvalidPeriod is wrapped by the error Schedule.Parse returns for a name
// that is not a canonical period name of that schedule. Test for it with
// errors.Is.
var ErrInvalidPeriod = errors.New("idem: invalid period name")

// LastPeriod returns the most recent period of s that has completely ended
// by t, that is s.Prev(s.At(t)).
//
// A settlement job that runs at 02:00 local time settles yesterday with
// LastPeriod(Daily(loc), now).
func LastPeriod(s Schedule, t time.Time) Period {
	return s.Prev(s.At(t))
}

// Daily returns the schedule of local calendar days in loc, named like
// "2026-10-27".
//
// A day starts at local midnight, or, on a date whose midnight is skipped
// by a clock change, at the first instant of that local date. A day
// therefore lasts 24 hours, or 23 or 25 hours (23.5 or 24.5 hours in
// Australia/Lord_Howe) on days with a daylight-saving transition.
//
// Daily panics if loc is nil.
func Daily(loc *time.Location) Schedule {
	caltime.MustLocation(loc, "Daily")
	return calendar{loc: loc, kind: kindDaily}
}

// Weekly returns the schedule of ISO 8601 weeks in loc. A week starts at the
// start of its local Monday (see Daily) and is named by its ISO week-year and
// zero-padded week number, like "2026-W44". The ISO week-year can differ from
// the calendar year near New Year: 2027-01-01 lies in "2026-W53" and
// 2025-12-29 in "2026-W01". A week with a daylight-saving transition is
// correspondingly shorter or longer than 168 hours (167 or 169 hours for a
// one-hour shift).
//
// Weekly panics if loc is nil.
func Weekly(loc *time.Location) Schedule {
	caltime.MustLocation(loc, "Weekly")
	return calendar{loc: loc, kind: kindWeekly}
}

// Monthly returns the schedule of calendar months in loc, named like
// "2026-10". A month starts at the start of its first local day (see Daily).
//
// Monthly panics if loc is nil.
func Monthly(loc *time.Location) Schedule {
	caltime.MustLocation(loc, "Monthly")
	return calendar{loc: loc, kind: kindMonthly}
}

// Hourly returns the schedule of local clock hours in loc.
//
// The boundaries of the periods are the instants at which the local wall
// clock reads hh:00:00, plus every instant at which the zone's UTC offset
// changes. A period runs from one boundary to the next, so:
//
//   - on a fall-back day the repeated hour (01:00–02:00 in New York) is two
//     distinct one-hour periods;
//   - on a spring-forward day the skipped hour has no period at all;
//   - in zones with a 30-minute shift (Australia/Lord_Howe) the transition
//     splits an hour: on the fall-back day the clock goes from 02:00 back to
//     01:30, giving a 30-minute period 01:30–02:00 after the full hour
//     01:00–02:00; on the spring-forward day the clock jumps from 02:00 to
//     02:30, giving a 30-minute period 02:30–03:00. Periods are never longer
//     than one hour.
//
// Local wall-clock names cannot be unique or sort in time order across a
// fall-back (01:30 EDT and 01:30 EST read the same), so a period is named by
// its Start instant in UTC, formatted "2006-01-02T15:04Z", e.g.
// "2026-11-01T05:00Z" and "2026-11-01T06:00Z" for the two 01:00 hours in New
// York on 2026-11-01. These names are unique and sort in time order. (For
// historical local-mean-time offsets that are not whole minutes, the name
// carries seconds: "2006-01-02T15:04:05Z".)
//
// Hourly panics if loc is nil.
func Hourly(loc *time.Location) Schedule {
	caltime.MustLocation(loc, "Hourly")
	return hourly{loc: loc}
}

func invalid(s Schedule, name string) error {
	return caltime.InvalidName(ErrInvalidPeriod, s, name)
}

type calKind int

const (
	kindDaily calKind = iota
	kindWeekly
	kindMonthly
)

// calendar implements Daily, Weekly and Monthly. Units are identified by the
// day number of their first local date.
type calendar struct {
	loc  *time.Location
	kind calKind
}

func (c calendar) String() string {
	switch c.kind {
	case kindWeekly:
		return "weekly@" + c.loc.String()
	case kindMonthly:
		return "monthly@" + c.loc.String()
	}
	return "daily@" + c.loc.String()
}

// unitStart returns the first date of the unit containing date day.
func (c calendar) unitStart(day int64) int64 {
	switch c.kind {
	case kindWeekly:
		return mondayOf(day)
	case kindMonthly:
		y, m, _ := caltime.Civil(day)
		return caltime.DayNumber(y, m, 1)
	}
	return day
}

// nextUnit returns the first date of the unit after the one starting at sd.
func (c calendar) nextUnit(sd int64) int64 {
	switch c.kind {
	case kindWeekly:
		return sd + 7
	case kindMonthly:
		y, m, _ := caltime.Civil(sd)
		return caltime.DayNumber(y, m+1, 1)
	}
	return sd + 1
}

func (c calendar) name(sd int64) string {
	t := time.Unix(sd*caltime.SecondsPerDay, 0).UTC()
	switch c.kind {
	case kindWeekly:
		y, w := t.ISOWeek()
		return fmt.Sprintf("%04d-W%02d", y, w)
	case kindMonthly:
		return t.Format("2006-01")
	}
	return t.Format("2006-01-02")
}

// dayStart is the first instant of local date day.
func (c calendar) dayStart(day int64) time.Time {
	return caltime.Instant(caltime.Resolve(c.loc, day*caltime.SecondsPerDay), c.loc)
}

func (c calendar) period(sd int64) Period {
	return Period{Name: c.name(sd), Start: c.dayStart(sd), End: c.dayStart(c.nextUnit(sd))}
}

func (c calendar) At(t time.Time) Period {
	sd := c.unitStart(caltime.FloorDiv(caltime.WallSeconds(t, c.loc), caltime.SecondsPerDay))
	p := c.period(sd)
	// The local date of t normally identifies its unit. Only when the wall
	// clock jumps back across midnight can t precede or follow it; then
	// step to the neighbouring unit (empty units are skipped the same way).
	for i := 0; i < 8; i++ {
		switch {
		case t.Before(p.Start):
			sd = c.unitStart(sd - 1)
		case !t.Before(p.End):
			sd = c.nextUnit(sd)
		default:
			return p
		}
		p = c.period(sd)
	}
	return p
}

func (c calendar) Next(p Period) Period { return c.At(p.End) }

func (c calendar) Prev(p Period) Period { return c.At(p.Start.Add(-time.Nanosecond)) }

func (c calendar) Parse(name string) (Period, error) {
	var sd int64
	switch c.kind {
	case kindWeekly:
		// "YYYY-Www"
		if len(name) != 8 || name[4:6] != "-W" || !allDigits(name[:4]) || !allDigits(name[6:]) {
			return Period{}, invalid(c, name)
		}
		y, _ := strconv.Atoi(name[:4])
		w, _ := strconv.Atoi(name[6:])
		if w < 1 || w > 53 {
			return Period{}, invalid(c, name)
		}
		jan4 := caltime.DayNumber(y, time.January, 4)
		sd = mondayOf(jan4) + int64(w-1)*7 // week 1 contains 4 January
	default:
		layout := "2006-01-02"
		if c.kind == kindMonthly {
			layout = "2006-01"
		}
		t, err := time.Parse(layout, name)
		if err != nil {
			return Period{}, invalid(c, name)
		}
		sd = caltime.FloorDiv(t.Unix(), caltime.SecondsPerDay)
	}
	// Canonical check: the unit must exist (be non-empty) and carry exactly
	// this name. This rejects e.g. week 53 of a 52-week year.
	p := c.At(c.dayStart(sd))
	if p.Name != name {
		return Period{}, invalid(c, name)
	}
	return p, nil
}

// mondayOf returns the day number of the Monday on or before day.
func mondayOf(day int64) int64 {
	return day - int64((caltime.Weekday(day)+6)%7)
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// hourly implements Hourly.
type hourly struct {
	loc *time.Location
}

func (h hourly) String() string { return "hourly@" + h.loc.String() }

func (h hourly) At(t time.Time) Period {
	s := t.Unix()
	off, zs, ze := caltime.Segment(h.loc, s)
	u := s - caltime.FloorMod(s+off, 3600) // latest wall hh:00:00 at or before t
	start, end := max(u, zs), min(u+3600, ze)
	return Period{
		Name:  caltime.UTCName(start),
		Start: caltime.Instant(start, h.loc),
		End:   caltime.Instant(end, h.loc),
	}
}

func (h hourly) Next(p Period) Period { return h.At(p.End) }

func (h hourly) Prev(p Period) Period { return h.At(p.Start.Add(-time.Nanosecond)) }

func (h hourly) Parse(name string) (Period, error) {
	sec, ok := caltime.ParseUTCName(name)
	if !ok {
		return Period{}, invalid(h, name)
	}
	p := h.At(time.Unix(sec, 0))
	if p.Start.Unix() != sec {
		return Period{}, invalid(h, name)
	}
	return p, nil
}
