package main

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
)

func TestExitCode(t *testing.T) {
	t.Parallel()
	pr := func(o idem.Outcome, err error) idem.PeriodResult {
		return idem.PeriodResult{Outcome: o, Err: err}
	}
	boom := errors.New("boom")
	for _, c := range []struct {
		name    string
		periods []idem.PeriodResult
		want    int
	}{
		{"nothing due", nil, exitDone},
		{"already done", []idem.PeriodResult{pr(idem.AlreadyDone, nil)}, exitDone},
		{"skipped and done", []idem.PeriodResult{pr(idem.Skipped, nil), pr(idem.AlreadyDone, nil)}, exitDone},
		{"ran", []idem.PeriodResult{pr(idem.AlreadyDone, nil), pr(idem.Ran, nil)}, exitOK},
		{"recovered", []idem.PeriodResult{pr(idem.Recovered, nil)}, exitOK},
		{"ran then failed", []idem.PeriodResult{pr(idem.Ran, nil), pr(idem.BackingOff, boom)}, exitFailed},
		{"parked", []idem.PeriodResult{pr(idem.Parked, boom)}, exitFailed},
		{"store failed", []idem.PeriodResult{pr(idem.Failed, boom)}, exitFailed},
		{"busy", []idem.PeriodResult{pr(idem.InProgress, boom)}, exitBusy},
		{"lease lost", []idem.PeriodResult{pr(idem.LeaseLost, boom)}, exitBusy},
		{"unknown", []idem.PeriodResult{pr(idem.Ran, nil), pr(idem.Unknown, boom)}, exitUnknown},
		{"unknown beats failed", []idem.PeriodResult{pr(idem.Parked, boom), pr(idem.Unknown, boom)}, exitUnknown},
		{"failed beats busy", []idem.PeriodResult{pr(idem.InProgress, boom), pr(idem.BackingOff, boom)}, exitFailed},
	} {
		if got := exitCode(c.periods); got != c.want {
			t.Errorf("%s: exit %d, want %d", c.name, got, c.want)
		}
	}
}

func TestParseScheduleAndTime(t *testing.T) {
	t.Parallel()
	berlin, err := loadZone("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	for spec, want := range map[string]string{
		"daily": "daily@Europe/Berlin", "hourly": "hourly@Europe/Berlin", "weekly": "weekly@Europe/Berlin",
		"monthly": "monthly@Europe/Berlin", "30 2 * * *": "cron(30 2 * * *)@Europe/Berlin", "@daily": "cron(@daily)@Europe/Berlin",
	} {
		s, err := parseSchedule(spec, berlin)
		if err != nil {
			t.Errorf("parseSchedule(%q): %v", spec, err)
			continue
		}
		if s.String() != want {
			t.Errorf("parseSchedule(%q) = %s, want %s", spec, s, want)
		}
	}
	for _, spec := range []string{"", "fortnightly", "61 * * * *", "0 0 30 2 *"} {
		if _, err := parseSchedule(spec, berlin); err == nil {
			t.Errorf("parseSchedule(%q): no error", spec)
		}
	}
	for in, want := range map[string]string{
		"2026-10-01":           "2026-09-30T22:00:00Z",
		"2026-10-01T02:00":     "2026-10-01T00:00:00Z",
		"2026-10-01T02:00:00Z": "2026-10-01T02:00:00Z",
	} {
		got, err := parseTime(in, berlin)
		if err != nil || got.UTC().Format(time.RFC3339) != want {
			t.Errorf("parseTime(%q) = %v, %v; want %s", in, got, err, want)
		}
	}
	if _, err := loadZone("Mars/Olympus"); err == nil {
		t.Error("loadZone(Mars/Olympus): no error")
	}
}

// lockedBuffer is a bytes.Buffer for concurrent writers: a process's output
// that the test reads while the process writes it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestBadScheduleSaysWhyOnce: a bad --schedule is a usage error whose
// message starts with "idem: " once and names --schedule and the spec once,
// with cron's reason (it said "idem: --schedule …: idem: cron spec …", and
// "--schedule: --schedule …" from show, ls and ui).
func TestBadScheduleSaysWhyOnce(t *testing.T) {
	t.Parallel()
	ledger := filepath.Join(t.TempDir(), "ledger.db")
	const spec = "61 * * * *"
	for _, args := range [][]string{
		{"run", "--ledger", ledger, "--job", "settle", "--schedule", spec, "--", "true"},
		{"show", "mail", "2026-10-27", "--ledger", ledger, "--after", "settle", "--schedule", spec},
		{"ls", "--ledger", ledger, "--job", "mail", "--after", "settle", "--schedule", spec},
		{"ui", "--ledger", ledger, "--schedule", "settle=" + spec},
	} {
		var out, errb strings.Builder
		code := execute(args, &out, &errb)
		line, _, _ := strings.Cut(errb.String(), "\n")
		want := `idem: --schedule "61 * * * *": not daily, hourly, weekly, monthly or a valid 5-field cron expression: `
		if code != exitUsage || !strings.HasPrefix(line, want) || strings.Count(line, "idem: ") != 1 ||
			strings.Count(line, "--schedule") != 1 || strings.Count(line, spec) != 1 || !strings.Contains(line, "61") || len(line) == len(want) {
			t.Errorf("idem %s: exit %d, stderr %q; want exit %d and one line %q and cron's reason", strings.Join(args, " "), code, errb.String(), exitUsage, want)
		}
	}
}
