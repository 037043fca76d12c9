package idem_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // results must not depend on the machine's zoneinfo

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/schedtest"
)

var (
	mustLoc  = schedtest.Location
	localDay = schedtest.LocalDay
	utc      = schedtest.UTC
)

func TestDaily(t *testing.T) {
	t.Parallel()
	tests := []struct {
		zone, date       string
		wantLen          time.Duration
		wantStart, wantE string // UTC
	}{
		{"America/New_York", "2026-10-27", 24 * time.Hour, "2026-10-27T04:00:00Z", "2026-10-28T04:00:00Z"},
		{"America/New_York", "2026-03-08", 23 * time.Hour, "2026-03-08T05:00:00Z", "2026-03-09T04:00:00Z"},
		{"America/New_York", "2026-11-01", 25 * time.Hour, "2026-11-01T04:00:00Z", "2026-11-02T05:00:00Z"},
		{"Europe/London", "2026-03-29", 23 * time.Hour, "2026-03-29T00:00:00Z", "2026-03-29T23:00:00Z"},
		{"Europe/London", "2026-10-25", 25 * time.Hour, "2026-10-24T23:00:00Z", "2026-10-26T00:00:00Z"},
		{"Australia/Lord_Howe", "2026-04-05", 24*time.Hour + 30*time.Minute, "2026-04-04T13:00:00Z", "2026-04-05T13:30:00Z"},
		{"Australia/Lord_Howe", "2026-10-04", 23*time.Hour + 30*time.Minute, "2026-10-03T13:30:00Z", "2026-10-04T13:00:00Z"},
		{"Asia/Shanghai", "2026-03-08", 24 * time.Hour, "2026-03-07T16:00:00Z", "2026-03-08T16:00:00Z"},
		{"Asia/Shanghai", "2026-11-01", 24 * time.Hour, "2026-10-31T16:00:00Z", "2026-11-01T16:00:00Z"},
		{"UTC", "2026-03-29", 24 * time.Hour, "2026-03-29T00:00:00Z", "2026-03-30T00:00:00Z"},
		{"UTC", "2026-10-25", 24 * time.Hour, "2026-10-25T00:00:00Z", "2026-10-26T00:00:00Z"},
	}
	for _, tt := range tests {
		t.Run(tt.zone+"/"+tt.date, func(t *testing.T) {
			t.Parallel()
			loc := mustLoc(t, tt.zone)
			p := idem.Daily(loc).At(localDay(t, tt.date, loc))
			if got, want := p.Name, tt.date; got != want {
				t.Errorf("Name: got %q, want %q", got, want)
			}
			if got, want := p.End.Sub(p.Start), tt.wantLen; got != want {
				t.Errorf("length: got %v, want %v", got, want)
			}
			if got, want := p.Start.UTC().Format(time.RFC3339), tt.wantStart; got != want {
				t.Errorf("Start: got %s, want %s", got, want)
			}
			if got, want := p.End.UTC().Format(time.RFC3339), tt.wantE; got != want {
				t.Errorf("End: got %s, want %s", got, want)
			}
			if got, want := p.Start.Location(), loc; got != want {
				t.Errorf("Start location: got %v, want %v", got, want)
			}
			if got, want := p.Start.Format("15:04"), "00:00"; got != want {
				t.Errorf("local start: got %s, want %s", got, want)
			}
		})
	}
}

func TestDailyFixedZonesAlways24h(t *testing.T) {
	t.Parallel()
	for _, zone := range []string{"Asia/Shanghai", "UTC"} {
		loc := mustLoc(t, zone)
		s := idem.Daily(loc)
		p := s.At(time.Date(2026, 1, 1, 0, 0, 0, 0, loc))
		for i := 0; i < 365; i++ {
			if got, want := p.End.Sub(p.Start), 24*time.Hour; got != want {
				t.Fatalf("%s %s: length got %v, want %v", zone, p.Name, got, want)
			}
			p = s.Next(p)
		}
		if got, want := p.Name, "2027-01-01"; got != want {
			t.Errorf("%s after 365 days: got %q, want %q", zone, got, want)
		}
	}
}

// Some zones change their clocks at midnight, so a date can begin at 01:00,
// or (Samoa, December 2011) not exist at all.
func TestDailyMidnightGap(t *testing.T) {
	t.Parallel()
	havana := mustLoc(t, "America/Havana")
	p := idem.Daily(havana).At(localDay(t, "2026-03-08", havana))
	if got, want := p.Start.Format("2006-01-02 15:04 MST"), "2026-03-08 01:00 CDT"; got != want {
		t.Errorf("Havana 2026-03-08 Start: got %q, want %q", got, want)
	}
	if got, want := p.End.Sub(p.Start), 23*time.Hour; got != want {
		t.Errorf("Havana 2026-03-08 length: got %v, want %v", got, want)
	}
	if got, want := idem.Daily(havana).Prev(p).End, p.Start; got != want {
		t.Errorf("Havana 2026-03-07 End: got %v, want %v", got, want)
	}

	apia := mustLoc(t, "Pacific/Apia")
	d := idem.Daily(apia)
	q := d.Next(d.At(localDay(t, "2011-12-29", apia)))
	if got, want := q.Name, "2011-12-31"; got != want {
		t.Errorf("Apia day after 2011-12-29: got %q, want %q", got, want)
	}
	if _, err := d.Parse("2011-12-30"); !errors.Is(err, idem.ErrInvalidPeriod) {
		t.Errorf("Apia Parse(2011-12-30): got %v, want ErrInvalidPeriod", err)
	}
}

func TestHourlyFallBackNewYork(t *testing.T) {
	t.Parallel()
	loc := mustLoc(t, "America/New_York")
	s := idem.Hourly(loc)
	first := s.At(utc(t, "2026-11-01T05:30:00Z"))  // 01:30 EDT
	second := s.At(utc(t, "2026-11-01T06:30:00Z")) // 01:30 EST
	tests := []struct {
		p                  idem.Period
		wantName, wantZone string
	}{
		{first, "2026-11-01T05:00Z", "EDT"},
		{second, "2026-11-01T06:00Z", "EST"},
	}
	for _, tt := range tests {
		if got, want := tt.p.Name, tt.wantName; got != want {
			t.Errorf("Name: got %q, want %q", got, want)
		}
		if got, want := tt.p.Start.Format("15:04 MST"), "01:00 "+tt.wantZone; got != want {
			t.Errorf("%s local start: got %q, want %q", tt.p.Name, got, want)
		}
		if got, want := tt.p.End.Sub(tt.p.Start), time.Hour; got != want {
			t.Errorf("%s length: got %v, want %v", tt.p.Name, got, want)
		}
	}
	if first == second {
		t.Fatalf("the two 01:00 hours are the same period %+v", first)
	}
	if !(first.Name < second.Name) {
		t.Errorf("names out of order: %q !< %q", first.Name, second.Name)
	}
	if got, want := s.Next(first), second; got != want {
		t.Errorf("Next(first 01:00): got %+v, want %+v", got, want)
	}
}

func TestHourlySpringForwardNewYork(t *testing.T) {
	t.Parallel()
	loc := mustLoc(t, "America/New_York")
	s := idem.Hourly(loc)
	p := s.At(utc(t, "2026-03-08T06:59:59Z"))
	if got, want := p.Start.Format("15:04 MST"), "01:00 EST"; got != want {
		t.Errorf("hour before gap: got %s, want %s", got, want)
	}
	n := s.Next(p)
	if got, want := n.Start.Format("15:04 MST"), "03:00 EDT"; got != want {
		t.Errorf("hour after gap: got %s, want %s", got, want)
	}
	if got, want := n.Name, "2026-03-08T07:00Z"; got != want {
		t.Errorf("Name after gap: got %q, want %q", got, want)
	}
	day := idem.Daily(loc).At(localDay(t, "2026-03-08", loc))
	for q := s.At(day.Start); q.Start.Before(day.End); q = s.Next(q) {
		if q.Start.Hour() == 2 {
			t.Errorf("unexpected 02:00 period %+v", q)
		}
	}
}

func TestHourlyTransitionDays(t *testing.T) {
	t.Parallel()
	tests := []struct {
		zone, date string
		wantCount  int
		wantHalf   int // number of 30-minute periods; all others last 1h
	}{
		{"America/New_York", "2026-03-08", 23, 0},
		{"America/New_York", "2026-11-01", 25, 0},
		{"Europe/London", "2026-03-29", 23, 0},
		{"Europe/London", "2026-10-25", 25, 0},
		{"Australia/Lord_Howe", "2026-04-05", 25, 1},
		{"Australia/Lord_Howe", "2026-10-04", 24, 1},
		{"Asia/Shanghai", "2026-03-08", 24, 0},
		{"UTC", "2026-11-01", 24, 0},
	}
	for _, tt := range tests {
		t.Run(tt.zone+"/"+tt.date, func(t *testing.T) {
			t.Parallel()
			loc := mustLoc(t, tt.zone)
			s := idem.Hourly(loc)
			day := idem.Daily(loc).At(localDay(t, tt.date, loc))
			p := s.At(day.Start)
			if got, want := p.Start, day.Start; got != want {
				t.Fatalf("first hour starts at %v, want %v", got, want)
			}
			var count, half int
			var total time.Duration
			prevName := ""
			for p.Start.Before(day.End) {
				count++
				d := p.End.Sub(p.Start)
				total += d
				switch d {
				case 30 * time.Minute:
					half++
				case time.Hour:
				default:
					t.Errorf("%s: length got %v, want 1h or 30m", p.Name, d)
				}
				if !(prevName < p.Name) {
					t.Errorf("names not increasing: %q then %q", prevName, p.Name)
				}
				prevName = p.Name
				n := s.Next(p)
				if got, want := n.Start, p.End; got != want {
					t.Errorf("%s: not contiguous: next starts %v, want %v", p.Name, got, want)
				}
				p = n
			}
			if got, want := p.Start, day.End; got != want {
				t.Errorf("last hour ends at %v, want day end %v", got, want)
			}
			if got, want := count, tt.wantCount; got != want {
				t.Errorf("count: got %d, want %d", got, want)
			}
			if got, want := half, tt.wantHalf; got != want {
				t.Errorf("30-minute periods: got %d, want %d", got, want)
			}
			if got, want := total, day.End.Sub(day.Start); got != want {
				t.Errorf("total: got %v, want %v", got, want)
			}
		})
	}
}

func TestHourlyLordHowe(t *testing.T) {
	t.Parallel()
	loc := mustLoc(t, "Australia/Lord_Howe")
	s := idem.Hourly(loc)
	tests := []struct {
		at        string // UTC instant
		wantName  string
		wantLocal string // local start
		wantLen   time.Duration
	}{
		// Fall back 2026-04-05 02:00 +11 -> 01:30 +1030.
		{"2026-04-04T14:59:59Z", "2026-04-04T14:00Z", "01:00 +1100", time.Hour},
		{"2026-04-04T15:00:00Z", "2026-04-04T15:00Z", "01:30 +1030", 30 * time.Minute},
		{"2026-04-04T15:30:00Z", "2026-04-04T15:30Z", "02:00 +1030", time.Hour},
		// Spring forward 2026-10-04 02:00 +1030 -> 02:30 +11.
		{"2026-10-03T15:29:59Z", "2026-10-03T14:30Z", "01:00 +1030", time.Hour},
		{"2026-10-03T15:30:00Z", "2026-10-03T15:30Z", "02:30 +1100", 30 * time.Minute},
		{"2026-10-03T16:00:00Z", "2026-10-03T16:00Z", "03:00 +1100", time.Hour},
	}
	for _, tt := range tests {
		p := s.At(utc(t, tt.at))
		if got, want := p.Name, tt.wantName; got != want {
			t.Errorf("At(%s).Name: got %q, want %q", tt.at, got, want)
		}
		if got, want := p.Start.Format("15:04 -0700"), tt.wantLocal; got != want {
			t.Errorf("At(%s) local start: got %q, want %q", tt.at, got, want)
		}
		if got, want := p.End.Sub(p.Start), tt.wantLen; got != want {
			t.Errorf("At(%s) length: got %v, want %v", tt.at, got, want)
		}
	}
}

func TestWeekly(t *testing.T) {
	t.Parallel()
	tests := []struct {
		date, wantName, wantMonday string
	}{
		{"2026-10-27", "2026-W44", "2026-10-26"},
		{"2026-12-31", "2026-W53", "2026-12-28"},
		{"2027-01-01", "2026-W53", "2026-12-28"},
		{"2027-01-03", "2026-W53", "2026-12-28"},
		{"2027-01-04", "2027-W01", "2027-01-04"},
		{"2025-12-29", "2026-W01", "2025-12-29"},
		{"2026-01-04", "2026-W01", "2025-12-29"},
		{"2026-03-02", "2026-W10", "2026-03-02"},
	}
	for _, zone := range schedtest.Zones {
		loc := mustLoc(t, zone)
		s := idem.Weekly(loc)
		for _, tt := range tests {
			d := localDay(t, tt.date, loc)
			y, w := d.ISOWeek()
			if got, want := fmt.Sprintf("%04d-W%02d", y, w), tt.wantName; got != want {
				t.Fatalf("table is wrong for %s: time.ISOWeek gives %s, want %s", tt.date, got, want)
			}
			p := s.At(d)
			if got, want := p.Name, tt.wantName; got != want {
				t.Errorf("%s %s: Name got %q, want %q", zone, tt.date, got, want)
			}
			if got, want := p.Start.Format("2006-01-02 15:04 Mon"), tt.wantMonday+" 00:00 Mon"; got != want {
				t.Errorf("%s %s: Start got %q, want %q", zone, tt.date, got, want)
			}
		}
	}
}

func TestWeeklyDSTLength(t *testing.T) {
	t.Parallel()
	tests := []struct {
		zone, date string
		want       time.Duration
	}{
		{"America/New_York", "2026-03-08", 167 * time.Hour},
		{"America/New_York", "2026-11-01", 169 * time.Hour},
		{"Europe/London", "2026-03-29", 167 * time.Hour},
		{"Europe/London", "2026-10-25", 169 * time.Hour},
		{"Australia/Lord_Howe", "2026-04-05", 168*time.Hour + 30*time.Minute},
		{"Australia/Lord_Howe", "2026-10-04", 167*time.Hour + 30*time.Minute},
		{"America/New_York", "2026-10-20", 168 * time.Hour},
		{"Asia/Shanghai", "2026-11-01", 168 * time.Hour},
	}
	for _, tt := range tests {
		loc := mustLoc(t, tt.zone)
		p := idem.Weekly(loc).At(localDay(t, tt.date, loc))
		if got := p.End.Sub(p.Start); got != tt.want {
			t.Errorf("%s week of %s (%s): got %v, want %v", tt.zone, tt.date, p.Name, got, tt.want)
		}
	}
}

func TestMonthly(t *testing.T) {
	t.Parallel()
	tests := []struct {
		zone, date, wantName string
		want                 time.Duration
	}{
		{"America/New_York", "2026-10-27", "2026-10", 31 * 24 * time.Hour},
		{"America/New_York", "2026-11-01", "2026-11", (30*24 + 1) * time.Hour}, // contains fall-back
		{"America/New_York", "2026-03-08", "2026-03", (31*24 - 1) * time.Hour}, // contains spring-forward
		{"Europe/London", "2026-10-25", "2026-10", (31*24 + 1) * time.Hour},
		{"Australia/Lord_Howe", "2026-04-05", "2026-04", 30*24*time.Hour + 30*time.Minute},
		{"Asia/Shanghai", "2026-02-14", "2026-02", 28 * 24 * time.Hour},
		{"UTC", "2026-12-31", "2026-12", 31 * 24 * time.Hour},
	}
	for _, tt := range tests {
		loc := mustLoc(t, tt.zone)
		p := idem.Monthly(loc).At(localDay(t, tt.date, loc))
		if got, want := p.Name, tt.wantName; got != want {
			t.Errorf("%s %s: Name got %q, want %q", tt.zone, tt.date, got, want)
		}
		if got := p.End.Sub(p.Start); got != tt.want {
			t.Errorf("%s %s: length got %v, want %v", tt.zone, tt.date, got, tt.want)
		}
		if got, want := p.Start.Format("02 15:04"), "01 00:00"; got != want {
			t.Errorf("%s %s: local start got %q, want %q", tt.zone, tt.date, got, want)
		}
	}
}

func TestString(t *testing.T) {
	t.Parallel()
	ny := mustLoc(t, "America/New_York")
	ldn := mustLoc(t, "Europe/London")
	tests := []struct {
		s    idem.Schedule
		want string
	}{
		{idem.Daily(ny), "daily@America/New_York"},
		{idem.Hourly(ny), "hourly@America/New_York"},
		{idem.Weekly(time.UTC), "weekly@UTC"},
		{idem.Monthly(ldn), "monthly@Europe/London"},
	}
	for _, tt := range tests {
		if got := tt.s.String(); got != tt.want {
			t.Errorf("String: got %q, want %q", got, tt.want)
		}
	}
}

type namedSchedule struct {
	name string
	s    idem.Schedule
}

func schedulesFor(loc *time.Location) []namedSchedule {
	return []namedSchedule{
		{"daily", idem.Daily(loc)},
		{"hourly", idem.Hourly(loc)},
		{"weekly", idem.Weekly(loc)},
		{"monthly", idem.Monthly(loc)},
	}
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	for _, zone := range schedtest.Zones {
		loc := mustLoc(t, zone)
		for _, ns := range schedulesFor(loc) {
			t.Run(zone+"/"+ns.name, func(t *testing.T) {
				t.Parallel()
				schedtest.Walk(t, ns.s, loc, time.Date(2026, 1, 1, 0, 0, 0, 0, loc), 400)
				if ns.name != "hourly" {
					return // 400 periods from January already cross every 2026 transition
				}
				for _, date := range schedtest.Transitions[zone] {
					schedtest.Walk(t, ns.s, loc, localDay(t, date, loc).Add(-36*time.Hour), 160)
				}
			})
		}
	}
}

func TestParseRejects(t *testing.T) {
	t.Parallel()
	ny := mustLoc(t, "America/New_York")
	lh := mustLoc(t, "Australia/Lord_Howe")
	daily, weekly, monthly, hourly := idem.Daily(ny), idem.Weekly(ny), idem.Monthly(ny), idem.Hourly(ny)
	tests := []struct {
		s    idem.Schedule
		name string
	}{
		{daily, ""},
		{daily, "2026-13-01"},
		{daily, "2026-02-30"},
		{daily, "2026-10-27 "},
		{daily, " 2026-10-27"},
		{daily, "2026-1-27"},
		{daily, "2026-10"},
		{daily, "2026-W44"},
		{daily, "2026-10-27T04:00Z"},
		{weekly, ""},
		{weekly, "2026-W54"},
		{weekly, "2026-W00"},
		{weekly, "2025-W53"}, // 2025 has 52 ISO weeks
		{weekly, "2027-W53"},
		{weekly, "2026-W5"},
		{weekly, "2026-w05"},
		{weekly, "2026-W+5"},
		{weekly, "2026-10-27"},
		{monthly, ""},
		{monthly, "2026-13"},
		{monthly, "2026-00"},
		{monthly, "2026-1"},
		{monthly, "2026-10-01"},
		{hourly, ""},
		{hourly, "2026-10-27"},
		{hourly, "2026-10-27T04:30Z"},    // not an hour boundary
		{hourly, "2026-10-27T04:00:00Z"}, // not canonical
		{hourly, "2026-10-27T04:00Z "},
		{idem.Hourly(lh), "2026-04-04T15:15Z"},
	}
	for _, tt := range tests {
		p, err := tt.s.Parse(tt.name)
		if !errors.Is(err, idem.ErrInvalidPeriod) {
			t.Errorf("%v.Parse(%q): got (%+v, %v), want error wrapping ErrInvalidPeriod", tt.s, tt.name, p, err)
		}
	}
}

func TestParseAccepts(t *testing.T) {
	t.Parallel()
	ny := mustLoc(t, "America/New_York")
	lh := mustLoc(t, "Australia/Lord_Howe")
	tests := []struct {
		s         idem.Schedule
		name      string
		wantStart string // local
	}{
		{idem.Daily(ny), "2026-11-01", "2026-11-01 00:00 EDT"},
		{idem.Weekly(ny), "2026-W53", "2026-12-28 00:00 EST"},
		{idem.Weekly(ny), "2020-W53", "2020-12-28 00:00 EST"},
		{idem.Weekly(ny), "2026-W01", "2025-12-29 00:00 EST"},
		{idem.Monthly(ny), "2026-02", "2026-02-01 00:00 EST"},
		{idem.Hourly(ny), "2026-11-01T06:00Z", "2026-11-01 01:00 EST"},
		{idem.Hourly(lh), "2026-04-04T15:00Z", "2026-04-05 01:30 +1030"},
	}
	for _, tt := range tests {
		p, err := tt.s.Parse(tt.name)
		if err != nil {
			t.Errorf("%v.Parse(%q): %v", tt.s, tt.name, err)
			continue
		}
		if got, want := p.Start.Format("2006-01-02 15:04 MST"), tt.wantStart; got != want {
			t.Errorf("%v.Parse(%q).Start: got %q, want %q", tt.s, tt.name, got, want)
		}
	}
}

func TestLastPeriod(t *testing.T) {
	t.Parallel()
	ny := mustLoc(t, "America/New_York")
	now := time.Date(2026, 11, 1, 2, 0, 0, 0, ny) // 02:00 EST, after the repeated hour
	tests := []struct {
		s    idem.Schedule
		want string
	}{
		{idem.Daily(ny), "2026-10-31"},
		{idem.Hourly(ny), "2026-11-01T06:00Z"}, // the second 01:00 hour (EST)
		{idem.Monthly(ny), "2026-10"},
		{idem.Weekly(ny), "2026-W43"},
	}
	for _, tt := range tests {
		if got := idem.LastPeriod(tt.s, now).Name; got != tt.want {
			t.Errorf("LastPeriod(%v, %v): got %q, want %q", tt.s, now, got, tt.want)
		}
	}
}

func TestNilLocationPanics(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		f    func()
	}{
		{"Daily", func() { idem.Daily(nil) }},
		{"Hourly", func() { idem.Hourly(nil) }},
		{"Weekly", func() { idem.Weekly(nil) }},
		{"Monthly", func() { idem.Monthly(nil) }},
	}
	for _, tt := range tests {
		func() {
			defer func() {
				r := recover()
				msg, _ := r.(string)
				if !strings.HasPrefix(msg, "idem: ") {
					t.Errorf("%s(nil): got panic %v, want a message prefixed \"idem: \"", tt.name, r)
				}
			}()
			tt.f()
		}()
	}
}

func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	loc := mustLoc(t, "Europe/London")
	var scheds []idem.Schedule
	for _, ns := range schedulesFor(loc) {
		scheds = append(scheds, ns.s)
	}
	schedtest.Concurrent(t, time.Date(2026, 10, 24, 0, 0, 0, 0, loc), scheds...)
}

// The 02:00 settlement run settles yesterday. On the morning after London's
// clocks go back, yesterday lasted 25 hours.
func ExampleLastPeriod() {
	london, err := time.LoadLocation("Europe/London")
	if err != nil {
		panic(err)
	}
	now := time.Date(2026, 10, 26, 2, 0, 0, 0, london)

	p := idem.LastPeriod(idem.Daily(london), now)
	fmt.Println(p.Name)
	fmt.Println(p.Start, "→", p.End)
	fmt.Println(p.End.Sub(p.Start))
	// Output:
	// 2026-10-25
	// 2026-10-25 00:00:00 +0100 BST → 2026-10-26 00:00:00 +0000 GMT
	// 25h0m0s
}
