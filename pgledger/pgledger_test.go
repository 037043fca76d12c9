package pgledger_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/testwait"
	"github.com/idemgo/idem/pgledger"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestConformance runs idem's store conformance suite. The database's clock
// cannot be faked, so time passes by moving every stored time back: the
// suite calls Shift whenever its fake clock moves, including the moves an
// auto-advancing clock makes in the engine's sleeps.
func TestConformance(t *testing.T) {
	t.Parallel()
	idemtest.TestStore(t, harness(newPool(t)))
}

// effects is a business table that counts every write fn makes per key,
// so a second effect shows (an idempotent upsert would hide it).
func createEffects(t *testing.T, l *pgledger.Ledger) {
	t.Helper()
	if _, err := l.Pool().Exec(context.Background(), `CREATE TABLE `+table(l, "effects")+` (k text PRIMARY KEY, n int NOT NULL)`); err != nil {
		t.Fatal(err)
	}
}

func addEffect(ctx context.Context, l *pgledger.Ledger, tx pgx.Tx, k idem.Key) error {
	_, err := tx.Exec(ctx, `INSERT INTO `+table(l, "effects")+` AS e (k, n) VALUES ($1, 1)
		ON CONFLICT (k) DO UPDATE SET n = e.n + 1`, k.String())
	return err
}

func effects(t *testing.T, l *pgledger.Ledger, k idem.Key) int {
	t.Helper()
	var n int
	err := l.Pool().QueryRow(context.Background(), `SELECT coalesce((SELECT n FROM `+table(l, "effects")+` WHERE k = $1), 0)`, k.String()).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestRunTxConcurrent: 16 goroutines, through two ledgers with pools of
// their own (two hosts, as far as the database can tell), run one key; the
// business row is written once, and every caller gets nil or ErrInProgress.
func TestRunTxConcurrent(t *testing.T) {
	t.Parallel()
	p1, p2 := newPool(t), newPool(t)
	l1 := openLedger(t, p1)
	l2, err := pgledger.New(context.Background(), p2, pgledger.WithSchema(l1.Schema()))
	if err != nil {
		t.Fatal(err)
	}
	createEffects(t, l1)
	k := idem.Key{Job: "settle", Period: "2026-10-27"}
	outcomes := runTxConcurrently(t, []*pgledger.Ledger{l1, l2}, k, func(ctx context.Context, l *pgledger.Ledger, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_sleep(0.05)`); err != nil {
			return err
		}
		return addEffect(ctx, l, tx, k)
	})
	if n := effects(t, l1, k); n != 1 || outcomes[idem.Ran] != 1 {
		t.Fatalf("business row written %d times, outcomes %v; want once, one Ran", n, outcomes)
	}
	rec, ok, err := l2.Lookup(context.Background(), k)
	if err != nil || !ok || rec.Status != idem.StatusDone || rec.Attempt != 1 {
		t.Fatalf("record %+v, %v, %v; want done by attempt 1", rec, ok, err)
	}
}

// TestRunTxRowLockKeepsOthersOut: while fn runs in RunTx, its transaction
// holds the key's row lock. A claimer that finds the lease expired (RunTx
// does not renew) waits for the lock instead of taking over, then finds the
// key done.
func TestRunTxRowLockKeepsOthersOut(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	l := openLedger(t, pool)
	createEffects(t, l)
	k := idem.Key{Job: "slow", Period: "2026-10-27"}
	started, release := make(chan struct{}), make(chan struct{})
	aErr := make(chan error, 1)
	const lease = 300 * time.Millisecond
	go func() {
		aErr <- l.RunTx(context.Background(), k, func(ctx context.Context, tx pgx.Tx) error {
			close(started)
			<-release
			return addEffect(ctx, l, tx, k)
		}, idem.WithLease(lease))
	}()
	testwait.Recv(t, started, "A's fn to start")
	// Let A's lease expire (shifting the stored times would wait for A's
	// row lock, which is the point of this test).
	time.Sleep(lease + 200*time.Millisecond)
	if rec, _, _ := l.Lookup(context.Background(), k); rec.Status != idem.StatusRunning || time.Since(rec.LeaseUntil) < 0 {
		t.Fatalf("A's record %+v: want running, lease expired", rec)
	}
	var res idem.Result
	bErr := make(chan error, 1)
	go func() {
		bErr <- l.RunTx(context.Background(), k, func(ctx context.Context, tx pgx.Tx) error {
			return addEffect(ctx, l, tx, k)
		}, idem.ReportTo(&res))
	}()
	select {
	case err := <-bErr:
		t.Fatalf("B returned while A's transaction runs: %v, outcome %v", err, res.Outcome)
	case <-time.After(300 * time.Millisecond):
	}
	close(release)
	if err := testwait.Recv(t, aErr, "A's RunTx to return once released"); err != nil {
		t.Fatalf("A: %v", err)
	}
	if err := testwait.Recv(t, bErr, "B's RunTx to return after A committed"); err != nil || res.Outcome != idem.AlreadyDone {
		t.Fatalf("B: %v, outcome %v; want AlreadyDone", err, res.Outcome)
	}
	if n := effects(t, l, k); n != 1 {
		t.Fatalf("effects %d, want 1", n)
	}
}

// TestRunTxRollback: fn's error reaches the caller (errors.Is/As find it)
// and nothing fn wrote stays; a crash before the commit leaves nothing
// either, and the next Run commits once.
func TestRunTxRollback(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	l := openLedger(t, pool)
	createEffects(t, l)
	ctx := context.Background()

	k := idem.Key{Job: "fails", Period: "2026-10-27"}
	bad := errors.New("ledger entry rejected")
	err := l.RunTx(ctx, k, func(ctx context.Context, tx pgx.Tx) error {
		if err := addEffect(ctx, l, tx, k); err != nil {
			return err
		}
		return idem.Permanent(bad)
	})
	if !errors.Is(err, bad) || !errors.Is(err, idem.ErrParked) {
		t.Fatalf("RunTx: %v; want ErrParked wrapping fn's error", err)
	}
	if n := effects(t, l, k); n != 0 {
		t.Fatalf("effects %d after a rolled-back attempt", n)
	}
	if err := l.Reset(ctx, k); err != nil {
		t.Fatal(err)
	}

	for _, p := range []idemstore.Point{idemstore.AfterClaim, idemstore.AfterFn} {
		k := idem.Key{Job: "crash-" + string(p), Period: "2026-10-27"}
		err := l.RunTx(idemtest.CrashAt(ctx, p), k, func(ctx context.Context, tx pgx.Tx) error { return addEffect(ctx, l, tx, k) })
		if !errors.Is(err, idemtest.ErrCrashed) {
			t.Fatalf("%s: %v", p, err)
		}
		if n := effects(t, l, k); n != 0 {
			t.Fatalf("%s: effects %d before the commit", p, n)
		}
		shift(t, l, idem.DefaultLease+time.Second)
		var res idem.Result
		if err := l.RunTx(ctx, k, func(ctx context.Context, tx pgx.Tx) error { return addEffect(ctx, l, tx, k) }, idem.ReportTo(&res)); err != nil || res.Outcome != idem.Ran {
			t.Fatalf("%s: recovery %v, %v", p, err, res.Outcome)
		}
		if n := effects(t, l, k); n != 1 {
			t.Fatalf("%s: effects %d, want 1", p, n)
		}
	}
}

// TestFencing: Renew, Finish and FinishTx of an attempt that no longer holds
// the key fail with ErrLeaseLost and change nothing.
func TestFencing(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	l := openLedger(t, pool)
	ctx := context.Background()
	k := idem.Key{Job: "fence", Period: "2026-10-27"}
	req := idemstore.ClaimRequest{Key: k, Owner: "a", Now: time.Now(), Lease: time.Minute}
	c1, err := l.Claim(ctx, req)
	if err != nil || c1.State != idemstore.ClaimAcquired || c1.Attempt != 1 {
		t.Fatalf("claim 1: %+v, %v", c1, err)
	}
	if c, err := l.Claim(ctx, req); err != nil || c.State != idemstore.ClaimBusy || c.Record.Owner != "a" {
		t.Fatalf("claim of a held key: %+v, %v", c, err)
	}
	shift(t, l, 2*time.Minute)
	req.Owner = "b"
	c2, err := l.Claim(ctx, req)
	if err != nil || c2.State != idemstore.ClaimAcquired || c2.Attempt != 2 || !c2.Doubt || c2.Record.Failures != 1 ||
		!strings.Contains(c2.Record.LastError, "attempt 1 by a abandoned") {
		t.Fatalf("claim after expiry: %+v, %v", c2, err)
	}
	if err := l.Renew(ctx, k, 1, time.Now(), time.Minute); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("renew of attempt 1: %v", err)
	}
	if err := l.Finish(ctx, k, 1, idemstore.End{Status: idem.StatusDone, Now: time.Now()}); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("finish of attempt 1: %v", err)
	}
	ran := false
	if err := l.FinishTx(ctx, k, 1, time.Now(), false, func(pgx.Tx) ([]byte, error) { ran = true; return nil, nil }); !errors.Is(err, idem.ErrLeaseLost) || ran {
		t.Fatalf("FinishTx of attempt 1: %v, fn ran %v", err, ran)
	}
	if err := l.Renew(ctx, k, 2, time.Now(), time.Minute); err != nil {
		t.Fatalf("renew of attempt 2: %v", err)
	}
	if err := l.Finish(ctx, k, 2, idemstore.End{Status: idem.StatusDone, Now: time.Now()}); err != nil {
		t.Fatalf("finish of attempt 2: %v", err)
	}
	if err := l.Finish(ctx, k, 2, idemstore.End{Status: idem.StatusDone, Now: time.Now()}); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("second finish: %v", err)
	}
	rec, _, _ := l.Lookup(ctx, k)
	if rec.Status != idem.StatusDone || rec.Attempt != 2 || rec.Owner != "b" || rec.Failures != 0 {
		t.Fatalf("record %+v", rec)
	}
}

// TestDatabaseClock: leases and backoffs run on the server's clock; the
// clients' clocks (ClaimRequest.Now, End.Now) do not move them.
func TestDatabaseClock(t *testing.T) {
	pool := newPool(t)
	l := openLedger(t, pool)
	ctx := context.Background()
	k := idem.Key{Job: "clock", Period: "2026-10-27"}
	var dbNow time.Time
	if err := pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&dbNow); err != nil {
		t.Fatal(err)
	}
	// A claimer whose clock is a year behind: the lease still ends a minute
	// after the server's now, and a claimer a year ahead finds it live.
	behind := dbNow.AddDate(-1, 0, 0)
	c, err := l.Claim(ctx, idemstore.ClaimRequest{Key: k, Owner: "behind", Now: behind, Lease: time.Minute})
	if err != nil || c.State != idemstore.ClaimAcquired {
		t.Fatal(c, err)
	}
	rec, _, _ := l.Lookup(ctx, k)
	if d := rec.LeaseUntil.Sub(dbNow); d < 50*time.Second || d > 70*time.Second {
		t.Fatalf("lease ends %v after the server's now, want about a minute", d)
	}
	ahead := dbNow.AddDate(1, 0, 0)
	c, err = l.Claim(ctx, idemstore.ClaimRequest{Key: k, Owner: "ahead", Now: ahead, Lease: time.Minute})
	if err != nil || c.State != idemstore.ClaimBusy {
		t.Fatalf("claim from a clock a year ahead: %+v, %v; want busy", c, err)
	}
	// The deadline it reports is on the claimer's clock.
	if d := c.Record.LeaseUntil.Sub(ahead); d < 50*time.Second || d > 70*time.Second {
		t.Fatalf("reported lease end %v after the claimer's now, want about a minute", d)
	}
	// A backoff of 1h from a finisher whose clock is a year behind.
	if err := l.Finish(ctx, k, 1, idemstore.End{Status: idem.StatusFailed, Now: behind, NotBefore: behind.Add(time.Hour), Failures: 1, Error: "x"}); err != nil {
		t.Fatal(err)
	}
	rec, _, _ = l.Lookup(ctx, k)
	if d := rec.NotBefore.Sub(dbNow); d < 59*time.Minute || d > 61*time.Minute {
		t.Fatalf("backoff ends %v after the server's now, want about an hour", d)
	}
	c, err = l.Claim(ctx, idemstore.ClaimRequest{Key: k, Owner: "ahead", Now: ahead, Lease: time.Minute})
	if err != nil || c.State != idemstore.ClaimBackingOff {
		t.Fatalf("claim during the backoff: %+v, %v", c, err)
	}
}

// TestResolve: ResolveDone, ResolveRetry and ResolveSkip, and what they
// refuse.
func TestResolve(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	l := openLedger(t, pool)
	ctx := context.Background()
	run := func(k idem.Key) (idem.Result, error) {
		var res idem.Result
		err := l.Run(ctx, k, func(context.Context) error { return nil }, idem.ReportTo(&res))
		return res, err
	}

	// Skip a key that has no record: Run finds it skipped, without running.
	k := idem.Key{Job: "r", Period: "2026-10-01"}
	if err := l.Resolve(ctx, k, idem.ResolveRetry); !errors.Is(err, idem.ErrNotResolvable) {
		t.Fatalf("retry of a key with no record: %v", err)
	}
	if err := l.Resolve(ctx, k, idem.ResolveSkip); err != nil {
		t.Fatal(err)
	}
	if res, err := run(k); err != nil || res.Outcome != idem.Skipped || res.Attempts != 0 {
		t.Fatalf("run of a skipped key: %v, %+v", err, res)
	}
	// A skipped key may be retried after all.
	if err := l.Resolve(ctx, k, idem.ResolveRetry); err != nil {
		t.Fatalf("retry of a skipped key: %v", err)
	}
	if res, err := run(k); err != nil || res.Outcome != idem.Ran {
		t.Fatalf("run after retry: %v, %+v", err, res)
	}
	for _, to := range []idem.Resolution{idem.ResolveDone, idem.ResolveRetry, idem.ResolveSkip} {
		if err := l.Resolve(ctx, k, to); !errors.Is(err, idem.ErrNotResolvable) {
			t.Fatalf("resolution %d of a done key: %v", to, err)
		}
	}

	// A live attempt's key is refused; once its lease expired, it is not.
	k = idem.Key{Job: "r", Period: "2026-10-02"}
	if c, err := l.Claim(ctx, idemstore.ClaimRequest{Key: k, Owner: "x", Now: time.Now(), Lease: time.Minute}); err != nil || c.State != idemstore.ClaimAcquired {
		t.Fatal(c, err)
	}
	if err := l.Resolve(ctx, k, idem.ResolveSkip); !errors.Is(err, idem.ErrNotResolvable) {
		t.Fatalf("resolve of a held key: %v", err)
	}
	shift(t, l, 2*time.Minute)
	if err := l.Resolve(ctx, k, idem.ResolveDone); err != nil {
		t.Fatalf("resolve after the lease expired: %v", err)
	}
	if res, err := run(k); err != nil || res.Outcome != idem.AlreadyDone {
		t.Fatalf("run of a key resolved done: %v, %+v", err, res)
	}
	if err := l.Resolve(ctx, idem.Key{Job: "r", Period: "x"}, 42); err == nil {
		t.Fatal("unknown resolution accepted")
	}
}

// TestNewerSchemaRefused: a schema two versions newer than SchemaVersion is
// refused with ErrNewerSchema, without a write: the ledger is opened through
// a read-only session, where any write would fail with another error.
func TestNewerSchemaRefused(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ctx := context.Background()
	l := openLedger(t, pool)
	newer := pgledger.SchemaVersion + 2
	if _, err := pool.Exec(ctx, `UPDATE `+table(l, "meta")+` SET value = $1 WHERE name = 'schema_version'`, newer); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(testDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on"
	ro, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if _, err := pgledger.New(ctx, ro, pgledger.WithSchema(l.Schema())); !errors.Is(err, idem.ErrNewerSchema) {
		t.Fatalf("New on a newer schema: %v, want ErrNewerSchema", err)
	}
	// Through a writable pool too, and the version stays.
	_, err = pgledger.New(ctx, pool, pgledger.WithSchema(l.Schema()))
	if !errors.Is(err, idem.ErrNewerSchema) {
		t.Fatalf("New on a newer schema: %v, want ErrNewerSchema", err)
	}
	if share := fmt.Sprintf("versions %d and %d may share a schema", newer-1, newer); !strings.Contains(err.Error(), share) {
		t.Fatalf("New on a newer schema: %v, want it to say %q", err, share)
	}
	var v int
	if err := pool.QueryRow(ctx, `SELECT value FROM `+table(l, "meta")).Scan(&v); err != nil || v != newer {
		t.Fatalf("version %d, %v", v, err)
	}

	// A schema that has only a newer meta table: nothing is created beside it.
	schema := uniqueName("idemtest_")
	dropSchemaLater(t, pool, schema)
	s := pgx.Identifier{schema}.Sanitize()
	if _, err := pool.Exec(ctx, `CREATE SCHEMA `+s+`; CREATE TABLE `+s+`.meta (name text PRIMARY KEY, value bigint NOT NULL);
		INSERT INTO `+s+`.meta VALUES ('schema_version', `+fmt.Sprint(pgledger.SchemaVersion+2)+`)`); err != nil {
		t.Fatal(err)
	}
	if _, err := pgledger.New(ctx, pool, pgledger.WithSchema(schema)); !errors.Is(err, idem.ErrNewerSchema) {
		t.Fatalf("New: %v, want ErrNewerSchema", err)
	}
	var tables int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = $1`, schema).Scan(&tables); err != nil || tables != 1 {
		t.Fatalf("%d tables in the schema (%v), want only meta", tables, err)
	}

	// The current version opens read-only: it needs no write at all.
	if _, err := pgledger.New(ctx, ro, pgledger.WithSchema(openLedger(t, pool).Schema())); err != nil {
		t.Fatalf("New of a current schema through a read-only session: %v", err)
	}
}

// TestSchemaCreationProcesses: 8 processes create the ledger at once
// against an empty database (or, without the right to create one, in a
// schema that does not exist yet); none fails.
func TestSchemaCreationProcesses(t *testing.T) {
	dsn := testDSN(t)
	child := func(arg string) {
		db, schema, _ := strings.Cut(arg, "|")
		startAt, schema, _ := strings.Cut(schema, "|")
		cfg, err := pgxpool.ParseConfig(dsn)
		if err == nil && db != "" {
			cfg.ConnConfig.Database = db
		}
		var at time.Time
		if err == nil {
			err = at.UnmarshalText([]byte(startAt))
		}
		if err != nil {
			fmt.Println(err)
			panic(err)
		}
		ctx := context.Background()
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err == nil {
			defer pool.Close()
			time.Sleep(time.Until(at)) // start together
			var l *pgledger.Ledger
			if l, err = pgledger.New(ctx, pool, pgledger.WithSchema(schema)); err == nil {
				err = l.Run(ctx, idem.Key{Job: "proc", Period: "2026-10-27"}, func(context.Context) error { return nil })
				if errors.Is(err, idem.ErrInProgress) {
					err = nil
				}
			}
		}
		if err != nil {
			fmt.Println("child:", err)
			panic(err)
		}
	}
	if idemtest.IsChild(t) {
		idemtest.Start(t, "", child) // does not return
	}
	pool := newPool(t)
	ctx := context.Background()
	db := uniqueName("idemtest_")
	if _, err := pool.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{db}.Sanitize()); err != nil {
		t.Logf("no database of its own (%v); using a new schema", err)
		db = ""
	} else {
		t.Cleanup(func() {
			if _, err := pool.Exec(context.Background(), `DROP DATABASE `+pgx.Identifier{db}.Sanitize()+` WITH (FORCE)`); err != nil {
				t.Errorf("drop database: %v", err)
			}
		})
	}
	schema := pgledger.DefaultSchema
	if db == "" {
		schema = uniqueName("idemtest_")
		dropSchemaLater(t, pool, schema)
	}
	at, _ := time.Now().Add(2 * time.Second).MarshalText()
	var children []*idemtest.Child
	for range 8 {
		children = append(children, idemtest.Start(t, db+"|"+string(at)+"|"+schema, child))
	}
	for i, c := range children {
		if e := c.Wait(); e.Killed || e.Code != 0 {
			t.Errorf("process %d: exit %d, killed %v:\n%s", i, e.Code, e.Killed, e.Output)
		}
	}
}

// TestPruneHorizonCursor: Prune deletes settled records up to the cursor and
// raises the horizon; a pruned period counts as done. Pruning beyond the
// cursor or over an unsettled record is refused, and deletes nothing.
func TestPruneHorizonCursor(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	l := openLedger(t, pool)
	ctx := context.Background()
	const job = "report"
	day := func(d int) idem.Key { return idem.Key{Job: job, Period: fmt.Sprintf("2026-10-%02d", d)} }
	calls := 0
	ok := func(context.Context) error { calls++; return nil }
	for d := 1; d <= 4; d++ {
		if err := l.Run(ctx, day(d), ok); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Resolve(ctx, day(5), idem.ResolveSkip); err != nil {
		t.Fatal(err)
	}
	// Day 6 fails and backs off: not settled.
	bctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	err := l.Run(bctx, day(6), func(context.Context) error { return errors.New("down") }, idem.WithBackoff(idem.Constant(time.Hour)))
	cancel()
	if !errors.Is(err, idem.ErrBackingOff) {
		t.Fatalf("failing run: %v", err)
	}
	if js, err := l.Job(ctx, job); err != nil || js != (idem.JobState{Job: job}) {
		t.Fatalf("Job before any cursor: %+v, %v", js, err)
	}
	if err := l.Advance(ctx, job, day(3).Period); err != nil {
		t.Fatal(err)
	}
	if err := l.Advance(ctx, job, day(2).Period); err != nil { // backwards: stays
		t.Fatal(err)
	}
	if js, _ := l.Job(ctx, job); js.Cursor != day(3).Period {
		t.Fatalf("cursor %q, want %q", js.Cursor, day(3).Period)
	}

	count := func() int {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+table(l, "runs")+` WHERE job = $1`, job).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// Beyond the cursor: refused, nothing deleted.
	if n, err := l.Prune(ctx, job, day(4).Period); !errors.Is(err, idem.ErrPruneRefused) || n != 0 || count() != 6 {
		t.Fatalf("prune beyond the cursor: %d, %v, %d records", n, err, count())
	}
	n, err := l.Prune(ctx, job, day(2).Period)
	if err != nil || n != 2 || count() != 4 {
		t.Fatalf("prune through day 2: %d, %v, %d records left", n, err, count())
	}
	if js, _ := l.Job(ctx, job); js.Horizon != day(2).Period || js.Cursor != day(3).Period {
		t.Fatalf("job %+v", js)
	}
	// A pruned period is done: Run does not call fn, Lookup says done,
	// Resolve refuses.
	var res idem.Result
	before := calls
	if err := l.Run(ctx, day(1), ok, idem.ReportTo(&res)); err != nil || res.Outcome != idem.AlreadyDone || calls != before {
		t.Fatalf("run of a pruned period: %v, %v, fn calls %d → %d", err, res.Outcome, before, calls)
	}
	if rec, found, err := l.Lookup(ctx, day(2)); err != nil || !found || rec.Status != idem.StatusDone {
		t.Fatalf("lookup of a pruned period: %+v, %v, %v", rec, found, err)
	}
	if err := l.Resolve(ctx, day(1), idem.ResolveRetry); !errors.Is(err, idem.ErrNotResolvable) {
		t.Fatalf("resolve of a pruned period: %v", err)
	}
	if c, err := l.Claim(ctx, idemstore.ClaimRequest{Key: day(1), Owner: "o", Now: time.Now(), Lease: time.Minute}); err != nil || c.State != idemstore.ClaimDone {
		t.Fatalf("claim of a pruned period: %+v, %v", c, err)
	}
	if count() != 4 {
		t.Fatalf("%d records after reading pruned periods, want 4 (no write)", count())
	}

	// Over an unsettled record: refused, nothing deleted.
	if err := l.Advance(ctx, job, day(9).Period); err != nil {
		t.Fatal(err)
	}
	if n, err := l.Prune(ctx, job, day(7).Period); !errors.Is(err, idem.ErrPruneRefused) || n != 0 || count() != 4 {
		t.Fatalf("prune over a failed record: %d, %v, %d records", n, err, count())
	}
	// Through the skipped day: it goes too.
	if n, err := l.Prune(ctx, job, day(5).Period); err != nil || n != 3 || count() != 1 {
		t.Fatalf("prune through day 5: %d, %v, %d records", n, err, count())
	}
	if js, _ := l.Job(ctx, job); js.Horizon != day(5).Period {
		t.Fatalf("horizon %q", js.Horizon)
	}
	// An earlier through leaves the horizon where it is.
	if n, err := l.Prune(ctx, job, day(1).Period); err != nil || n != 0 {
		t.Fatalf("prune through day 1 again: %d, %v", n, err)
	}
	if js, _ := l.Job(ctx, job); js.Horizon != day(5).Period {
		t.Fatalf("horizon %q after an earlier prune", js.Horizon)
	}
	// A job without a cursor can be pruned through any settled period.
	if err := l.Run(ctx, idem.Key{Job: "nocursor", Period: "p1"}, ok); err != nil {
		t.Fatal(err)
	}
	if n, err := l.Prune(ctx, "nocursor", "p9"); err != nil || n != 1 {
		t.Fatalf("prune of a job without a cursor: %d, %v", n, err)
	}
}

// TestCursor: a done mark with End.Cursor moves the job's cursor forward,
// in byte order (COLLATE "C": "B" sorts before "a"), never back.
func TestCursor(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	l := openLedger(t, pool)
	ctx := context.Background()
	finish := func(period string, cursor bool) {
		t.Helper()
		k := idem.Key{Job: "cur", Period: period}
		c, err := l.Claim(ctx, idemstore.ClaimRequest{Key: k, Owner: "o", Now: time.Now(), Lease: time.Minute})
		if err != nil || c.State != idemstore.ClaimAcquired {
			t.Fatal(c, err)
		}
		if err := l.Finish(ctx, k, c.Attempt, idemstore.End{Status: idem.StatusDone, Now: time.Now(), Cursor: cursor}); err != nil {
			t.Fatal(err)
		}
	}
	cursor := func() string {
		js, err := l.Job(ctx, "cur")
		if err != nil {
			t.Fatal(err)
		}
		return js.Cursor
	}
	finish("a0", false)
	if c := cursor(); c != "" {
		t.Fatalf("cursor %q after a done mark without Cursor", c)
	}
	finish("a", true)
	if c := cursor(); c != "a" {
		t.Fatalf("cursor %q, want a", c)
	}
	finish("b", true)
	if c := cursor(); c != "b" {
		t.Fatalf("cursor %q, want b", c)
	}
	finish("B", true) // "B" < "b" in byte order (not in most locales)
	if c := cursor(); c != "b" {
		t.Fatalf("cursor %q after an earlier period, want b", c)
	}
	if err := l.Advance(ctx, "cur", "B"); err != nil || cursor() != "b" {
		t.Fatalf("advance backwards: %v, cursor %q", err, cursor())
	}
	// A fenced-out finish does not move the cursor.
	k := idem.Key{Job: "cur", Period: "z"}
	if err := l.Finish(ctx, k, 7, idemstore.End{Status: idem.StatusDone, Cursor: true}); !errors.Is(err, idem.ErrLeaseLost) || cursor() != "b" {
		t.Fatalf("finish without a claim: %v, cursor %q", err, cursor())
	}
}

// TestOpen: Open owns its pool; options reach every Run; bad input is
// refused before anything is written.
func TestOpen(t *testing.T) {
	t.Parallel()
	dsn := testDSN(t)
	ctx := context.Background()
	schema := uniqueName("idemtest_")
	dropSchemaLater(t, newPool(t), schema)
	var results []idem.Result
	l, err := pgledger.Open(ctx, dsn, pgledger.WithSchema(schema),
		pgledger.WithRunOptions(idem.OnResult(func(r idem.Result) { results = append(results, r) })))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Run(ctx, idem.Key{Job: "open", Period: "1"}, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if len(results) != 1 || results[0].Outcome != idem.Ran {
		t.Fatalf("observer saw %+v", results)
	}
	if err := l.Run(ctx, idem.Key{Job: "", Period: "1"}, func(context.Context) error { return nil }); !errors.Is(err, idem.ErrInvalidKey) {
		t.Fatalf("invalid key: %v", err)
	}
	if _, err := l.Claim(ctx, idemstore.ClaimRequest{Key: idem.Key{Job: "a\x00", Period: "1"}}); !errors.Is(err, idem.ErrInvalidKey) {
		t.Fatalf("claim of an invalid key: %v", err)
	}
	if got := l.String(); !strings.Contains(got, schema) {
		t.Fatalf("String() = %q", got)
	}
	l.Close()
	if err := l.Pool().Ping(ctx); err == nil {
		t.Fatal("Open's pool still usable after Close")
	}
	// Invalid options match idem.ErrInvalidOption and name the option, as
	// idem's own do.
	if _, err := pgledger.New(ctx, newPool(t), pgledger.WithSchema("")); !errors.Is(err, idem.ErrInvalidOption) || !strings.Contains(err.Error(), `pgledger.WithSchema("")`) {
		t.Fatalf("empty schema name: %v; want ErrInvalidOption naming pgledger.WithSchema", err)
	}
	if _, err := pgledger.New(ctx, newPool(t), pgledger.WithSchema("s"), nil); !errors.Is(err, idem.ErrInvalidOption) || !strings.Contains(err.Error(), "option 2 of 2 is nil") {
		t.Fatalf("nil option: %v; want ErrInvalidOption naming its place", err)
	}
	if _, err := pgledger.Open(ctx, "postgres://idem@127.0.0.1:1/none?connect_timeout=2"); err == nil {
		t.Fatal("Open of an unreachable server succeeded")
	}
}

// TestList: records by job and status, in byte order, with a limit.
func TestList(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	l := openLedger(t, pool)
	ctx := context.Background()
	ok := func(context.Context) error { return nil }
	for _, k := range []idem.Key{{Job: "b", Period: "2"}, {Job: "a", Period: "b"}, {Job: "a", Period: "B"}, {Job: "b", Period: "1"}} {
		if err := l.Run(ctx, k, ok); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Resolve(ctx, idem.Key{Job: "b", Period: "3"}, idem.ResolveSkip); err != nil {
		t.Fatal(err)
	}
	keys := func(recs []idem.Record, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		var ks []string
		for _, r := range recs {
			ks = append(ks, r.Key.String()+"="+string(r.Status))
		}
		return strings.Join(ks, " ")
	}
	if got, want := keys(l.List(ctx, idem.Filter{})), "a/B=done a/b=done b/1=done b/2=done b/3=skipped"; got != want {
		t.Fatalf("List all = %s, want %s", got, want)
	}
	if got, want := keys(l.List(ctx, idem.Filter{Job: "b", Status: idem.StatusDone, Limit: 1})), "b/1=done"; got != want {
		t.Fatalf("List b done limit 1 = %s, want %s", got, want)
	}
	if got := keys(l.List(ctx, idem.Filter{Status: idem.StatusParked})); got != "" {
		t.Fatalf("List parked = %s, want none", got)
	}
}
