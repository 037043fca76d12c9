package caltime_test

import (
	"testing"
	"time"
	_ "time/tzdata" // results must not depend on the machine's zoneinfo

	"github.com/idemgo/idem/internal/caltime"
)

func TestFloorDivMod(t *testing.T) {
	t.Parallel()
	tests := []struct{ a, b, div, mod int64 }{
		{7, 3, 2, 1},
		{-7, 3, -3, 2},
		{-6, 3, -2, 0},
		{7, -3, -3, -2},
		{0, 7, 0, 0},
	}
	for _, tt := range tests {
		if got := caltime.FloorDiv(tt.a, tt.b); got != tt.div {
			t.Errorf("FloorDiv(%d, %d): got %d, want %d", tt.a, tt.b, got, tt.div)
		}
		if got := caltime.FloorMod(tt.a, tt.b); got != tt.mod {
			t.Errorf("FloorMod(%d, %d): got %d, want %d", tt.a, tt.b, got, tt.mod)
		}
	}
}

func TestDays(t *testing.T) {
	t.Parallel()
	for _, day := range []int64{-719528, -1, 0, 1, 20000, 2932896} {
		y, m, d := caltime.Civil(day)
		if got := caltime.DayNumber(y, m, d); got != day {
			t.Errorf("DayNumber(Civil(%d)) = %d", day, got)
		}
		want := time.Unix(day*caltime.SecondsPerDay, 0).UTC().Weekday()
		if got := caltime.Weekday(day); got != want {
			t.Errorf("Weekday(%d): got %v, want %v", day, got, want)
		}
	}
	if got, want := caltime.DayNumber(2026, 13, 1), caltime.DayNumber(2027, 1, 1); got != want {
		t.Errorf("DayNumber does not normalize: got %d, want %d", got, want)
	}
}

func TestUTCName(t *testing.T) {
	t.Parallel()
	sec := time.Date(2026, 11, 1, 5, 30, 0, 0, time.UTC).Unix()
	tests := []struct {
		sec  int64
		name string
	}{
		{sec, "2026-11-01T05:30Z"},
		{sec + 7, "2026-11-01T05:30:07Z"},
	}
	for _, tt := range tests {
		if got := caltime.UTCName(tt.sec); got != tt.name {
			t.Errorf("UTCName(%d): got %q, want %q", tt.sec, got, tt.name)
		}
		if got, ok := caltime.ParseUTCName(tt.name); !ok || got != tt.sec {
			t.Errorf("ParseUTCName(%q): got (%d, %v), want (%d, true)", tt.name, got, ok, tt.sec)
		}
	}
	for _, name := range []string{"", "2026-11-01T05:30:00Z", "2026-11-01T05:30", "2026-11-01T05:30Z ", "2026-11-01"} {
		if got, ok := caltime.ParseUTCName(name); ok {
			t.Errorf("ParseUTCName(%q): got (%d, true), want rejection", name, got)
		}
	}
}

func TestResolve(t *testing.T) {
	t.Parallel()
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	wall := func(s string) int64 {
		v, err := time.Parse("2006-01-02 15:04", s)
		if err != nil {
			t.Fatal(err)
		}
		return v.Unix()
	}
	tests := []struct{ wall, want string }{
		{"2026-10-27 12:00", "2026-10-27T16:00:00Z"}, // ordinary
		{"2026-03-08 02:30", "2026-03-08T07:00:00Z"}, // gap: transition instant
		{"2026-03-08 03:00", "2026-03-08T07:00:00Z"},
		{"2026-11-01 01:30", "2026-11-01T05:30:00Z"}, // fold: first occurrence
		{"2026-11-01 02:00", "2026-11-01T07:00:00Z"},
	}
	for _, tt := range tests {
		got := time.Unix(caltime.Resolve(ny, wall(tt.wall)), 0).UTC().Format(time.RFC3339)
		if got != tt.want {
			t.Errorf("Resolve(%s): got %s, want %s", tt.wall, got, tt.want)
		}
	}
	u := time.Date(2026, 7, 1, 0, 0, 0, 0, time.UTC).Unix()
	off, start, end := caltime.Segment(ny, u)
	if off != -4*3600 || time.Unix(start, 0).UTC().Format(time.RFC3339) != "2026-03-08T07:00:00Z" ||
		time.Unix(end, 0).UTC().Format(time.RFC3339) != "2026-11-01T06:00:00Z" {
		t.Errorf("Segment(NY, July): got (%d, %d, %d)", off, start, end)
	}
	if got := caltime.WallSeconds(time.Unix(u, 0), ny); got != u+off {
		t.Errorf("WallSeconds: got %d, want %d", got, u+off)
	}
}
