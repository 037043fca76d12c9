package idem_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
)

// attemptRow is a row of idem_attempts.
type attemptRow struct {
	period           string
	revision         int
	attempt          int
	outcome, errText string
	owner            string
	started, ended   int64
}

func attemptRows(t *testing.T, db *sql.DB, job string) []attemptRow {
	t.Helper()
	rows, err := db.Query(`SELECT period, revision, attempt, outcome, error, owner, started, ended FROM idem_attempts
		WHERE job = ? ORDER BY period, revision, attempt`, job)
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

// TestAttemptHistory: every attempt that ends writes one row of
// idem_attempts with its outcome, error, owner and times (Run done, Run
// failed, then parked, RunTx done in its single transaction), and Prune deletes the
// pruned keys' rows.
func TestAttemptHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := openLedger(t, t.TempDir())
	const job = "hist"
	if err := l.Run(ctx, idem.Key{Job: job, Period: "2026-01-01"}, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	if err := l.Run(ctx, idem.Key{Job: job, Period: "2026-01-02"}, func(context.Context) error { return boom },
		idem.WithBackoff(idem.MaxAttempts(2, idem.Constant(time.Millisecond)))); !errors.Is(err, boom) {
		t.Fatalf("Run of a failing fn: %v, want boom", err)
	}
	if err := l.RunTx(ctx, idem.Key{Job: job, Period: "2026-01-03"}, func(context.Context, *sql.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	got := attemptRows(t, l.DB(), job)
	want := []struct {
		period  string
		attempt int
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
		if g.owner == "" || g.started == 0 || g.ended < g.started {
			t.Errorf("row %d: %+v: want an owner and started <= ended", i, g)
		}
	}
	if _, err := l.Prune(ctx, job, "2026-01-01"); err != nil {
		t.Fatal(err)
	}
	got = attemptRows(t, l.DB(), job)
	if len(got) != 3 || got[0].period != "2026-01-02" {
		t.Fatalf("after Prune through 2026-01-01: %+v, want the 3 rows of 2026-01-02 and 2026-01-03", got)
	}
}
