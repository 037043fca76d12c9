package cron_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // results must not depend on the machine's zoneinfo

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/cron"
	"github.com/idemgo/idem/internal/schedtest"
	robfig "github.com/robfig/cron/v3"
)

var (
	mustLoc  = schedtest.Location
	localDay = schedtest.LocalDay
	utc      = schedtest.UTC
)

func mustCron(t testing.TB, spec string, loc *time.Location) idem.Schedule {
	t.Helper()
	s, err := cron.New(spec, loc)
	if err != nil {
		t.Fatalf("New(%q, %v): %v", spec, loc, err)
	}
	return s
}

// slotsOn returns the UTC start instants (RFC 3339) of the periods of s that
// start during the local day date.
func slotsOn(t *testing.T, s idem.Schedule, loc *time.Location, date string) []string {
	t.Helper()
	day := idem.Daily(loc).At(localDay(t, date, loc))
	p := s.At(day.Start)
	if p.Start.Before(day.Start) {
		p = s.Next(p)
	}
	var out []string
	for ; p.Start.Before(day.End); p = s.Next(p) {
		out = append(out, p.Start.UTC().Format(time.RFC3339))
	}
	return out
}

func TestTransitionDays(t *testing.T) {
	tests := []struct {
		spec, zone, date string
		want             []string
	}{
		// "30 1 * * *": exactly one slot on every transition day.
		{"30 1 * * *", "America/New_York", "2026-03-08", []string{"2026-03-08T06:30:00Z"}}, // 01:30 EST exists
		{"30 1 * * *", "America/New_York", "2026-11-01", []string{"2026-11-01T05:30:00Z"}}, // first 01:30 (EDT)
		{"30 1 * * *", "Europe/London", "2026-03-29", []string{"2026-03-29T01:00:00Z"}},    // gap: 02:00 BST
		{"30 1 * * *", "Europe/London", "2026-10-25", []string{"2026-10-25T00:30:00Z"}},    // first 01:30 (BST)
		{"30 1 * * *", "Australia/Lord_Howe", "2026-04-05", []string{"2026-04-04T14:30:00Z"}},
		{"30 1 * * *", "Australia/Lord_Howe", "2026-10-04", []string{"2026-10-03T15:00:00Z"}},
		{"30 1 * * *", "Asia/Shanghai", "2026-03-08", []string{"2026-03-07T17:30:00Z"}},
		{"30 1 * * *", "Asia/Shanghai", "2026-11-01", []string{"2026-10-31T17:30:00Z"}},
		{"30 1 * * *", "UTC", "2026-03-29", []string{"2026-03-29T01:30:00Z"}},
		{"30 1 * * *", "UTC", "2026-10-25", []string{"2026-10-25T01:30:00Z"}},
		// Gap handling.
		{"30 2 * * *", "America/New_York", "2026-03-08", []string{"2026-03-08T07:00:00Z"}},   // 03:00 EDT
		{"*/15 2 * * *", "America/New_York", "2026-03-08", []string{"2026-03-08T07:00:00Z"}}, // one slot, not four
		{"*/15 2,3 * * *", "America/New_York", "2026-03-08", []string{
			"2026-03-08T07:00:00Z", "2026-03-08T07:15:00Z", "2026-03-08T07:30:00Z", "2026-03-08T07:45:00Z",
		}}, // the gap slot merges with 03:00
		{"0 2 * * *", "Australia/Lord_Howe", "2026-10-04", []string{"2026-10-03T15:30:00Z"}}, // 02:30 +11
		{"*/15 2 * * *", "Australia/Lord_Howe", "2026-10-04", []string{"2026-10-03T15:30:00Z", "2026-10-03T15:45:00Z"}},
		// Fold handling: first occurrence only.
		{"*/30 1 * * *", "America/New_York", "2026-11-01", []string{"2026-11-01T05:00:00Z", "2026-11-01T05:30:00Z"}},
		{"*/15 1 * * *", "Australia/Lord_Howe", "2026-04-05", []string{
			"2026-04-04T14:00:00Z", "2026-04-04T14:15:00Z", "2026-04-04T14:30:00Z", "2026-04-04T14:45:00Z",
		}},
		{"0 * * * *", "America/New_York", "2026-03-08", nil}, // checked by count below
	}
	for _, tt := range tests {
		t.Run(tt.spec+"@"+tt.zone+"/"+tt.date, func(t *testing.T) {
			loc := mustLoc(t, tt.zone)
			got := slotsOn(t, mustCron(t, tt.spec, loc), loc, tt.date)
			if tt.want == nil {
				if g, w := len(got), 23; g != w {
					t.Errorf("slot count: got %d, want %d (%v)", g, w, got)
				}
				return
			}
			if strings.Join(got, " ") != strings.Join(tt.want, " ") {
				t.Errorf("slots: got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestPeriodAcrossGap(t *testing.T) {
	loc := mustLoc(t, "Europe/London")
	s := mustCron(t, "30 1 * * *", loc)
	p := s.At(utc(t, "2026-03-29T00:59:59Z"))
	if got, want := p.Name, "2026-03-28T01:30Z"; got != want {
		t.Errorf("Name: got %q, want %q", got, want)
	}
	if got, want := p.End.Format("2006-01-02 15:04 MST"), "2026-03-29 02:00 BST"; got != want {
		t.Errorf("End: got %q, want %q", got, want)
	}
	if got, want := p.End.Sub(p.Start), 23*time.Hour+30*time.Minute; got != want {
		t.Errorf("length: got %v, want %v", got, want)
	}
}

func TestDayFields(t *testing.T) {
	// October 2026: Fridays are the 2nd, 9th, 16th, 23rd and 30th.
	tests := []struct {
		spec string
		want int
	}{
		{"0 12 13 * 5", 6},      // both restricted: 13th OR Friday
		{"0 12 * * 5", 5},       // dom is *: Fridays only
		{"0 12 13 * *", 1},      // dow is *: 13th only
		{"0 12 ? * fri", 5},     // ? counts as *
		{"0 12 */2 * 5", 2},     // */2 starts with *, as in cronie: odd days AND Friday (9th, 23rd)
		{"0 12 1-31/2 * 5", 19}, // 1-31/2 is restricted: odd days OR Friday
		{"0 12 1-31 * 5", 31},
		{"@daily", 31},
		{"@weekly", 4}, // Sundays
		{"@monthly", 1},
		{"0 12 * 9,11 *", 0},
	}
	loc := mustLoc(t, "UTC")
	from, to := utc(t, "2026-10-01T00:00:00Z"), utc(t, "2026-11-01T00:00:00Z")
	for _, tt := range tests {
		s := mustCron(t, tt.spec, loc)
		p := s.At(from)
		if p.Start.Before(from) {
			p = s.Next(p)
		}
		n := 0
		for ; p.Start.Before(to); p = s.Next(p) {
			n++
		}
		if n != tt.want {
			t.Errorf("%s: slots in October got %d, want %d", tt.spec, n, tt.want)
		}
	}
}

// TestCronMatchesRobfigInUTC cross-checks slot generation against robfig's
// own Next in UTC, where there is no DST and both must agree.
func TestMatchesRobfigInUTC(t *testing.T) {
	specs := []string{"30 1 * * *", "*/20 9-17 * * 1-5", "0 0 1,15 * 3", "5 4 * 2 0", "0 0 29 2 *", "@hourly", "15 10 L * *"}
	for _, spec := range specs {
		rs, err := robfig.ParseStandard(spec)
		if err != nil {
			continue // robfig rejects it; so must we
		}
		s := mustCron(t, spec, time.UTC)
		cur := utc(t, "2026-01-01T00:00:00Z")
		p := s.At(cur)
		for i := 0; i < 60; i++ {
			want := rs.Next(p.Start)
			if want.IsZero() {
				break // robfig only searches five years ahead
			}
			p = s.Next(p)
			if !p.Start.Equal(want) {
				t.Errorf("%s: slot after %s: got %s, want %s", spec, p.Name, p.Start.UTC(), want.UTC())
				break
			}
		}
	}
	if _, err := cron.New("15 10 L * *", time.UTC); err == nil {
		t.Errorf(`New("15 10 L * *") accepted a spec robfig rejects`)
	}
}

func TestRareSpec(t *testing.T) {
	loc := mustLoc(t, "America/New_York")
	s := mustCron(t, "0 0 29 2 *", loc)
	p := s.At(localDay(t, "2026-10-27", loc))
	if got, want := p.Start.Format("2006-01-02 15:04 MST"), "2024-02-29 00:00 EST"; got != want {
		t.Errorf("Start: got %q, want %q", got, want)
	}
	if got, want := p.End.Format("2006-01-02 15:04 MST"), "2028-02-29 00:00 EST"; got != want {
		t.Errorf("End: got %q, want %q", got, want)
	}
	// Across a non-leap century year the gap is eight years.
	q := s.At(localDay(t, "2100-06-01", loc))
	if got, want := q.Start.Format("2006-01-02"), "2096-02-29"; got != want {
		t.Errorf("Start around 2100: got %q, want %q", got, want)
	}
	if got, want := q.End.Format("2006-01-02"), "2104-02-29"; got != want {
		t.Errorf("End around 2100: got %q, want %q", got, want)
	}
}

func TestErrors(t *testing.T) {
	tests := []string{
		"",
		"bad",
		"0 0 30 2 *",
		"0 0 31 4,6,9,11 *",
		"60 * * * *",
		"* * * *",
		"@every 1h",
		"@fortnightly",
		"TZ=UTC 0 0 * * *",
		"CRON_TZ=Europe/London 0 0 * * *",
	}
	for _, spec := range tests {
		if s, err := cron.New(spec, time.UTC); err == nil {
			t.Errorf("New(%q): got %v, want error", spec, s)
		}
	}
}

func TestString(t *testing.T) {
	ny := mustLoc(t, "America/New_York")
	ldn := mustLoc(t, "Europe/London")
	tests := []struct {
		spec string
		loc  *time.Location
		want string
	}{
		{"30 1 * * *", ldn, "cron(30 1 * * *)@Europe/London"},
		{"  30   1 * *  * ", ldn, "cron(30 1 * * *)@Europe/London"},
		{"@daily", ny, "cron(@daily)@America/New_York"},
	}
	for _, tt := range tests {
		if got := mustCron(t, tt.spec, tt.loc).String(); got != tt.want {
			t.Errorf("String: got %q, want %q", got, tt.want)
		}
	}
}

type namedSchedule struct {
	name string
	s    idem.Schedule
}

func schedulesFor(t testing.TB, loc *time.Location) []namedSchedule {
	return []namedSchedule{
		{"30 1", mustCron(t, "30 1 * * *", loc)},
		{"*/15 2", mustCron(t, "*/15 2 * * *", loc)},
		{"0 2", mustCron(t, "0 2 * * *", loc)},
		{"13th or Fri", mustCron(t, "0 9 13 * 5", loc)},
		{"*/20", mustCron(t, "*/20 * * * *", loc)},
	}
}

func TestRoundTrip(t *testing.T) {
	for _, zone := range schedtest.Zones {
		loc := mustLoc(t, zone)
		for _, ns := range schedulesFor(t, loc) {
			t.Run(zone+"/"+ns.name, func(t *testing.T) {
				schedtest.Walk(t, ns.s, loc, time.Date(2026, 1, 1, 0, 0, 0, 0, loc), 400)
				if ns.name != "*/20" {
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
	ny := mustLoc(t, "America/New_York")
	s := mustCron(t, "30 1 * * *", ny)
	for _, name := range []string{
		"",
		"2026-10-27T05:31Z",    // not a slot
		"2026-11-01T06:30Z",    // second 01:30 of the fall-back day is not a slot
		"2026-10-27T05:30:00Z", // not canonical
		"2026-10-27T05:30Z ",
		"2026-10-27",
	} {
		p, err := s.Parse(name)
		if !errors.Is(err, idem.ErrInvalidPeriod) {
			t.Errorf("%v.Parse(%q): got (%+v, %v), want error wrapping ErrInvalidPeriod", s, name, p, err)
		}
	}
}

func TestParseAccepts(t *testing.T) {
	ny := mustLoc(t, "America/New_York")
	s := mustCron(t, "30 1 * * *", ny)
	p, err := s.Parse("2026-11-01T05:30Z")
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if got, want := p.Start.Format("2006-01-02 15:04 MST"), "2026-11-01 01:30 EDT"; got != want {
		t.Errorf("Start: got %q, want %q", got, want)
	}
}

func TestLastPeriod(t *testing.T) {
	ny := mustLoc(t, "America/New_York")
	now := time.Date(2026, 11, 1, 2, 0, 0, 0, ny) // 02:00 EST, after the repeated hour
	s := mustCron(t, "30 1 * * *", ny)
	if got, want := idem.LastPeriod(s, now).Name, "2026-10-31T05:30Z"; got != want {
		t.Errorf("LastPeriod: got %q, want %q", got, want)
	}
}

func TestNilLocationPanics(t *testing.T) {
	defer func() {
		r := recover()
		msg, _ := r.(string)
		if !strings.HasPrefix(msg, "idem: ") {
			t.Errorf("New(spec, nil): got panic %v, want a message prefixed \"idem: \"", r)
		}
	}()
	_, _ = cron.New("0 0 * * *", nil)
}

func TestConcurrentUse(t *testing.T) {
	loc := mustLoc(t, "Europe/London")
	var scheds []idem.Schedule
	for _, ns := range schedulesFor(t, loc) {
		scheds = append(scheds, ns.s)
	}
	schedtest.Concurrent(t, time.Date(2026, 10, 24, 0, 0, 0, 0, loc), scheds...)
}

// A job that runs daily at 01:30 London time. On 2026-03-29 the clocks
// spring forward from 01:00 to 02:00, so 01:30 does not exist: that day's
// slot is 02:00 BST, the first instant after the gap, and the periods on
// either side of it last 23h30m.
func ExampleNew() {
	london, err := time.LoadLocation("Europe/London")
	if err != nil {
		panic(err)
	}
	s, err := cron.New("30 1 * * *", london)
	if err != nil {
		panic(err)
	}
	p := s.At(time.Date(2026, 3, 28, 12, 0, 0, 0, london))
	for i := 0; i < 3; i++ {
		fmt.Println(p.Name, p.Start.Format("Jan 2 15:04 MST"), p.End.Sub(p.Start))
		p = s.Next(p)
	}
	// Output:
	// 2026-03-28T01:30Z Mar 28 01:30 GMT 23h30m0s
	// 2026-03-29T01:00Z Mar 29 02:00 BST 23h30m0s
	// 2026-03-30T00:30Z Mar 30 01:30 BST 24h0m0s
}

// countSlots counts the slots of s in [from, to).
func countSlots(s idem.Schedule, from, to time.Time) (n int, starts []time.Time) {
	p := s.At(from)
	if p.Start.Before(from) {
		p = s.Next(p)
	}
	for ; p.Start.Before(to); p = s.Next(p) {
		n++
		starts = append(starts, p.Start)
	}
	return n, starts
}

// TestStarStepDomDowLikeCronie: a day-of-month or day-of-week field that
// starts with "*" ("*/2") is unrestricted in the DOM/DOW rule, as in Vixie
// cron and cronie (entry.c sets DOM_STAR/DOW_STAR on a leading "*"): "0 0
// */2 * 1" fires on the odd days that are Mondays, not on the odd days and
// every Monday (robfig/cron's reading: several times as many days). The
// expected days are counted by brute force with cronie's rule.
func TestStarStepDomDowLikeCronie(t *testing.T) {
	from, to := utc(t, "2026-01-01T00:00:00Z"), utc(t, "2046-01-01T00:00:00Z")
	// cronie's rule, by brute force over the days.
	match := func(d time.Time, dom func(int) bool, dow func(time.Weekday) bool, either bool) bool {
		if either {
			return dom(d.Day()) || dow(d.Weekday())
		}
		return dom(d.Day()) && dow(d.Weekday())
	}
	odd := func(d int) bool { return d%2 == 1 }
	for _, tc := range []struct {
		spec   string
		dom    func(int) bool
		dow    func(time.Weekday) bool
		either bool // both fields restricted (neither starts with *)
	}{
		{"0 0 */2 * 1", odd, func(w time.Weekday) bool { return w == time.Monday }, false},
		{"0 0 1 * */2", func(d int) bool { return d == 1 }, func(w time.Weekday) bool { return w%2 == 0 }, false},
		{"0 0 *,15 * 1", func(int) bool { return true }, func(w time.Weekday) bool { return w == time.Monday }, false},
		{"0 0 1-31/2 * 1", odd, func(w time.Weekday) bool { return w == time.Monday }, true},
		{"0 0 15,* * 1", func(int) bool { return true }, func(w time.Weekday) bool { return w == time.Monday }, true},
	} {
		want := 0
		for d := from; d.Before(to); d = d.AddDate(0, 0, 1) {
			if match(d, tc.dom, tc.dow, tc.either) {
				want++
			}
		}
		got, starts := countSlots(mustCron(t, tc.spec, time.UTC), from, to)
		if got != want {
			t.Errorf("%s: %d slots in 2026-2045, want %d as cronie (either=%v)", tc.spec, got, want, tc.either)
		}
		for _, st := range starts {
			if !match(st, tc.dom, tc.dow, tc.either) {
				t.Errorf("%s: slot %s on a day cronie does not fire", tc.spec, st.Format(time.RFC3339))
				break
			}
		}
	}
}

// TestSundayIsSevenLikeCronie: day of week 7 is Sunday, as in Vixie cron
// and cronie, alone, in ranges, with steps and in lists.
func TestSundayIsSevenLikeCronie(t *testing.T) {
	from, to := utc(t, "2026-01-01T00:00:00Z"), utc(t, "2027-01-01T00:00:00Z")
	for spec, same := range map[string]string{
		"0 0 * * 7":     "0 0 * * 0",
		"0 0 * * 5-7":   "0 0 * * 5,6,0",
		"0 0 * * 1-7/2": "0 0 * * 1,3,5,0",
		"0 0 * * 1/2":   "0 0 * * 1,3,5,0",
		"0 0 * * 7,wed": "0 0 * * 0,3",
		"0 0 * * sat-7": "0 0 * * 6,0",
		"0 0 13 * 7":    "0 0 13 * 0",
		"30 9 * * 1-7":  "30 9 * * *",
		"0 0 * * */7":   "0 0 * * 0",
		"0 0 1-7 * 7-7": "0 0 1-7 * 0",
	} {
		s, err := cron.New(spec, time.UTC)
		if err != nil {
			t.Errorf("New(%q): %v; want it read as %q", spec, err, same)
			continue
		}
		_, got := countSlots(s, from, to)
		_, want := countSlots(mustCron(t, same, time.UTC), from, to)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%q fires %d times in 2026, %q %d times; want the same slots", spec, len(got), same, len(want))
		}
		if s.String() != "cron("+spec+")@UTC" {
			t.Errorf("New(%q).String() = %s: the spec as written", spec, s)
		}
	}
	for _, spec := range []string{"0 0 * * 8", "0 0 * * 7-1", "0 0 * * 5-7/0"} {
		if _, err := cron.New(spec, time.UTC); err == nil {
			t.Errorf("New(%q): no error", spec)
		}
	}
}
