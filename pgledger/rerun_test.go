package pgledger_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/testwait"
	"github.com/idemgo/idem/pgledger"
	"github.com/jackc/pgx/v5"
)

func rerunReq(id string, keys ...idem.Key) idem.RerunRequest {
	return idem.RerunRequest{Keys: keys, RequestID: id, Reason: "flow table corrected", By: "ops"}
}

// rerunLedger is what these tests need of a Ledger or a DBLedger.
type rerunLedger interface {
	idemstore.Store
	idemstore.Rerunner
	Schema() string
}

// claim takes key for a new attempt on l and returns the attempt.
func claim(t *testing.T, l idemstore.Store, key idem.Key) int64 {
	t.Helper()
	c, err := l.Claim(context.Background(), idemstore.ClaimRequest{Key: key, Owner: "test", Now: time.Now(), Lease: time.Minute})
	if err != nil || c.State != idemstore.ClaimAcquired {
		t.Fatalf("Claim(%s) = %+v, %v; want acquired", key, c, err)
	}
	return c.Attempt
}

// wantPromoted checks that key, whose attempt (of revision 0) ended done
// while req waited for it, has revision 1, runnable, with the request's
// note, and that the history holds that attempt as done under revision 0
// and nothing else.
func wantPromoted(t *testing.T, pool interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, l rerunLedger, key idem.Key, attempt int64, req idem.RerunRequest) {
	t.Helper()
	rec, ok, err := l.Lookup(context.Background(), key)
	if err != nil || !ok || rec.Status != idem.StatusFailed || rec.Revision != 1 || rec.Failures != 0 || !rec.NotBefore.IsZero() ||
		rec.LastError != idemstore.RerunNote(req, 1) {
		t.Errorf("after the done mark: %+v (%v); want failed (runnable at once), revision 1, no failure, last error %q",
			rec, err, idemstore.RerunNote(req, 1))
	}
	var n int
	var got string
	if err := pool.QueryRow(context.Background(), `SELECT count(*), coalesce(string_agg(revision || '/' || attempt || '/' || outcome, ' '), '')
		FROM `+table(l, "attempts")+` WHERE job = $1 AND period = $2`, key.Job, key.Period).Scan(&n, &got); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("0/%d/done", attempt); n != 1 || got != want {
		t.Errorf("history of %s: %q, want only %q (the attempt's done mark; the promotion ends no attempt)", key, got, want)
	}
	var state string
	if err := pool.QueryRow(context.Background(), `SELECT string_agg(state, ' ') FROM `+table(l, "reruns")+` WHERE job = $1 AND period = $2`,
		key.Job, key.Period).Scan(&state); err != nil || state != "queued" {
		t.Errorf("the request's state: %q (%v), want queued", state, err)
	}
}

// TestRerunEveryDoneMark: a request that came while an attempt held the
// period gives it the new revision in the transaction of the attempt's done
// mark, whichever statement writes it: Finish, Finish with the cursor,
// FinishTx on a pool and on a *sql.DB, and a done mark written by hand as
// an older pgledger writes it (the promotion is the schema's trigger).
func TestRerunEveryDoneMark(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t)
	l := openLedger(t, pool)
	d, err := pgledger.NewDB(ctx, openDB(t, "pgx"), pgledger.WithSchema(l.Schema()))
	if err != nil {
		t.Fatal(err)
	}
	paths := []struct {
		name string
		s    rerunLedger
		done func(key idem.Key, attempt int64) error
	}{
		{"Finish", l, func(key idem.Key, attempt int64) error {
			return l.Finish(ctx, key, attempt, idemstore.End{Status: idemstore.StatusDone, Now: time.Now()})
		}},
		{"FinishCursor", l, func(key idem.Key, attempt int64) error {
			return l.Finish(ctx, key, attempt, idemstore.End{Status: idemstore.StatusDone, Now: time.Now(), Cursor: true})
		}},
		{"FinishTx", l, func(key idem.Key, attempt int64) error {
			return l.FinishTx(ctx, key, attempt, time.Now(), true, func(tx pgx.Tx) ([]byte, error) { return []byte("v"), nil })
		}},
		{"DBFinish", d, func(key idem.Key, attempt int64) error {
			return d.Finish(ctx, key, attempt, idemstore.End{Status: idemstore.StatusDone, Now: time.Now()})
		}},
		{"DBFinishTx", d, func(key idem.Key, attempt int64) error {
			return d.FinishTx(ctx, key, attempt, time.Now(), false, func(*sql.Tx) ([]byte, error) { return nil, nil })
		}},
		{"OlderRelease", l, func(key idem.Key, attempt int64) error {
			_, err := pool.Exec(ctx, `UPDATE `+table(l, "runs")+` SET status = 'done', lease_until = NULL, updated = clock_timestamp()
				WHERE job = $1 AND period = $2 AND attempt = $3 AND status = 'running'`, key.Job, key.Period, attempt)
			return err
		}},
	}
	for _, p := range paths {
		key := idem.Key{Job: "every", Period: p.name}
		attempt := claim(t, p.s, key)
		req := rerunReq("during-"+p.name, key)
		if out, err := p.s.Rerun(ctx, req); err != nil || out[0].State != idem.RerunAfterRun || out[0].Revision != 1 {
			t.Fatalf("%s: Rerun while running = %+v, %v; want after the run, revision 1", p.name, out, err)
		}
		if rec, _, _ := p.s.Lookup(ctx, key); rec.Status != idem.StatusRunning || rec.Revision != 0 {
			t.Errorf("%s: while the attempt runs: %+v, want running, revision 0", p.name, rec)
		}
		if err := p.done(key, attempt); err != nil {
			t.Fatalf("%s: done mark: %v", p.name, err)
		}
		wantPromoted(t, pool, p.s, key, attempt, req)
	}
}

// TestRerunHistory: after a re-run of a done period, and of a period that
// was running when the request came, the history of attempts holds the
// first run's done attempt under revision 0 and the re-run's under
// revision 1, and nothing else; Info and the record say revision 1.
func TestRerunHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t)
	l := openLedger(t, pool)
	const job = "rerun-hist"
	var revs []int64
	fn := func(ctx context.Context) error {
		info, _ := idem.InfoFrom(ctx)
		revs = append(revs, info.Revision)
		return nil
	}
	done := idem.Key{Job: job, Period: "2026-10-01"}
	if err := l.Run(ctx, done, fn); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Rerun(ctx, rerunReq("a", done)); err != nil {
		t.Fatal(err)
	}
	if err := l.Run(ctx, done, fn); err != nil {
		t.Fatal(err)
	}

	running := idem.Key{Job: job, Period: "2026-10-02"}
	started, release := make(chan struct{}), make(chan struct{})
	errCh := make(chan error, 1)
	go func() {
		errCh <- l.RunTx(ctx, running, func(ctx context.Context, tx pgx.Tx) error {
			close(started)
			<-release
			return nil
		})
	}()
	testwait.Recv(t, started, "the RunTx's fn to start")
	// The RunTx's fence holds the row lock while fn runs: the request
	// waits for the commit, then finds the period done.
	outCh := make(chan error, 1)
	go func() {
		out, err := l.Rerun(ctx, rerunReq("b", running))
		if err == nil && (out[0].State != idem.RerunQueued || out[0].Revision != 1) {
			err = fmt.Errorf("Rerun = %+v, want queued as revision 1", out)
		}
		outCh <- err
	}()
	close(release)
	if err := testwait.Recv(t, errCh, "the RunTx to end"); err != nil {
		t.Fatal(err)
	}
	if err := testwait.Recv(t, outCh, "the Rerun to end"); err != nil {
		t.Fatal(err)
	}
	if err := l.RunTx(ctx, running, func(ctx context.Context, tx pgx.Tx) error { return fn(ctx) }); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(revs) != "[0 1 1]" {
		t.Errorf("fn saw revisions %v, want [0 1 1]", revs)
	}
	got := attemptRows(t, pool, l, job)
	var lines []string
	for _, r := range got {
		lines = append(lines, fmt.Sprintf("%s %d/%d/%s", r.period, r.revision, r.attempt, r.outcome))
	}
	want := []string{"2026-10-01 0/1/done", "2026-10-01 1/2/done", "2026-10-02 0/1/done", "2026-10-02 1/2/done"}
	if strings.Join(lines, ", ") != strings.Join(want, ", ") {
		t.Errorf("history %q, want %q", lines, want)
	}
	for _, k := range []idem.Key{done, running} {
		if rec, _, err := l.Lookup(ctx, k); err != nil || rec.Status != idem.StatusDone || rec.Revision != 1 || rec.Attempt != 2 {
			t.Errorf("%s: %+v (%v), want done, revision 1, attempt 2", k, rec, err)
		}
	}
	recs, err := l.List(ctx, idemstore.Filter{Job: job})
	if err != nil || len(recs) != 2 || recs[0].Revision != 1 || recs[1].Revision != 1 {
		t.Errorf("List = %+v (%v), want both records with revision 1", recs, err)
	}
	page, err := l.ListPage(ctx, idemstore.PageQuery{Job: job, Limit: 10})
	if err != nil || len(page) != 2 || page[0].Revision != 1 || page[1].Revision != 1 {
		t.Errorf("ListPage = %+v (%v), want both records with revision 1", page, err)
	}
}

// TestRerunSentAgainWhileRunning: the same request sent again while the
// attempt still runs is seen, and stays pending: the attempt's done mark
// still gives the period the revision. Another request meanwhile shares
// the revision.
func TestRerunSentAgainWhileRunning(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t)
	l := openLedger(t, pool)
	for _, c := range []struct {
		period   string
		requests []string
		want     []idem.RerunState
		states   string
	}{
		{"2026-10-01", []string{"a", "a"}, []idem.RerunState{idem.RerunAfterRun, idem.RerunSeen}, "a=queued/1"},
		{"2026-10-02", []string{"a", "b"}, []idem.RerunState{idem.RerunAfterRun, idem.RerunAfterRun}, "a=queued/1 b=queued/1"},
	} {
		key := idem.Key{Job: "again", Period: c.period}
		attempt := claim(t, l, key)
		for i, id := range c.requests {
			if out, err := l.Rerun(ctx, rerunReq(id, key)); err != nil || out[0].State != c.want[i] || out[0].Revision != 1 {
				t.Fatalf("%s: request %s = %+v, %v; want %v, revision 1", key, id, out, err, c.want[i])
			}
		}
		if err := l.Finish(ctx, key, attempt, idemstore.End{Status: idemstore.StatusDone, Now: time.Now()}); err != nil {
			t.Fatal(err)
		}
		rec, _, err := l.Lookup(ctx, key)
		if err != nil || rec.Status != idem.StatusFailed || rec.Revision != 1 {
			t.Errorf("%s: after the done mark: %+v (%v), want failed, revision 1", key, rec, err)
		}
		var states string
		if err := pool.QueryRow(ctx, `SELECT string_agg(request_id || '=' || state || '/' || revision, ' ' ORDER BY request_id) FROM `+table(l, "reruns")+
			` WHERE job = $1 AND period = $2`, key.Job, key.Period).Scan(&states); err != nil || states != c.states {
			t.Errorf("%s: requests %q (%v), want %s", key, states, err, c.states)
		}
	}
}

// TestRerunDoneMarkRace: a request and the running attempt's done mark at
// once, on one period each time: whichever commits first, the period ends
// with revision 1, runnable, and the attempt done in the history.
func TestRerunDoneMarkRace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t)
	l := openLedger(t, pool)
	for i := range 20 {
		key := idem.Key{Job: "race", Period: fmt.Sprintf("2026-10-%02d", i+1)}
		attempt := claim(t, l, key)
		req := rerunReq("r", key)
		var wg sync.WaitGroup
		var rerr, ferr error
		wg.Go(func() { _, rerr = l.Rerun(ctx, req) })
		wg.Go(func() {
			ferr = l.Finish(ctx, key, attempt, idemstore.End{Status: idemstore.StatusDone, Now: time.Now()})
		})
		wg.Wait()
		if rerr != nil || ferr != nil {
			t.Fatalf("%s: Rerun: %v; Finish: %v", key, rerr, ferr)
		}
		rec, _, err := l.Lookup(ctx, key)
		if err != nil || rec.Status != idem.StatusFailed || rec.Revision != 1 {
			t.Fatalf("%s: %+v (%v), want failed, revision 1, whichever came first", key, rec, err)
		}
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+table(l, "attempts")+` WHERE job = $1 AND period = $2 AND revision = 0 AND outcome = 'done'`,
			key.Job, key.Period).Scan(&n); err != nil || n != 1 {
			t.Fatalf("%s: %d done rows of revision 0 in the history (%v), want 1", key, n, err)
		}
	}
}

// TestRerunsDueAndPrune: RerunsDue lists the periods at or before its
// bound whose re-run has not run, oldest first; Prune deletes the pruned
// periods' requests, and a pruned period is refused.
func TestRerunsDueAndPrune(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t)
	l := openLedger(t, pool)
	const job = "due"
	key := func(p string) idem.Key { return idem.Key{Job: job, Period: p} }
	for _, p := range []string{"2026-10-01", "2026-10-02", "2026-10-03"} {
		if err := l.Run(ctx, key(p), func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.Rerun(ctx, rerunReq("x", key("2026-10-03"), key("2026-10-01"))); err != nil {
		t.Fatal(err)
	}
	for through, want := range map[string]string{"2026-10-02": "[2026-10-01]", "2026-10-03": "[2026-10-01 2026-10-03]", "2026-09-30": "[]"} {
		if got, err := l.RerunsDue(ctx, job, through); err != nil || fmt.Sprint(got) != want {
			t.Errorf("RerunsDue through %s = %v, %v; want %s", through, got, err, want)
		}
	}
	if got, err := l.RerunsDue(ctx, "other", "2026-10-03"); err != nil || len(got) != 0 {
		t.Errorf("RerunsDue of another job = %v, %v; want none", got, err)
	}
	for _, p := range []string{"2026-10-01", "2026-10-03"} {
		if err := l.Run(ctx, key(p), func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := l.RerunsDue(ctx, job, "2026-10-03"); err != nil || len(got) != 0 {
		t.Errorf("RerunsDue after the re-runs = %v, %v; want none", got, err)
	}
	if _, err := l.Prune(ctx, job, "2026-10-02"); err != nil {
		t.Fatal(err)
	}
	var periods string
	if err := pool.QueryRow(ctx, `SELECT string_agg(period, ' ') FROM `+table(l, "reruns")).Scan(&periods); err != nil || periods != "2026-10-03" {
		t.Errorf("requests after Prune through 2026-10-02: %q (%v), want 2026-10-03's alone", periods, err)
	}
	if _, err := l.Rerun(ctx, rerunReq("y", key("2026-10-01"))); !errors.Is(err, idem.ErrNotRerunnable) || !strings.Contains(err.Error(), "pruned") {
		t.Errorf("Rerun of a pruned period = %v, want ErrNotRerunnable saying it was pruned", err)
	}
}

// TestRerunCatchUp: a catch-up on the Postgres ledger runs the periods
// behind its cursor that a request made runnable, once each, then those
// due after it.
func TestRerunCatchUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := openLedger(t, newPool(t))
	sched := idem.Daily(time.UTC)
	clk := idemtest.NewClock(time.Date(2026, 10, 4, 2, 0, 0, 0, time.UTC))
	var mu sync.Mutex
	ran := map[string][]int64{}
	fn := func(ctx context.Context, p idem.Period) error {
		info, _ := idem.InfoFrom(ctx)
		mu.Lock()
		ran[p.Name] = append(ran[p.Name], info.Revision)
		mu.Unlock()
		return nil
	}
	opts := []idem.Option{idem.WithClock(clk), idem.Since(time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC))}
	if _, err := idem.CatchUp(ctx, l, "settle", sched, fn, opts...); err != nil {
		t.Fatal(err)
	}
	if _, err := idem.Rerun(ctx, l, rerunReq("oct", idem.Key{Job: "settle", Period: "2026-10-01"}, idem.Key{Job: "settle", Period: "2026-10-02"})); err != nil {
		t.Fatal(err)
	}
	clk.Advance(24 * time.Hour)
	for range 2 {
		if _, err := idem.CatchUp(ctx, l, "settle", sched, fn, opts...); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string][]int64{"2026-10-01": {0, 1}, "2026-10-02": {0, 1}, "2026-10-03": {0}, "2026-10-04": {0}}
	if fmt.Sprint(ran) != fmt.Sprint(want) {
		t.Errorf("fn ran for (period: revisions) %v, want %v", ran, want)
	}
}
