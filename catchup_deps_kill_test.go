package idem_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/effectlog"
)

// depKillStart is the instant the dependency kill test's clocks start at:
// March's 31 days and the month are due.
var depKillStart = time.Date(2026, 4, 1, 2, 0, 0, 0, time.UTC)

// offsetClock is the system clock moved to depKillStart at the test's
// start: leases and backoffs run in real time, in every process alike.
type offsetClock struct{ offset time.Duration }

func (c offsetClock) Now() time.Time                         { return time.Now().Add(c.offset) }
func (c offsetClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// depKillJob is one runner of the dependency kill test, in a child
// process: it catches up job until every period of it is done, on the
// ledger in dir. Each fn first checks, in the store, that every period it
// waits for is done — a "violation" line in the log if not — then logs
// "job period" after a moment's work.
func depKillJob(dir, job string, offset time.Duration) error {
	ctx := context.Background()
	clk := offsetClock{offset}
	l, err := idem.OpenLedger(filepath.Join(dir, "ledger.db"), idem.WithClock(clk))
	if err != nil {
		return err
	}
	defer l.Close()
	log, err := os.OpenFile(filepath.Join(dir, "log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	daily, monthly := idem.Daily(time.UTC), idem.Monthly(time.UTC)
	sched, deps := daily, []idem.Mapping(nil)
	upstream := "settle"
	switch job {
	case "mail":
		deps = []idem.Mapping{idem.SamePeriod()}
	case "report":
		sched, deps = monthly, []idem.Mapping{idem.Within(daily)}
	}
	fn := func(ctx context.Context, p idem.Period) error {
		if len(deps) > 0 {
			for _, name := range upstreamOf(p, sched) {
				rec, ok, err := l.Lookup(ctx, idem.Key{Job: upstream, Period: name})
				if err != nil {
					return err
				}
				if !ok || rec.Status != idem.StatusDone {
					if err := effectlog.Append(log, fmt.Sprintf("violation %s %s started before %s/%s was done (%v)", job, p.Name, upstream, name, rec.Status)); err != nil {
						return err
					}
				}
			}
		}
		time.Sleep(time.Duration(30+rand.IntN(40)) * time.Millisecond)
		// One record, one write (O_APPEND): a write a SIGKILL cuts short
		// is no record (effectlog).
		return effectlog.Append(log, job+" "+p.Name)
	}
	opts := []idem.Option{idem.Since(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)), idem.CatchUpAll(0),
		idem.WithLease(200 * time.Millisecond), idem.WithBackoff(idem.Constant(time.Millisecond)), idem.WaitForTurn()}
	for _, m := range deps {
		opts = append(opts, idem.After(upstream, m))
	}
	for {
		res, err := idem.CatchUp(ctx, l, job, sched, fn, opts...)
		if err != nil {
			return err
		}
		if n := len(res.Periods); n == 0 || res.Periods[n-1].Outcome != idem.Waiting {
			return nil
		}
		time.Sleep(5 * time.Millisecond) // its upstream runs in another process
	}
}

// upstreamOf is what p of a job of schedule sched waits for, computed as
// the documentation of SamePeriod and Within says (not by the mapping
// under test): the same day, or every day of the month.
func upstreamOf(p idem.Period, sched idem.Schedule) []string {
	if sched == idem.Monthly(time.UTC) {
		var names []string
		for d := p.Start; d.Before(p.End); d = d.AddDate(0, 0, 1) {
			names = append(names, d.Format("2006-01-02"))
		}
		return names
	}
	return []string{p.Name}
}

// TestAfterRandomKills: three runners in processes of their own — settle
// (daily), mail (daily, after settle's same day) and report (monthly,
// after every day of settle's month) — are started together in random
// subsets and SIGKILLed at random moments, 15 times; then all three run
// to the end. No mail or report period ever started before every period
// it waits for was done (each fn checks the store first), and in the end
// every period of each job is done.
func TestAfterRandomKills(t *testing.T) {
	if idemtest.IsChild(t) {
		idemtest.Start(t, "", func(arg string) { // does not return
			parts := strings.SplitN(arg, "|", 3)
			offset, _ := time.ParseDuration(parts[2])
			if err := depKillJob(parts[0], parts[1], offset); err != nil {
				fmt.Println(err)
				os.Exit(3)
			}
		})
	}
	if testing.Short() {
		t.Skip("15 rounds of kills of three processes")
	}
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	dir := t.TempDir()
	offset := time.Until(depKillStart) // the children's clocks start at depKillStart
	arg := func(job string) string { return dir + "|" + job + "|" + offset.String() }
	jobs := []string{"settle", "mail", "report"}
	for round := range 15 {
		var children []*idemtest.Child
		for _, job := range jobs {
			if rng.IntN(3) > 0 {
				children = append(children, idemtest.Start(t, arg(job), nil))
			}
		}
		time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
		for _, c := range children {
			c.Kill()
		}
		for _, c := range children {
			if e := c.Wait(); !e.Killed && e.Code != 0 {
				t.Fatalf("round %d: a runner ended with %+v", round, e)
			}
		}
	}
	l := openLedger(t, dir)
	ctx := context.Background()
	if recs, err := l.List(ctx, idem.Filter{Job: "settle", Status: idem.StatusDone}); err == nil {
		t.Logf("after the kills: %d of 31 settle periods done", len(recs))
	}
	var last []*idemtest.Child
	for _, job := range jobs {
		last = append(last, idemtest.Start(t, arg(job), nil))
	}
	for i, c := range last {
		if e := c.Wait(); e.Code != 0 || e.Killed {
			t.Fatalf("the last run of %s: %+v", jobs[i], e)
		}
	}
	lines, err := effectlog.Lines(filepath.Join(dir, "log"))
	if err != nil {
		t.Fatal(err)
	}
	ran := map[string]int{}
	for _, line := range lines {
		if strings.HasPrefix(line, "violation") {
			t.Errorf("%s", line)
		}
		job, _, _ := strings.Cut(line, " ")
		ran[job]++
	}
	for _, c := range []struct {
		job     string
		periods int
	}{{"settle", 31}, {"mail", 31}, {"report", 1}} {
		recs, err := l.List(ctx, idem.Filter{Job: c.job})
		if err != nil {
			t.Fatal(err)
		}
		done := 0
		for _, r := range recs {
			if r.Status == idem.StatusDone {
				done++
			}
		}
		if done != c.periods || ran[c.job] < c.periods {
			t.Errorf("%s: %d of %d periods done, fn ran %d times", c.job, done, c.periods, ran[c.job])
		}
	}
	t.Logf("fn ran: %v (a kill between fn and its done mark runs a period again: at least once)", ran)
}
