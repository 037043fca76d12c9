package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/cmd/idem/internal/spec"
	"github.com/idemgo/idem/cron"
)

// loadZone loads --tz: an IANA zone name, "UTC" or "Local".
func loadZone(name string) (*time.Location, error) {
	if name == "" {
		name = "Local"
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("--tz %q: not a time zone (use an IANA name like Europe/Berlin, America/New_York, UTC): %w", name, err)
	}
	return loc, nil
}

// parseSchedule turns --schedule into a schedule in loc: daily, hourly,
// weekly, monthly, or a cron expression.
func parseSchedule(v string, loc *time.Location) (idem.Schedule, error) {
	if s, ok := spec.NamedSchedule(v, loc); ok {
		return s, nil
	}
	if strings.TrimSpace(v) == "" {
		return nil, fmt.Errorf("--schedule is empty: use daily, hourly, weekly, monthly or a cron expression like \"30 2 * * *\"")
	}
	s, err := cron.New(v, loc)
	if err != nil {
		return nil, &cronSpecError{fmt.Sprintf("--schedule %q: not daily, hourly, weekly, monthly or a valid 5-field cron expression: %s", v, cronReason(v, err)), err}
	}
	return s, nil
}

// cronReason is why cron.New refused spec, without the "idem: cron spec
// %q" that starts its error: --schedule's message names the spec already,
// and "idem: " starts the line once.
func cronReason(spec string, err error) string {
	msg := err.Error()
	if rest, ok := strings.CutPrefix(msg, fmt.Sprintf("idem: cron spec %q", spec)); ok && rest != "" {
		return strings.TrimSpace(strings.TrimPrefix(rest, ":"))
	}
	return strings.TrimPrefix(msg, "idem: ")
}

// A cronSpecError is a refused --schedule: its message, and cron.New's
// error (for errors.Is and As).
type cronSpecError struct {
	msg string
	err error
}

func (e *cronSpecError) Error() string { return e.msg }
func (e *cronSpecError) Unwrap() error { return e.err }

// parseTime reads --since: a date (2026-10-01) or a local time
// (2026-10-01T02:00) in loc, or an RFC 3339 instant.
func parseTime(s string, loc *time.Location) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	for _, layout := range []string{"2006-01-02", "2006-01-02T15:04", "2006-01-02 15:04"} {
		if t, err := time.ParseInLocation(layout, s, loc); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("invalid time %q (use a date like 2026-10-01, a local time like 2026-10-01T02:00, or RFC 3339)", s)
}
