package pgledger_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

type attemptRow struct {
	period           string
	revision         int64
	attempt          int64
	outcome, errText string
	owner            string
	started          *time.Time
	ended            time.Time
}

func attemptRows(t *testing.T, pool *pgxpool.Pool, l schemaLedger, job string) []attemptRow {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT period, revision, attempt, outcome, error, owner, started, ended FROM `+table(l, "attempts")+`
		WHERE job = $1 ORDER BY period, revision, attempt`, job)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []attemptRow
	for rows.Next() {
		var r attemptRow
		if err := rows.Scan(&r.period, &r.revision, &r.attempt, &r.outcome, &r.errText, &r.owner, &r.started, &r.ended); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestAttemptHistory: every attempt that ends writes one row of attempts
// with its outcome, error, owner and times (Run done, Run failed then
// parked, RunTx done), and Prune deletes the pruned keys' rows.
func TestAttemptHistory(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ctx := context.Background()
	l := openLedger(t, pool)
	const job = "hist"
	if err := l.Run(ctx, idem.Key{Job: job, Period: "2026-01-01"}, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	if err := l.Run(ctx, idem.Key{Job: job, Period: "2026-01-02"}, func(context.Context) error { return boom },
		idem.WithBackoff(idem.MaxAttempts(2, idem.Constant(time.Millisecond)))); !errors.Is(err, boom) {
		t.Fatalf("Run of a failing fn: %v, want boom", err)
	}
	if err := l.RunTx(ctx, idem.Key{Job: job, Period: "2026-01-03"}, func(context.Context, pgx.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	got := attemptRows(t, pool, l, job)
	want := []struct {
		period  string
		attempt int64
		outcome string
		err     string
	}{
		{"2026-01-01", 1, "done", ""},
		{"2026-01-02", 1, "failed", "boom"},
		{"2026-01-02", 2, "parked", "boom"},
		{"2026-01-03", 1, "done", ""},
	}
	if len(got) != len(want) {
		t.Fatalf("history rows %+v, want %d", got, len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.period != w.period || g.outcome != w.outcome || g.revision != 0 || g.attempt != w.attempt || !strings.Contains(g.errText, w.err) {
			t.Errorf("row %d: %+v, want period %s outcome %s revision 0 attempt %d (error %q)", i, g, w.period, w.outcome, w.attempt, w.err)
		}
		if g.owner == "" || g.started == nil || g.ended.Before(*g.started) {
			t.Errorf("row %d: %+v: want an owner and started <= ended", i, g)
		}
	}
	if _, err := l.Prune(ctx, job, "2026-01-01"); err != nil {
		t.Fatal(err)
	}
	got = attemptRows(t, pool, l, job)
	if len(got) != 3 || got[0].period != "2026-01-02" {
		t.Fatalf("after Prune through 2026-01-01: %+v, want the 3 rows of 2026-01-02 and 2026-01-03", got)
	}
}
