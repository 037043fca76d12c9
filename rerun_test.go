package idem_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/testwait"
	"github.com/idemgo/idem/outbox"
)

func rerunReq(id, reason string, keys ...idem.Key) idem.RerunRequest {
	return idem.RerunRequest{Keys: keys, RequestID: id, Reason: reason, By: "test"}
}

// TestRerunRunTxOutbox: a re-run of a RunTx period recomputes its rows
// once, in the transaction of its done mark, and its outbox messages get
// the revision's ids.
func TestRerunRunTxOutbox(t *testing.T) {
	ctx := context.Background()
	l := openLedger(t, t.TempDir())
	if _, err := l.DB().ExecContext(ctx, `CREATE TABLE settlement(day TEXT PRIMARY KEY, amount INTEGER, runs INTEGER)`); err != nil {
		t.Fatal(err)
	}
	key := idem.Key{Job: "settle", Period: "2026-10-02"}
	amount := 100
	var ids []string
	body := func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO settlement VALUES(?, ?, 1)
			ON CONFLICT(day) DO UPDATE SET amount = excluded.amount, runs = runs + 1`, key.Period, amount); err != nil {
			return err
		}
		id, err := outbox.Put(ctx, tx, outbox.Message{Topic: "mail", Payload: []byte("settled")})
		ids = append(ids, id)
		return err
	}
	for range 2 {
		if err := l.RunTx(ctx, key, body); err != nil {
			t.Fatal(err)
		}
	}
	amount = 120 // the flow table was corrected
	if _, err := idem.Rerun(ctx, l, rerunReq("fix-october", "flow table corrected", key)); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := l.RunTx(ctx, key, body); err != nil {
			t.Fatal(err)
		}
	}
	var got, runs int
	if err := l.DB().QueryRowContext(ctx, `SELECT amount, runs FROM settlement WHERE day = ?`, key.Period).Scan(&got, &runs); err != nil {
		t.Fatal(err)
	}
	if got != 120 || runs != 2 {
		t.Errorf("settlement after the re-run: amount %d, written %d times; want 120, twice (the first run and the re-run)", got, runs)
	}
	if len(ids) != 2 || ids[0] != key.RequestID()+"-0" || ids[1] != key.RevisionRequestID(1)+"-0" {
		t.Errorf("message ids %q, want %s-0 then the revision's %s-0", ids, key.RequestID(), key.RevisionRequestID(1))
	}
}

// TestRerunRefusedByStateFile: a store that keeps no revisions says so,
// naming itself and the interface it lacks, and its done period stays
// done: the next trigger runs nothing.
func TestRerunRefusedByStateFile(t *testing.T) {
	ctx := context.Background()
	sf := openState(t, t.TempDir())
	key := idem.Key{Job: "j", Period: "p"}
	ran := 0
	fn := func(context.Context) error { ran++; return nil }
	if err := idem.RunOn(ctx, sf, key, fn); err != nil {
		t.Fatal(err)
	}
	_, err := idem.Rerun(ctx, sf, rerunReq("x", "x", key))
	if err == nil || !strings.Contains(err.Error(), "Rerunner") || !strings.Contains(err.Error(), "*idem.StateFile") || !strings.Contains(err.Error(), "Rerun") {
		t.Errorf("Rerun on the state file = %v, want an error naming the call, the store (*idem.StateFile) and idemstore.Rerunner", err)
	}
	if err := idem.RunOn(ctx, sf, key, fn); err != nil || ran != 1 {
		t.Errorf("after the refused request: %v, fn ran %d times; want the period still done (once)", err, ran)
	}
}

// TestRerunValueReplaced: RunValue's stored value is the re-run's.
func TestRerunValueReplaced(t *testing.T) {
	ctx := context.Background()
	l := openLedger(t, t.TempDir())
	key := idem.Key{Job: "report", Period: "2026-10"}
	v := "v1"
	get := func() string {
		t.Helper()
		got, err := idem.RunValueOn(ctx, l, key, func(context.Context) (string, error) { return v, nil })
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := get(); got != "v1" {
		t.Fatalf("first run: %q", got)
	}
	v = "v2"
	if got := get(); got != "v1" {
		t.Fatalf("a duplicate returns %q, want the stored v1", got)
	}
	if _, err := idem.Rerun(ctx, l, rerunReq("fix", "report bug fixed", key)); err != nil {
		t.Fatal(err)
	}
	if got := get(); got != "v2" {
		t.Errorf("the re-run returns %q, want v2", got)
	}
	v = "v3"
	if got := get(); got != "v2" {
		t.Errorf("after the re-run a duplicate returns %q, want the re-run's v2", got)
	}
}

// TestRerunCatchUp: a catch-up runs the periods behind its cursor that a
// re-run request made runnable, once each, without moving the cursor, and
// then the periods due after it.
func TestRerunCatchUp(t *testing.T) {
	ctx := context.Background()
	l := openLedger(t, t.TempDir())
	sched := idem.Daily(time.UTC)
	clk := idemtest.NewClock(time.Date(2026, 10, 4, 2, 0, 0, 0, time.UTC))
	ran := map[string][]int64{}
	fn := func(ctx context.Context, p idem.Period) error {
		info, _ := idem.InfoFrom(ctx)
		ran[p.Name] = append(ran[p.Name], info.Revision)
		return nil
	}
	opts := []idem.Option{idem.WithClock(clk), idem.Since(time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC))}
	if _, err := idem.CatchUp(ctx, l, "settle", sched, fn, opts...); err != nil {
		t.Fatal(err)
	}
	if _, err := idem.Rerun(ctx, l, rerunReq("oct", "flow table corrected",
		idem.Key{Job: "settle", Period: "2026-10-01"}, idem.Key{Job: "settle", Period: "2026-10-02"})); err != nil {
		t.Fatal(err)
	}
	clk.Advance(24 * time.Hour) // 2026-10-04 is due too now
	res, err := idem.CatchUp(ctx, l, "settle", sched, fn, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := idem.CatchUp(ctx, l, "settle", sched, fn, opts...); err != nil {
		t.Fatal(err)
	}
	want := map[string][]int64{"2026-10-01": {0, 1}, "2026-10-02": {0, 1}, "2026-10-03": {0}, "2026-10-04": {0}}
	if fmt.Sprint(ran) != fmt.Sprint(want) {
		t.Errorf("fn ran for (period: revisions) %v, want %v", ran, want)
	}
	if res.Cursor != "2026-10-04" || len(res.Periods) != 3 {
		t.Errorf("the catch-up after the request: cursor %s, %d periods (%+v); want the cursor at 2026-10-04, three periods (two re-runs and the new one)", res.Cursor, len(res.Periods), res.Periods)
	}
}

// TestRerunPruned: Prune forgets a period's re-run requests with its
// record, and a re-run of a pruned period is refused, naming the
// retention.
func TestRerunPruned(t *testing.T) {
	ctx := context.Background()
	l := openLedger(t, t.TempDir())
	key := idem.Key{Job: "settle", Period: "2026-10-01"}
	noop := func(context.Context) error { return nil }
	if err := l.Run(ctx, key, noop); err != nil {
		t.Fatal(err)
	}
	if _, err := idem.Rerun(ctx, l, rerunReq("r1", "repair", key)); err != nil {
		t.Fatal(err)
	}
	if err := l.Run(ctx, key, noop); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Prune(ctx, "settle", "2026-10-01"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := l.DB().QueryRowContext(ctx, `SELECT count(*) FROM idem_reruns`).Scan(&n); err != nil || n != 0 {
		t.Errorf("after Prune: %d re-run requests kept (%v), want none", n, err)
	}
	if _, err := idem.Rerun(ctx, l, rerunReq("r2", "repair", key)); !errors.Is(err, idem.ErrNotRerunnable) || !strings.Contains(err.Error(), "retention") {
		t.Errorf("Rerun of a pruned period = %v, want ErrNotRerunnable naming the retention", err)
	}
}

// TestRerunEveryDoneMark: a request that came while an attempt held the
// period gives it the new revision in the transaction of the attempt's
// done mark, whichever writes it: Run's own, and one written by hand as a
// process of the release before writes it (the promotion is the schema's
// trigger, idem_rerun_after_done). The attempt's history row keeps its own
// revision and outcome; the promotion ends no attempt.
func TestRerunEveryDoneMark(t *testing.T) {
	ctx := context.Background()
	l := openLedger(t, t.TempDir())
	for _, path := range []string{"Run", "OlderRelease"} {
		key := idem.Key{Job: "every", Period: path}
		started, release := make(chan struct{}), make(chan struct{})
		errc := make(chan error, 1)
		go func() {
			errc <- l.Run(ctx, key, func(ctx context.Context) error {
				close(started)
				<-release
				return nil
			})
		}()
		testwait.Recv(t, started, "%s: the run's fn to start", path)
		req := rerunReq("during-"+path, "repair", key)
		out, err := idem.Rerun(ctx, l, req)
		if err != nil || out[0].State != idem.RerunAfterRun || out[0].Revision != 1 {
			t.Fatalf("%s: Rerun while running = %+v, %v; want after the run, revision 1", path, out, err)
		}
		if path == "OlderRelease" {
			if _, err := l.DB().ExecContext(ctx, `UPDATE idem_runs SET status='done', lease_until=0, updated=updated+1
				WHERE job=? AND period=? AND status='running'`, key.Job, key.Period); err != nil {
				t.Fatal(err)
			}
		}
		close(release)
		err = testwait.Recv(t, errc, "%s: the run to return", path)
		if path == "Run" && err != nil {
			t.Fatalf("Run: %v", err)
		}
		rec, ok, err := l.Lookup(ctx, key)
		if note := idemstore.RerunNote(req, 1); err != nil || !ok || rec.Status != idem.StatusFailed || rec.Revision != 1 ||
			rec.Failures != 0 || !rec.NotBefore.IsZero() || rec.LastError != note {
			t.Errorf("%s: after the done mark: %+v (%v); want failed (runnable at once), revision 1, no failure, last error %q", path, rec, err, note)
		}
		var hist, states string
		if err := l.DB().QueryRowContext(ctx, `SELECT coalesce(group_concat(revision || '/' || attempt || '/' || outcome, ' '), '')
			FROM idem_attempts WHERE job=? AND period=?`, key.Job, key.Period).Scan(&hist); err != nil {
			t.Fatal(err)
		}
		if want := "0/1/done"; path == "Run" && hist != want {
			t.Errorf("%s: history %q, want only %q (the attempt's done mark; the promotion ends no attempt)", path, hist, want)
		}
		if err := l.DB().QueryRowContext(ctx, `SELECT group_concat(state, ' ') FROM idem_reruns WHERE job=? AND period=?`,
			key.Job, key.Period).Scan(&states); err != nil || states != "queued" {
			t.Errorf("%s: the request's state %q (%v), want queued", path, states, err)
		}
		if err := l.Run(ctx, key, func(ctx context.Context) error { return nil }); err != nil {
			t.Fatalf("%s: the re-run: %v", path, err)
		}
		if rec, _, _ := l.Lookup(ctx, key); rec.Status != idem.StatusDone || rec.Revision != 1 {
			t.Errorf("%s: after the re-run: %s revision %d, want done revision 1", path, rec.Status, rec.Revision)
		}
	}
}
