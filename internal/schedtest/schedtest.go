// Package schedtest holds test helpers shared by the Scheduler's tests in
// package idem and those of module github.com/idemgo/idem/cron. It is
// imported only by tests.
package schedtest

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/testwait"
)

// Zones are the zones the invariant tests run in: two ordinary one-hour DST
// zones, a 30-minute DST zone, and two zones without DST.
var Zones = []string{"America/New_York", "Europe/London", "Australia/Lord_Howe", "Asia/Shanghai", "UTC"}

// Transitions lists the real 2026 DST transition dates (local) of Zones.
var Transitions = map[string][]string{
	"America/New_York":    {"2026-03-08", "2026-11-01"},
	"Europe/London":       {"2026-03-29", "2026-10-25"},
	"Australia/Lord_Howe": {"2026-04-05", "2026-10-04"},
	"Asia/Shanghai":       nil,
	"UTC":                 nil,
}

// Location loads the named zone or fails the test. Callers should import
// time/tzdata so that results do not depend on the machine's zoneinfo.
func Location(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatalf("LoadLocation(%q): %v", name, err)
	}
	return loc
}

// LocalDay parses "2006-01-02" as noon of that date in loc.
func LocalDay(t testing.TB, date string, loc *time.Location) time.Time {
	t.Helper()
	d, err := time.ParseInLocation("2006-01-02 15:04", date+" 12:00", loc)
	if err != nil {
		t.Fatalf("bad date %q: %v", date, err)
	}
	return d
}

// UTC parses an RFC 3339 instant.
func UTC(t testing.TB, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatalf("bad RFC3339 %q: %v", s, err)
	}
	return v
}

// Walk checks the Schedule invariants on n consecutive periods of s from the
// one containing t0: periods are non-empty, contiguous, expressed in loc,
// strictly increasing in name, round-trip through Parse, are found by At
// from inside, and Next and Prev are inverse.
func Walk(t testing.TB, s idem.Schedule, loc *time.Location, t0 time.Time, n int) {
	t.Helper()
	p := s.At(t0)
	if p.Start.After(t0) || !p.End.After(t0) {
		t.Fatalf("At(%v) = %+v does not contain it", t0, p)
	}
	for i := 0; i < n; i++ {
		if !p.Start.Before(p.End) {
			t.Fatalf("%s: empty period %+v", p.Name, p)
		}
		if got, want := p.Start.Location(), loc; got != want {
			t.Fatalf("%s: Start location got %v, want %v", p.Name, got, want)
		}
		if got, want := p.End.Location(), loc; got != want {
			t.Fatalf("%s: End location got %v, want %v", p.Name, got, want)
		}
		got, err := s.Parse(p.Name)
		if err != nil {
			t.Fatalf("Parse(%q): %v", p.Name, err)
		}
		if got != p {
			t.Fatalf("Parse(%q): got %+v, want %+v", p.Name, got, p)
		}
		mid := p.Start.Add(p.End.Sub(p.Start) / 2)
		for _, at := range []time.Time{p.Start, mid, p.End.Add(-time.Nanosecond), mid.UTC()} {
			if got := s.At(at); got != p {
				t.Fatalf("At(%v): got %+v, want %+v", at, got, p)
			}
		}
		next := s.Next(p)
		if got, want := next.Start, p.End; got != want {
			t.Fatalf("%s: not contiguous: Next starts %v, want %v", p.Name, got, want)
		}
		if !(p.Name < next.Name) {
			t.Fatalf("names not strictly increasing: %q then %q", p.Name, next.Name)
		}
		if got := s.Prev(next); got != p {
			t.Fatalf("Prev(Next(%s)): got %+v, want %+v", p.Name, got, p)
		}
		if got := s.Next(s.Prev(p)); got != p {
			t.Fatalf("Next(Prev(%s)): got %+v, want %+v", p.Name, got, p)
		}
		p = next
	}
}

// Concurrent walks every schedule 20 periods forward from base in two
// goroutines at once and fails t if they disagree: schedules are values,
// safe for concurrent use (run it under -race).
func Concurrent(t testing.TB, base time.Time, scheds ...idem.Schedule) {
	t.Helper()
	var wg sync.WaitGroup
	results := make([][]string, 2)
	for g := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, s := range scheds {
				p := s.At(base)
				for range 20 {
					p = s.Next(p)
				}
				results[g] = append(results[g], p.Name)
			}
		}()
	}
	testwait.Group(t, &wg, "2 goroutines walking %d schedules", len(scheds))
	if got, want := strings.Join(results[0], ","), strings.Join(results[1], ","); got != want {
		t.Errorf("goroutines disagree: got %s, want %s", got, want)
	}
}
