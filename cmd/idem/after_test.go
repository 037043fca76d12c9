//go:build unix

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem/internal/schedtest"
)

// TestRunAfter: 'idem run --after settle' does not start a period whose
// settlement is not done: it says what it waits for and exits 4, with no
// attempt recorded; once settle has run, it runs. --after JOB/hourly waits
// for every hour of the day; --after previous for the job's own previous
// period; a bad value is a usage error naming the flag.
func TestRunAfter(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "2026-10-28T02:00:00Z")
	mail := func(extra ...string) []string {
		args := append([]string{"run", "--job", "mail", "--tz", "UTC"}, extra...)
		return append(args, "--", "sh", "-c", `echo "mail $IDEM_PERIOD" >> out.txt`)
	}
	_, stderr := e.want(exitBusy, mail("--after", "settle")...)
	if !strings.Contains(stderr, "mail 2026-10-27: waiting for settle/2026-10-27 (not run yet) (--after); nothing was started") {
		t.Fatalf("stderr: %q", stderr)
	}
	e.want(exitOK, "run", "--job", "settle", "--tz", "UTC", "--", "sh", "-c", `echo "settle $IDEM_PERIOD" >> out.txt`)
	e.want(exitOK, mail("--after", "settle")...)
	if got := e.lines("out.txt"); !equal(got, []string{"settle 2026-10-27", "mail 2026-10-27"}) {
		t.Fatalf("out.txt = %q", got)
	}
	out, _ := e.want(exitOK, "show", "mail", "2026-10-27")
	if !strings.Contains(out, "attempt") || strings.Contains(out, "failures: 1") {
		t.Fatalf("show: %s", out)
	}

	// A daily report after every hour of an hourly job: 24 of them.
	_, stderr = e.want(exitBusy, "run", "--job", "report", "--tz", "UTC", "--after", "hourly_import/hourly", "--", "true")
	if !strings.Contains(stderr, "hourly_import/2026-10-27T00:00Z (not run yet), hourly_import/2026-10-27T01:00Z (not run yet), hourly_import/2026-10-27T02:00Z (not run yet) and 21 more") {
		t.Fatalf("stderr: %q", stderr)
	}
	e.want(exitOK, "run", "--job", "balance", "--tz", "UTC", "--after", "previous", "--", "true")

	for _, bad := range [][]string{
		{"--after", "mail"},               // itself
		{"--after", "settle/fortnightly"}, // no such schedule
		{"--after", ""},                   // no job
		{"--after", "settle", "--catch-up", "none"},
	} {
		_, stderr := e.want(exitUsage, mail(bad...)...)
		if !strings.Contains(stderr, "--after") {
			t.Errorf("%q: stderr %q does not name --after", bad, stderr)
		}
	}
}

// TestServeCheckAfter: after: words of crontab lines are checked as the
// Scheduler of idem serve checks them, naming the line: a cycle, after:JOB
// between lines of different schedules, a job after itself, a bad schedule
// word, a line with no command left. A good chain passes.
func TestServeCheckAfter(t *testing.T) {
	e := newEnv(t, "")
	for _, tc := range []struct {
		name, file, want string
	}{
		{"cycle", "daily a after:b true\ndaily b after:a true\n", "crontab:2: idem: Scheduler.Add b: idem: invalid option: the dependencies make a cycle: b waits for a waits for b"},
		{"calendars", "hourly imp true\ndaily rep after:imp true\n", "crontab:2: idem: Scheduler.Add rep: idem: invalid option: After(\"imp\", SamePeriod()): the jobs' schedules differ"},
		{"itself", "daily a after:a true\n", "crontab:1: after:a: \"a\": a job cannot wait for its own periods (use previous)"},
		{"schedule", "daily a after:b/fortnightly true\n", `crontab:1: after:b/fortnightly: "b/fortnightly": "fortnightly" is not hourly, daily, weekly or monthly`},
		{"no command", "daily a after:b\n", "crontab:1: job a has no command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(e.dir, "crontab")
			if err := os.WriteFile(path, []byte(tc.file), 0o644); err != nil {
				t.Fatal(err)
			}
			_, stderr := e.want(exitUsage, "serve", "--check", path)
			if !strings.Contains(stderr, tc.want) {
				t.Errorf("stderr %q, want %q in it", stderr, tc.want)
			}
		})
	}
	path := filepath.Join(e.dir, "good")
	good := "daily+2h settle true\ndaily+2h mail after:settle true\nmonthly+3h report after:settle/daily after:previous true\nhourly imp true\ndaily+1h day after:imp/hourly true\n"
	if err := os.WriteFile(path, []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	e.want(exitOK, "serve", "--check", path)
}

// TestServeAfterRunsInOrder: idem serve with "mail after:settle" on lines
// listed mail first runs each day's mail only after its settlement, at the
// same instant of the fake clock (the settlement's end wakes the mail),
// and never before.
func TestServeAfterRunsInOrder(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out.txt")
	crontab := writeCrontab(t, dir, fmt.Sprintf("daily mail after:settle sh -c 'echo mail:$IDEM_PERIOD >> %[1]s'\ndaily settle sh -c 'sleep 0.2; echo settle:$IDEM_PERIOD >> %[1]s'\n", out))
	clk := schedtest.NewClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	r := startReplica(t, clk, "--ledger", filepath.Join(dir, "ledger.db"), "--crontab", crontab, "--since", "2026-11-28")
	r.idle(clk.Now())
	want := []string{"settle:2026-11-28", "mail:2026-11-28", "settle:2026-11-29", "mail:2026-11-29", "settle:2026-11-30", "mail:2026-11-30"}
	got := readLines(t, out)
	pos := map[string]int{}
	for i, line := range got {
		pos[line] = i + 1
	}
	for _, w := range want {
		if pos[w] == 0 {
			t.Fatalf("ran %q; %s missing", got, w)
		}
	}
	for _, day := range []string{"2026-11-28", "2026-11-29", "2026-11-30"} {
		if pos["mail:"+day] < pos["settle:"+day] {
			t.Fatalf("ran %q: mail of %s before its settlement", got, day)
		}
	}
	r.shutdown()
}

// TestShowAndLsWaiting: with the job's --after, show says what a period
// that is not done waits for (one with no record is shown as waiting, exit
// 0), and ls --job adds the job's next period as waiting; once the
// upstream period is done, neither says so. Without --after they are as
// before; --after without --schedule, or ls --after without --job, is a
// usage error.
func TestShowAndLsWaiting(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "2026-10-28T02:00:00Z")
	deps := []string{"--after", "settle", "--schedule", "daily", "--tz", "UTC"}
	e.want(exitOK, "run", "--job", "other", "--tz", "UTC", "--", "true") // the ledger
	out, _ := e.want(exitOK, append([]string{"show", "mail", "2026-10-27"}, deps...)...)
	if !strings.Contains(out, "status:     waiting (not claimed: no record)") || !strings.Contains(out, "waits for:  settle/2026-10-27 (not run yet)") {
		t.Fatalf("show of a waiting period: %s", out)
	}
	out, _ = e.want(exitOK, append([]string{"show", "mail", "2026-10-27", "--json"}, deps...)...)
	if !strings.Contains(out, `"status": "waiting"`) || !strings.Contains(out, `"waits_for": "settle/2026-10-27 (not run yet)"`) {
		t.Fatalf("show --json of a waiting period: %s", out)
	}
	e.want(exitFailed, "show", "mail", "2026-10-27") // no --after: no record, as before
	out, _ = e.want(exitOK, append([]string{"ls", "--job", "mail"}, deps...)...)
	if !strings.Contains(out, "2026-10-27") || !strings.Contains(out, "waiting") || !strings.Contains(out, "waits for settle/2026-10-27 (not run yet)") {
		t.Fatalf("ls of a job whose next period waits: %s", out)
	}
	out, _ = e.want(exitOK, append([]string{"ls", "--job", "mail", "--json"}, deps...)...)
	if !strings.Contains(out, `"status": "waiting"`) {
		t.Fatalf("ls --json: %s", out)
	}
	e.want(exitOK, "run", "--job", "settle", "--tz", "UTC", "--", "true")
	out, _ = e.want(exitOK, append([]string{"ls", "--job", "mail"}, deps...)...)
	if strings.Contains(out, "waiting") {
		t.Fatalf("ls after settle ran: %s", out)
	}
	e.want(exitFailed, append([]string{"show", "mail", "2026-10-27"}, deps...)...) // no record, nothing to wait for
	e.want(exitOK, "run", "--job", "mail", "--tz", "UTC", "--after", "settle", "--", "true")
	out, _ = e.want(exitOK, append([]string{"show", "mail", "2026-10-27"}, deps...)...)
	if !strings.Contains(out, "done") || strings.Contains(out, "waits for") {
		t.Fatalf("show of a done period: %s", out)
	}
	for _, bad := range [][]string{
		{"show", "mail", "2026-10-27", "--after", "settle"},
		{"ls", "--after", "settle", "--schedule", "daily"},
		{"show", "mail", "2026-10-27", "--after", "mail", "--schedule", "daily"},
	} {
		_, stderr := e.want(exitUsage, bad...)
		if !strings.Contains(stderr, "--after") && !strings.Contains(stderr, "--job") {
			t.Errorf("%q: stderr %q names neither --after nor --job", bad, stderr)
		}
	}
}
