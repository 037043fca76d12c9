package pgledger_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/testwait"
	"github.com/idemgo/idem/pgledger"
	"github.com/jackc/pgx/v5"
)

// record reads key's status and attempt straight from l's table.
func record(t *testing.T, l schemaLedger, k idem.Key) (status string, attempt int64, found bool) {
	t.Helper()
	err := queryIn(context.Background(), l, `SELECT status, attempt FROM `+table(l, "runs")+
		` WHERE job = '`+k.Job+`' AND period = '`+k.Period+`'`, []any{&status, &attempt}, func() { found = true })
	if err != nil {
		t.Fatal(err)
	}
	return status, attempt, found
}

// TestFreshClaimPaths: a new key's claim (one batch: the job's lock and
// the INSERT) records attempt 1, running, until the done mark; a done
// key's claim (the status read alone) returns its stored value; a new key
// below the job's horizon inserts nothing and, read whole, is done; a
// key whose RunTx failed is claimed again, from its record, as attempt 2.
func TestFreshClaimPaths(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	l := openLedger(t, pool)
	createEffects(t, l)
	ctx := context.Background()

	k := idem.Key{Job: "fresh", Period: "2026-10-27"}
	v, err := idem.RunValueOn(ctx, l, k, func(ctx context.Context) (int, error) {
		if status, attempt, _ := record(t, l, k); status != "running" || attempt != 1 {
			return 0, errors.New("the record while fn runs is " + status + ", want running attempt 1")
		}
		return 42, nil
	})
	if err != nil || v != 42 {
		t.Fatalf("RunValue: %d, %v", v, err)
	}
	var res idem.Result
	v, err = idem.RunValueOn(ctx, l, k, func(context.Context) (int, error) {
		t.Error("fn ran for a done key")
		return 0, nil
	}, idem.ReportTo(&res))
	if err != nil || v != 42 || res.Outcome != idem.AlreadyDone {
		t.Fatalf("duplicate RunValue: %d, %v, %s; want the stored 42, AlreadyDone", v, err, res.Outcome)
	}

	// RunTx: fn fails, with its SQL aborting the transaction: the claim
	// stays, failed; the next call claims the record as attempt 2.
	k = idem.Key{Job: "fresh", Period: "2026-10-28"}
	err = l.RunTx(ctx, k, func(ctx context.Context, tx pgx.Tx) error {
		if err := addEffect(ctx, l, tx, k); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `SELECT 1/0`)
		return err
	}, idem.WithBackoff(idem.Constant(time.Hour)))
	if err == nil {
		t.Fatal("RunTx of a failing fn returned nil")
	}
	if status, attempt, _ := record(t, l, k); status != "failed" || attempt != 1 {
		t.Fatalf("record %s attempt %d after a failed attempt, want failed attempt 1", status, attempt)
	}
	shift(t, l, time.Hour+time.Second) // the backoff ends
	err = l.RunTx(ctx, k, func(ctx context.Context, tx pgx.Tx) error { return addEffect(ctx, l, tx, k) }, idem.ReportTo(&res))
	if err != nil || res.Attempt != 2 {
		t.Fatalf("RunTx after a failed attempt: %v, attempt %d", err, res.Attempt)
	}
	if n := effects(t, l, k); n != 1 {
		t.Fatalf("effects %d, want 1", n)
	}

	// Below the job's horizon: done, fn not run, nothing recorded.
	k = idem.Key{Job: "pruned", Period: "2026-10-27"}
	if err := l.Run(ctx, k, noopFn); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Prune(ctx, "pruned", "2026-10-28"); err != nil {
		t.Fatal(err)
	}
	k = idem.Key{Job: "pruned", Period: "2026-10-28"}
	for _, tx := range []bool{false, true} {
		if tx {
			err = l.RunTx(ctx, k, func(context.Context, pgx.Tx) error { t.Error("fn ran below the horizon"); return nil }, idem.ReportTo(&res))
		} else {
			err = l.Run(ctx, k, func(context.Context) error { t.Error("fn ran below the horizon"); return nil }, idem.ReportTo(&res))
		}
		if err != nil || res.Outcome != idem.AlreadyDone {
			t.Fatalf("tx=%v: below the horizon: %v, %s", tx, err, res.Outcome)
		}
		if _, _, found := record(t, l, k); found {
			t.Fatalf("tx=%v: a record was written below the horizon", tx)
		}
	}
}

func noopFn(context.Context) error { return nil }

// TestFreshClaimWaitsForPrune: a new key's claim, one batch, still takes the
// job's advisory lock (shared) before its INSERT: while Prune's lock is
// held, the claim waits, and after it sees the horizon that Prune raised;
// a RunTx's one-transaction claim does the same.
func TestFreshClaimWaitsForPrune(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	l := openLedger(t, pool)
	ctx := context.Background()
	for _, tx := range []bool{false, true} {
		job := "prune-run"
		if tx {
			job = "prune-runtx"
		}
		k := idem.Key{Job: job, Period: "2026-10-27"}
		// Take the lock Prune takes, in a transaction of our own, and raise
		// the horizon in it.
		ptx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ptx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, lockIDFor(l, job)); err != nil {
			t.Fatal(err)
		}
		if _, err := ptx.Exec(ctx, `INSERT INTO `+table(l, "jobs")+`(job, horizon) VALUES ($1, $2)`, job, k.Period); err != nil {
			t.Fatal(err)
		}
		ran := make(chan bool, 1)
		done := make(chan error, 1)
		go func() {
			var res idem.Result
			var err error
			if tx {
				err = l.RunTx(ctx, k, func(context.Context, pgx.Tx) error { ran <- true; return nil }, idem.ReportTo(&res))
			} else {
				err = l.Run(ctx, k, func(context.Context) error { ran <- true; return nil }, idem.ReportTo(&res))
			}
			if err == nil && res.Outcome != idem.AlreadyDone {
				err = errors.New("outcome " + res.Outcome.String() + ", want AlreadyDone")
			}
			done <- err
		}()
		// Wait until the claim waits for the lock.
		testwait.Until(t, func() bool {
			var n int
			id := uint64(lockIDFor(l, job))
			err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
				AND classid = $1::bigint::oid AND objid = $2::bigint::oid`, int64(id>>32), int64(id&0xffffffff)).Scan(&n)
			return err == nil && n > 0
		}, "the claim of %s to wait for the job's advisory lock", k)
		if err := ptx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("tx=%v: %v", tx, err)
			}
		case <-time.After(testwait.Limit(t)):
			t.Fatalf("tx=%v: the claim did not return within %v of the lock's release", tx, testwait.Limit(t))
		}
		select {
		case <-ran:
			t.Fatalf("tx=%v: fn ran for a period the horizon covers", tx)
		default:
		}
		if _, _, found := record(t, l, k); found {
			t.Fatalf("tx=%v: a record was written below the horizon", tx)
		}
	}
}

// lockIDFor is the advisory lock id of job in l's schema, as the ledger
// computes it (ledger.go, lockID).
func lockIDFor(l schemaLedger, job string) int64 {
	h := fnv.New64a()
	h.Write([]byte("idem/pgledger\x00job\x00" + l.Schema() + "\x00" + job))
	return int64(h.Sum64())
}

// TestClaimDoesNotWaitForHeldRow: a claim whose INSERT goes first (a
// ledger whose recent claims found new keys) does not wait for another
// transaction that holds the key's row, as a RunTx's fn holds it: it gives
// up on the lock, reads the record and answers that the key is in
// progress, as a claim that reads first (a ledger whose recent claims
// found done keys) does. Neither waits for that transaction to end.
func TestClaimDoesNotWaitForHeldRow(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	l := openLedger(t, pool)
	ctx := context.Background()
	var done []idem.Key
	for i := range 8 {
		k := idem.Key{Job: "held", Period: fmt.Sprintf("2026-09-%02d", i+1)}
		if err := l.Run(ctx, k, noopFn); err != nil {
			t.Fatal(err)
		}
		done = append(done, k)
	}

	k := idem.Key{Job: "held", Period: "2026-10-27"}
	started, release := make(chan struct{}), make(chan struct{})
	aErr := make(chan error, 1)
	go func() {
		aErr <- l.Run(ctx, k, func(context.Context) error { close(started); <-release; return nil })
	}()
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()
	testwait.Recv(t, started, "A's fn to start")
	// Hold the key's row, as a RunTx's fence does while its fn runs.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `UPDATE `+table(l, "runs")+` SET updated = updated WHERE job = $1 AND period = $2`, k.Job, k.Period); err != nil {
		t.Fatal(err)
	}

	for _, readFirst := range []bool{false, true} {
		b, err := pgledger.New(ctx, pool, pgledger.WithSchema(l.Schema()))
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		if readFirst { // eight done keys turn B's guess to "done"
			for _, d := range done {
				var res idem.Result
				if err := b.Run(ctx, d, noopFn, idem.ReportTo(&res)); err != nil || res.Outcome != idem.AlreadyDone {
					t.Fatalf("B's Run of done key %s: %v, %s", d, err, res.Outcome)
				}
			}
		}
		var res idem.Result
		bErr := make(chan error, 1)
		go func() {
			bErr <- b.Run(ctx, k, func(context.Context) error { return errors.New("B's fn ran for a key A holds") }, idem.ReportTo(&res))
		}()
		err = testwait.Recv(t, bErr, "B's claim (read first: %v) of a key whose row another transaction holds", readFirst)
		if !errors.Is(err, idem.ErrInProgress) || res.Outcome != idem.InProgress {
			t.Fatalf("read first %v: B's Run: %v, outcome %s; want ErrInProgress", readFirst, err, res.Outcome)
		}
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	close(release)
	released = true
	if err := testwait.Recv(t, aErr, "A's Run to return once released"); err != nil {
		t.Fatalf("A: %v", err)
	}
	if status, attempt, _ := record(t, l, k); status != "done" || attempt != 1 {
		t.Fatalf("record %s attempt %d, want done attempt 1", status, attempt)
	}
}
