package idem_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/testwait"
)

// rerunDepsWorld is October of a daily settle, a daily mail after
// settle's same day and a monthly report after settle's days, caught up
// in this process on a ledger; ran records each fn's (period, revision).
type rerunDepsWorld struct {
	l    *idem.Ledger
	clk  *idemtest.Clock
	ran  map[string][]string // job: "period@revision", in order
	jobs []idem.JobDeps
}

func newRerunDepsWorld(t *testing.T) *rerunDepsWorld {
	w := &rerunDepsWorld{l: openLedger(t, t.TempDir()), clk: idemtest.NewClock(time.Date(2026, 11, 1, 2, 0, 0, 0, time.UTC)), ran: map[string][]string{}}
	daily, monthly := idem.Daily(time.UTC), idem.Monthly(time.UTC)
	w.jobs = []idem.JobDeps{
		{Job: "settle", Schedule: daily},
		{Job: "mail", Schedule: daily, Options: []idem.Option{idem.After("settle", idem.SamePeriod())}},
		{Job: "report", Schedule: monthly, Options: []idem.Option{idem.After("settle", idem.Within(daily))}},
	}
	return w
}

// catchUp catches job up and returns what fn ran for and which periods waited.
func (w *rerunDepsWorld) catchUp(t *testing.T, job string) (ran, waiting []string) {
	t.Helper()
	for _, j := range w.jobs {
		if j.Job != job {
			continue
		}
		fn := func(ctx context.Context, p idem.Period) error {
			info, _ := idem.InfoFrom(ctx)
			w.ran[job] = append(w.ran[job], fmt.Sprintf("%s@%d", p.Name, info.Revision))
			ran = append(ran, p.Name)
			return nil
		}
		opts := append([]idem.Option{idem.WithClock(w.clk), idem.Since(time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)), idem.CatchUpAll(0)}, j.Options...)
		res, err := idem.CatchUp(context.Background(), w.l, job, j.Schedule, fn, opts...)
		if err != nil {
			t.Fatalf("catch-up of %s: %v", job, err)
		}
		for _, pr := range res.Periods {
			if pr.Outcome == idem.Waiting {
				waiting = append(waiting, pr.Period.Name)
			}
		}
	}
	return ran, waiting
}

// TestRerunWithDependents: a re-run of two days of settle with its
// dependents re-runs the mail of those days and the month's report, in
// one request; their re-runs wait (outcome Waiting, no error, fn not
// called) until settle's new revisions are done, then run once each.
// Sent again, the request re-runs nothing; a catch-up with no request
// runs nothing.
func TestRerunWithDependents(t *testing.T) {
	ctx := context.Background()
	w := newRerunDepsWorld(t)
	for _, job := range []string{"settle", "mail", "report"} {
		w.catchUp(t, job)
	}
	req := rerunReq("oct-fix", "flow table corrected", idem.Key{Job: "settle", Period: "2026-10-03"}, idem.Key{Job: "settle", Period: "2026-10-04"})
	out, err := idem.RerunWithDependents(ctx, w.l, req, w.jobs...)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range out {
		got = append(got, fmt.Sprintf("%s %s", o.Key, o.State))
	}
	want := []string{"settle/2026-10-03 queued", "settle/2026-10-04 queued", "mail/2026-10-03 queued", "report/2026-10 queued", "mail/2026-10-04 queued"}
	if !slices.Equal(got, want) {
		t.Fatalf("the request's periods: %q, want %q", got, want)
	}
	// Downstream first: their re-runs wait for settle's.
	for _, job := range []string{"mail", "report"} {
		if ran, waiting := w.catchUp(t, job); len(ran) > 0 || len(waiting) == 0 {
			t.Fatalf("%s before settle's re-runs: ran %v, waiting %v; want nothing run, its re-runs waiting", job, ran, waiting)
		}
	}
	w.catchUp(t, "settle")
	if ran, _ := w.catchUp(t, "report"); !slices.Equal(ran, []string{"2026-10"}) {
		t.Fatalf("report after settle's re-runs ran %v", ran)
	}
	if ran, _ := w.catchUp(t, "mail"); !slices.Equal(ran, []string{"2026-10-03", "2026-10-04"}) {
		t.Fatalf("mail after settle's re-runs ran %v", ran)
	}
	// The same request again, and catch-ups with no request: nothing.
	if out, err := idem.RerunWithDependents(ctx, w.l, req, w.jobs...); err != nil || len(out) != 5 || out[0].State != idem.RerunSeen || out[4].State != idem.RerunSeen {
		t.Fatalf("sent again: %v %+v, want every period seen before", err, out)
	}
	for _, job := range []string{"settle", "mail", "report"} {
		if ran, waiting := w.catchUp(t, job); len(ran)+len(waiting) > 0 {
			t.Errorf("%s with no request: ran %v, waiting %v", job, ran, waiting)
		}
	}
	if n := len(w.ran["settle"]) + len(w.ran["mail"]); n != 31+31+4 || len(w.ran["report"]) != 2 {
		t.Errorf("fn ran %v", w.ran)
	}
}

// TestRerunWithDependentsSentAgainAfterTheirRun: a dependent period
// that had no record when the request was first sent (the report, not
// run yet) runs after the re-run upstream; the request sent again then
// names it, and re-runs nothing: the store answers seen for every key.
func TestRerunWithDependentsSentAgainAfterTheirRun(t *testing.T) {
	ctx := context.Background()
	w := newRerunDepsWorld(t)
	w.catchUp(t, "settle")
	req := rerunReq("oct-fix", "flow table corrected", idem.Key{Job: "settle", Period: "2026-10-03"})
	if out, err := idem.RerunWithDependents(ctx, w.l, req, w.jobs...); err != nil || len(out) != 1 {
		t.Fatalf("first sending: %v %+v, want settle's period alone (no dependent has run)", err, out)
	}
	if ran, waiting := w.catchUp(t, "report"); len(ran) > 0 || !slices.Equal(waiting, []string{"2026-10"}) {
		t.Fatalf("report before settle's re-run: ran %v, waiting %v", ran, waiting)
	}
	w.catchUp(t, "settle")
	if ran, _ := w.catchUp(t, "report"); !slices.Equal(ran, []string{"2026-10"}) {
		t.Fatalf("report ran %v", ran)
	}
	out, err := idem.RerunWithDependents(ctx, w.l, req, w.jobs...)
	if err != nil || len(out) != 2 || out[1].Key.Job != "report" || out[1].State != idem.RerunSeen || out[1].Revision != 0 {
		t.Fatalf("sent again: %v %+v, want report's period named and seen (revision 0)", err, out)
	}
	if ran, _ := w.catchUp(t, "report"); len(ran) > 0 {
		t.Fatalf("the request sent again re-ran the report: %v", ran)
	}
}

// TestRerunWithDependentsRefused: a dependent period that cannot be
// re-run (parked) refuses the whole request, naming it, and nothing
// changes; bad declarations are refused before anything is read.
func TestRerunWithDependentsRefused(t *testing.T) {
	ctx := context.Background()
	w := newRerunDepsWorld(t)
	w.catchUp(t, "settle")
	mail := idem.Key{Job: "mail", Period: "2026-10-03"}
	if err := w.l.Run(ctx, mail, func(context.Context) error { return idem.Permanent(errors.New("no such address")) }); err == nil {
		t.Fatal("the mail's run did not fail")
	}
	settle := idem.Key{Job: "settle", Period: "2026-10-03"}
	_, err := idem.RerunWithDependents(ctx, w.l, rerunReq("r", "fix", settle), w.jobs...)
	if !errors.Is(err, idem.ErrNotRerunnable) || !strings.Contains(err.Error(), "mail/2026-10-03") {
		t.Errorf("a parked dependent: %v, want ErrNotRerunnable naming mail/2026-10-03", err)
	}
	if rec, _, _ := w.l.Lookup(ctx, settle); rec.Status != idem.StatusDone || rec.Revision != 0 {
		t.Errorf("after the refused request: settle's period %s revision %d, want done at 0", rec.Status, rec.Revision)
	}
	for _, bad := range [][]idem.JobDeps{
		{{Job: "mail", Schedule: idem.Daily(time.UTC), Options: []idem.Option{idem.After("mail", idem.SamePeriod())}}},
		{{Job: "mail"}},
		{{Job: "mail", Schedule: idem.Daily(time.UTC)}, {Job: "mail", Schedule: idem.Daily(time.UTC)}},
	} {
		if _, err := idem.RerunWithDependents(ctx, w.l, rerunReq("r", "fix", settle), bad...); !errors.Is(err, idem.ErrInvalidOption) {
			t.Errorf("%+v: %v, want ErrInvalidOption", bad, err)
		}
	}
}

// TestSchedulerRerunWithDependents: a Scheduler's RerunWithDependents
// takes its jobs' dependencies, and its jobs run the re-runs in order:
// the mail of the day after the day's new settlement.
func TestSchedulerRerunWithDependents(t *testing.T) {
	ctx := context.Background()
	w := newRerunDepsWorld(t)
	s := idem.NewScheduler(w.l, idem.WithClock(w.clk))
	daily := idem.Daily(time.UTC)
	settled := map[string]int64{}
	var violations []string
	done := make(chan string, 100)
	s.Add("settle", daily, func(ctx context.Context, p idem.Period) error {
		info, _ := idem.InfoFrom(ctx)
		time.Sleep(20 * time.Millisecond) // the mail must not start meanwhile
		settled[p.Name] = info.Revision
		done <- "settle " + p.Name
		return nil
	}, idem.Since(time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)))
	s.Add("mail", daily, func(ctx context.Context, p idem.Period) error {
		info, _ := idem.InfoFrom(ctx)
		rec, _, _ := w.l.Lookup(ctx, idem.Key{Job: "settle", Period: p.Name})
		if rec.Status != idem.StatusDone || rec.Revision != info.Revision {
			violations = append(violations, fmt.Sprintf("mail %s@%d ran with settle %s@%d", p.Name, info.Revision, rec.Status, rec.Revision))
		}
		done <- fmt.Sprintf("mail %s@%d", p.Name, info.Revision)
		return nil
	}, idem.Since(time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)), idem.After("settle", idem.SamePeriod()))
	runCtx, cancel := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- s.Run(runCtx) }()
	stop := sync.OnceFunc(func() { cancel(); <-stopped })
	defer stop()
	mailed := 0
	testwait.Until(t, func() bool {
		for {
			select {
			case m := <-done:
				if m[:4] == "mail" {
					mailed++
				}
			default:
				return mailed == 31
			}
		}
	}, "the scheduler to mail October's 31 days")
	out, err := s.RerunWithDependents(ctx, rerunReq("fix", "flow table corrected", idem.Key{Job: "settle", Period: "2026-10-03"}))
	if err != nil || len(out) != 2 || out[1].Key != (idem.Key{Job: "mail", Period: "2026-10-03"}) {
		t.Fatalf("%v %+v", err, out)
	}
	testwait.Until(t, func() bool {
		for {
			select {
			case m := <-done:
				if m == "mail 2026-10-03@1" {
					return true
				}
			default:
				return false
			}
		}
	}, "the scheduler to re-run mail 2026-10-03 (revision 1)")
	stop()
	if len(violations) > 0 {
		t.Errorf("%v", violations)
	}
}

// TestRerunWithDependentsChain: dependents are found through other jobs
// and through AfterPrevious: a re-run of settle's 29 October re-runs the
// balance (after settle's day and its own previous day) of the 29th and
// of every later day, and the digest (after the balance's day) of those
// days; a record of the balance's job that is no period of its schedule
// is none of them. The balance's re-runs run in order: that of the 30th
// waits for that of the 29th, which waits for settle's.
func TestRerunWithDependentsChain(t *testing.T) {
	ctx := context.Background()
	w := newRerunDepsWorld(t)
	daily := idem.Daily(time.UTC)
	w.jobs = []idem.JobDeps{
		{Job: "settle", Schedule: daily},
		{Job: "balance", Schedule: daily, Options: []idem.Option{idem.After("settle", idem.SamePeriod()), idem.AfterPrevious()}},
		{Job: "digest", Schedule: daily, Options: []idem.Option{idem.After("balance", idem.SamePeriod())}},
	}
	for _, job := range []string{"settle", "balance", "digest"} {
		w.catchUp(t, job)
	}
	if err := w.l.Run(ctx, idem.Key{Job: "balance", Period: "adhoc"}, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	decl := slices.Clone(w.jobs) // a Scheduler's options too: ignored
	decl[2].Options = append(slices.Clone(decl[2].Options), idem.RunOverlapping(), idem.WithMaxRunning(2), nil)
	out, err := idem.RerunWithDependents(ctx, w.l, rerunReq("fix", "repair", idem.Key{Job: "settle", Period: "2026-10-29"}), decl...)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range out {
		got = append(got, o.Key.String())
	}
	slices.Sort(got)
	want := []string{"balance/2026-10-29", "balance/2026-10-30", "balance/2026-10-31", "digest/2026-10-29", "digest/2026-10-30", "digest/2026-10-31", "settle/2026-10-29"}
	if !slices.Equal(got, want) {
		t.Fatalf("the request's periods: %v, want %v", got, want)
	}
	if ran, waiting := w.catchUp(t, "balance"); len(ran) > 0 || len(waiting) != 3 {
		t.Fatalf("balance before settle's re-run: ran %v, waiting %v; want its three re-runs waiting", ran, waiting)
	}
	if ran, waiting := w.catchUp(t, "digest"); len(ran) > 0 || len(waiting) != 3 {
		t.Fatalf("digest before balance's re-runs: ran %v, waiting %v", ran, waiting)
	}
	w.catchUp(t, "settle")
	if ran, _ := w.catchUp(t, "balance"); !slices.Equal(ran, []string{"2026-10-29", "2026-10-30", "2026-10-31"}) {
		t.Fatalf("balance after settle's re-run ran %v", ran)
	}
	if ran, _ := w.catchUp(t, "digest"); !slices.Equal(ran, []string{"2026-10-29", "2026-10-30", "2026-10-31"}) {
		t.Fatalf("digest ran %v", ran)
	}
}
