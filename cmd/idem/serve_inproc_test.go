//go:build unix

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/schedtest"
	"github.com/idemgo/idem/internal/testwait"
)

// replica is an idem serve running in this process on a fake clock
// (serveTestHook): a test that starts one must not be parallel.
type replica struct {
	t    *testing.T
	args []string
	s    *idem.Scheduler
	stop func()
	code chan int
	out  *lockedBuffer // its stdout and stderr
	done bool
}

// startReplica runs idem serve args in this process on clk, and returns
// once its Scheduler is built (before it runs).
func startReplica(t *testing.T, clk idem.Clock, args ...string) *replica {
	t.Helper()
	r := &replica{t: t, args: args, code: make(chan int, 1), out: &lockedBuffer{}}
	ready := make(chan struct{})
	serveTestHook = &struct {
		clock   idem.Clock
		started func(s *idem.Scheduler, stop func())
	}{clk, func(s *idem.Scheduler, stop func()) { r.s, r.stop = s, stop; close(ready) }}
	t.Cleanup(func() { serveTestHook = nil })
	go func() { r.code <- execute(append([]string{"serve"}, args...), r.out, r.out) }()
	timer := time.NewTimer(testwait.Limit(t))
	defer timer.Stop()
	select {
	case <-ready:
	case code := <-r.code:
		t.Fatalf("idem serve %s exited %d before serving:\n%s", strings.Join(args, " "), code, r.out)
	case <-timer.C:
		t.Fatalf("idem serve %s: not serving after %v:\n%s\n%s", strings.Join(args, " "), testwait.Limit(t), r.out, testwait.Goroutines())
	}
	t.Cleanup(func() { r.shutdown() })
	return r
}

// shutdown stops r as SIGTERM does and checks that it exits 0.
func (r *replica) shutdown() {
	r.t.Helper()
	if r.done {
		return
	}
	r.done = true
	r.stop()
	code := testwait.Recv(r.t, r.code, "idem serve %s to exit after SIGTERM; its output:\n%s", strings.Join(r.args, " "), r.out)
	if code != 0 {
		r.t.Errorf("idem serve %s: exit %d after SIGTERM, want 0; its output:\n%s", strings.Join(r.args, " "), code, r.out)
	}
}

// idle waits until r has done what is due at now.
func (r *replica) idle(now time.Time) {
	r.t.Helper()
	schedtest.Idle(r.t, r.s, now)
}

// readLines returns the lines of the file path (none if it does not exist).
func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(strings.ReplaceAll(string(b), " ", "_"))
}

func writeCrontab(t *testing.T, dir, text string) string {
	t.Helper()
	path := filepath.Join(dir, "crontab")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestServeFirstDeployWaitsForNextSlot: a line whose job has never run
// starts, by default (--since next), with its first slot after idem serve
// started: "20 4 * * *" deployed at 04:18 Shanghai time runs nothing at
// once (it used to run the slot of the day before, 2026-11-29T20:20Z, a day
// that a script reading IDEM_PERIOD's date settles two days back), and
// runs the slot of 04:20 at 04:20.
func TestServeFirstDeployWaitsForNextSlot(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out.txt")
	crontab := writeCrontab(t, dir, fmt.Sprintf("CRON_TZ=Asia/Shanghai\n20 4 * * * settle sh -c 'echo $IDEM_PERIOD >> %s'\n", out))
	sh := schedtest.Location(t, "Asia/Shanghai")
	clk := schedtest.NewClock(time.Date(2026, 12, 1, 4, 18, 0, 0, sh))
	r := startReplica(t, clk, "--ledger", filepath.Join(dir, "ledger.db"), "--crontab", crontab)
	r.idle(clk.Now())
	if got := readLines(t, out); len(got) != 0 {
		t.Fatalf("deployed at 04:18, idem serve ran %q at once; want nothing before the 04:20 slot", got)
	}
	clk.Advance(2 * time.Minute)
	r.idle(clk.Now())
	if got, want := readLines(t, out), []string{"2026-11-30T20:20Z"}; !slices.Equal(got, want) {
		t.Fatalf("at 04:20 idem serve ran %q, want %q (the slot of 04:20 on 1 December)", got, want)
	}
	r.shutdown()
}

// TestServeSinceChoosesFirstPeriod: --since latest starts a new job with
// its latest slot at once (as idem run does); --since DATE with every slot
// from DATE on; a job that has run goes on from where it is whatever
// --since says.
func TestServeSinceChoosesFirstPeriod(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out.txt")
	crontab := writeCrontab(t, dir, fmt.Sprintf("0 2 * * * latest sh -c 'echo latest:$IDEM_PERIOD >> %[1]s'\n0 2 * * * dated sh -c 'echo dated:$IDEM_PERIOD >> %[1]s'\n", out))
	ledger := filepath.Join(dir, "ledger.db")
	clk := schedtest.NewClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	// The job "latest" first, with --since latest.
	if err := os.WriteFile(crontab+".latest", []byte(fmt.Sprintf("0 2 * * * latest sh -c 'echo latest:$IDEM_PERIOD >> %s'\n", out)), 0o644); err != nil {
		t.Fatal(err)
	}
	r := startReplica(t, clk, "--ledger", ledger, "--crontab", crontab+".latest", "--since", "latest")
	r.idle(clk.Now())
	r.shutdown()
	if got, want := readLines(t, out), []string{"latest:2026-12-01T02:00Z"}; !slices.Equal(got, want) {
		t.Fatalf("--since latest at 10:00 ran %q, want %q", got, want)
	}
	// Both jobs, with --since 2026-11-29: only the new job starts there,
	// with the period that contains it (as with idem run --since): the
	// slot of 28 November, 02:00, runs until 29 November, 02:00.
	r = startReplica(t, clk, "--ledger", ledger, "--crontab", crontab, "--since", "2026-11-29")
	r.idle(clk.Now())
	r.shutdown()
	want := []string{"latest:2026-12-01T02:00Z", "dated:2026-11-28T02:00Z", "dated:2026-11-29T02:00Z", "dated:2026-11-30T02:00Z", "dated:2026-12-01T02:00Z"}
	if got := readLines(t, out); !slices.Equal(got, want) {
		t.Fatalf("--since 2026-11-29 ran %q, want %q", got, want)
	}
}

// TestServeBusinessLineSamePeriodAsRun: a line "daily+2h JOB COMMAND" runs
// the business days of CRON_TZ, each 2 hours after it ends, with the
// IDEM_PERIOD (and start, end) that 'idem run --schedule daily --tz' gives
// the command at that time: 2026-11-30, not the UTC slot.
func TestServeBusinessLineSamePeriodAsRun(t *testing.T) {
	e := newEnv(t, "2026-11-30T18:00:30Z") // 02:00:30 on 1 December in Shanghai
	serveOut, runOut := filepath.Join(e.dir, "serve.txt"), filepath.Join(e.dir, "run.txt")
	script := `echo "$IDEM_PERIOD $IDEM_PERIOD_START $IDEM_PERIOD_END" >> %s`
	crontab := writeCrontab(t, e.dir, fmt.Sprintf("CRON_TZ=Asia/Shanghai\ndaily+2h settle sh -c '%s'\nweekly+2h report sh -c 'echo week:$IDEM_PERIOD >> %s'\n", fmt.Sprintf(script, serveOut), serveOut))

	e.want(exitOK, "run", "--job", "settle", "--schedule", "daily", "--tz", "Asia/Shanghai", "--", "sh", "-c", fmt.Sprintf(script, runOut))
	wantRun := readLines(t, runOut)
	if len(wantRun) != 1 || !strings.HasPrefix(wantRun[0], "2026-11-30_") {
		t.Fatalf("idem run --schedule daily gave %q, want the period 2026-11-30", wantRun)
	}

	sh := schedtest.Location(t, "Asia/Shanghai")
	clk := schedtest.NewClock(time.Date(2026, 12, 1, 1, 0, 0, 0, sh))
	r := startReplica(t, clk, "--ledger", filepath.Join(e.dir, "serve.db"), "--crontab", crontab)
	r.idle(clk.Now())
	if got := readLines(t, serveOut); len(got) != 0 {
		t.Fatalf("at 01:00, before 2026-11-30 is due (02:00), idem serve ran %q", got)
	}
	clk.Advance(time.Hour + 30*time.Second)
	r.idle(clk.Now())
	if got := readLines(t, serveOut); !slices.Equal(got, wantRun) {
		t.Fatalf("at 02:00:30 the daily line ran %q, want what idem run gives: %q", got, wantRun)
	}
	// The week 2026-W49 (from Monday 30 November) is due on Monday 7
	// December at 02:00; by then the days up to 6 December are due too.
	clk.Advance(6 * 24 * time.Hour)
	r.idle(clk.Now())
	got := readLines(t, serveOut)
	if !slices.Contains(got, "week:2026-W49") || slices.Contains(got, "week:2026-W48") {
		t.Errorf("the weekly line ran %q; want week:2026-W49 (and not 2026-W48, due before idem serve started)", got)
	}
	var days []string
	for _, l := range got {
		if d, _, ok := strings.Cut(l, "_"); ok {
			days = append(days, d)
		}
	}
	if want := []string{"2026-11-30", "2026-12-01", "2026-12-02", "2026-12-03", "2026-12-04", "2026-12-05", "2026-12-06"}; !slices.Equal(days, want) {
		t.Errorf("after six more days the daily line ran %q, want %q", days, want)
	}
	r.shutdown()
}

// TestServeReplicasEachSlotOnce: three idem serve replicas on one ledger,
// on a fake clock moved minute by minute and then over an outage of all
// three: each minute's slot runs once, none is missing. (It replaces a
// test that watched three processes for three minutes of real time; the
// contention of separate processes is TestServeBusyOnOtherReplicaIsNotAFault's.)
func TestServeReplicasEachSlotOnce(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "ticks")
	crontab := writeCrontab(t, dir, fmt.Sprintf("* * * * * tick sh -c 'echo $IDEM_PERIOD >> %s'\n", out))
	ledger := filepath.Join(dir, "ledger.db")
	clk := schedtest.NewClock(time.Date(2026, 10, 28, 2, 0, 30, 0, time.UTC))
	var rs []*replica
	for range 3 {
		rs = append(rs, startReplica(t, clk, "--ledger", ledger, "--crontab", crontab, "--since", "latest"))
	}
	idle := func() {
		for _, r := range rs {
			r.idle(clk.Now())
		}
	}
	idle()
	for range 5 {
		clk.Advance(time.Minute)
		idle()
	}
	// All three down for ten minutes (their clocks jump; their timers do
	// not move): the missed slots run when they look again.
	clk.Jump(10 * time.Minute)
	clk.Advance(idem.SchedulerRecheck)
	idle()
	for _, r := range rs {
		r.shutdown()
	}
	ticks := readLines(t, out)
	want := []string{}
	for m := time.Date(2026, 10, 28, 2, 0, 0, 0, time.UTC); !m.After(clk.Now()); m = m.Add(time.Minute) {
		want = append(want, m.Format("2006-01-02T15:04Z"))
	}
	if !slices.Equal(ticks, want) {
		t.Fatalf("ticks %q, want each minute from 02:00 to %s once: %q", ticks, clk.Now().Format("15:04"), want)
	}
}
