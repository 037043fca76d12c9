package mysqlledger_test

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
	"github.com/idemgo/idem/mysqlledger"
)

func rerunReq(id string, keys ...idem.Key) idem.RerunRequest {
	return idem.RerunRequest{Keys: keys, RequestID: id, Reason: "flow table corrected", By: "ops"}
}

// claimKey takes key for a new attempt on l and returns the attempt.
func claimKey(t *testing.T, l *mysqlledger.Ledger, key idem.Key) int64 {
	t.Helper()
	c, err := l.Claim(context.Background(), idemstore.ClaimRequest{Key: key, Owner: "test", Now: time.Now(), Lease: time.Minute})
	if err != nil || c.State != idemstore.ClaimAcquired {
		t.Fatalf("Claim(%s) = %+v, %v; want acquired", key, c, err)
	}
	return c.Attempt
}

// wantPromoted checks that key, whose attempt ended done while req waited
// for it, has revision 1, runnable at once, with the request's note, and
// that the request is queued.
func wantPromoted(t *testing.T, l *mysqlledger.Ledger, key idem.Key, req idem.RerunRequest) {
	t.Helper()
	rec, ok, err := l.Lookup(context.Background(), key)
	if err != nil || !ok || rec.Status != idem.StatusFailed || rec.Revision != 1 || rec.Failures != 0 || !rec.NotBefore.IsZero() ||
		rec.LastError != idemstore.RerunNote(req, 1) {
		t.Errorf("%s after the done mark: %+v (%v); want failed (runnable at once), revision 1, no failure, last error %q",
			key, rec, err, idemstore.RerunNote(req, 1))
	}
	var state string
	if err := l.DB().QueryRow(`SELECT GROUP_CONCAT(state) FROM `+l.Table("reruns")+` WHERE job = ? AND period = ?`,
		key.Job, key.Period).Scan(&state); err != nil || state != "queued" {
		t.Errorf("the request's state: %q (%v), want queued", state, err)
	}
}

// TestRerunEveryDoneMark: a request that came while an attempt held the
// period gives it the new revision in the transaction of the attempt's
// done mark, whichever call writes it: Finish, Finish with the cursor,
// and RunTx's done mark (FinishTx).
func TestRerunEveryDoneMark(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := openLedger(t, openDB(t))
	for _, c := range []struct {
		name   string
		finish func(key idem.Key, attempt int64) error
	}{
		{"Finish", func(key idem.Key, attempt int64) error {
			return l.Finish(ctx, key, attempt, idemstore.End{Status: idem.StatusDone, Now: time.Now()})
		}},
		{"Finish with the cursor", func(key idem.Key, attempt int64) error {
			return l.Finish(ctx, key, attempt, idemstore.End{Status: idem.StatusDone, Now: time.Now(), Cursor: true})
		}},
		{"FinishTx", func(key idem.Key, attempt int64) error {
			return l.FinishTx(ctx, key, attempt, time.Now(), false, func(*sql.Tx) ([]byte, error) { return nil, nil })
		}},
	} {
		key := idem.Key{Job: "every", Period: c.name}
		attempt := claimKey(t, l, key)
		req := rerunReq("during-"+strings.ReplaceAll(c.name, " ", "-"), key)
		if out, err := l.Rerun(ctx, req); err != nil || out[0].State != idem.RerunAfterRun || out[0].Revision != 1 {
			t.Fatalf("%s: Rerun while running = %+v, %v; want after the run, revision 1", c.name, out, err)
		}
		if err := c.finish(key, attempt); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		wantPromoted(t, l, key, req)
	}
}

// TestRerunOlderDoneMark: a done mark written as mysqlledger before schema
// version 2 writes it (no promotion) leaves the request pending; the
// request sent again is seen and gives the period its revision.
func TestRerunOlderDoneMark(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := openLedger(t, openDB(t))
	key := idem.Key{Job: "older", Period: "2026-10-01"}
	attempt := claimKey(t, l, key)
	req := rerunReq("during", key)
	if _, err := l.Rerun(ctx, req); err != nil {
		t.Fatal(err)
	}
	if _, err := l.DB().Exec(`UPDATE `+l.Table("runs")+` SET status = 'done', lease_until = 0 WHERE job = ? AND period = ? AND attempt = ?`,
		key.Job, key.Period, attempt); err != nil {
		t.Fatal(err)
	}
	if out, err := l.Rerun(ctx, req); err != nil || out[0].State != idem.RerunSeen || out[0].Revision != 1 {
		t.Fatalf("the request sent again = %+v, %v; want seen, revision 1", out, err)
	}
	wantPromoted(t, l, key, req)
}

// TestUpgradeFromVersion1: a ledger of schema version 1 (no column
// revision, no table reruns) is upgraded in place by New: its records
// stay, and its done periods can be re-run.
func TestUpgradeFromVersion1(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openDB(t)
	l := openLedger(t, db)
	key := idem.Key{Job: "upgrade", Period: "2026-10-01"}
	if err := l.Run(ctx, key, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`ALTER TABLE ` + l.Table("runs") + ` DROP COLUMN revision`, `DROP TABLE ` + l.Table("reruns"),
		`UPDATE ` + l.Table("meta") + ` SET version = 1 WHERE name = 'schema'`} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	l2, err := mysqlledger.New(ctx, db, mysqlledger.WithTablePrefix(l.Prefix()))
	if err != nil {
		t.Fatalf("New on a version 1 schema: %v", err)
	}
	var v int
	if err := db.QueryRow(`SELECT version FROM ` + l.Table("meta")).Scan(&v); err != nil || v != mysqlledger.SchemaVersion {
		t.Errorf("version after the upgrade: %d, %v; want %d", v, err, mysqlledger.SchemaVersion)
	}
	if rec, ok, err := l2.Lookup(ctx, key); err != nil || !ok || rec.Status != idem.StatusDone || rec.Revision != 0 {
		t.Fatalf("the record after the upgrade: %+v, %v, %v; want done, revision 0", rec, ok, err)
	}
	if out, err := l2.Rerun(ctx, rerunReq("after-upgrade", key)); err != nil || out[0].State != idem.RerunQueued || out[0].Revision != 1 {
		t.Errorf("Rerun after the upgrade = %+v, %v; want queued, revision 1", out, err)
	}
}

// TestRerunsDueAndPrune: RerunsDue lists the periods at or before its
// bound whose re-run has not run, oldest first; Prune deletes the pruned
// periods' requests, and a pruned period is refused.
func TestRerunsDueAndPrune(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := openLedger(t, openDB(t))
	const job = "due"
	key := func(p string) idem.Key { return idem.Key{Job: job, Period: p} }
	noop := func(context.Context) error { return nil }
	for _, p := range []string{"2026-10-01", "2026-10-02", "2026-10-03"} {
		if err := l.Run(ctx, key(p), noop); err != nil {
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
		if err := l.Run(ctx, key(p), noop); err != nil {
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
	if err := l.DB().QueryRow(`SELECT GROUP_CONCAT(period) FROM ` + l.Table("reruns")).Scan(&periods); err != nil || periods != "2026-10-03" {
		t.Errorf("requests after Prune through 2026-10-02: %q (%v), want 2026-10-03's alone", periods, err)
	}
	if _, err := l.Rerun(ctx, rerunReq("y", key("2026-10-01"))); !errors.Is(err, idem.ErrNotRerunnable) || !strings.Contains(err.Error(), "pruned") {
		t.Errorf("Rerun of a pruned period = %v, want ErrNotRerunnable saying it was pruned", err)
	}
}
