package pgledger_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/idemgo/idem"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// tripCounter counts a pool's round trips as pgx's tracer sees them: one
// per Exec, Query or QueryRow (BEGIN and COMMIT included), one per batch.
type tripCounter struct{ n atomic.Int64 }

func (c *tripCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (*tripCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *tripCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (*tripCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (*tripCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// tracedPool returns a pool on the test database whose round trips trips
// counts, closed when t ends.
func tracedPool(t *testing.T) (*pgxpool.Pool, *tripCounter) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	trips := &tripCounter{}
	cfg.ConnConfig.Tracer = trips
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, trips
}

// TestRunRoundTrips: a Run of a new key takes 2 round trips (the claim's
// batch, the done mark) while the ledger's recent claims found new keys,
// and a done key's trigger 1 (the status read) while they found done
// keys; a wrong guess costs one more, never another answer.
func TestRunRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, trips := tracedPool(t)
	l := openLedger(t, pool)
	run := func(k idem.Key) (int64, idem.Outcome) {
		t.Helper()
		var res idem.Result
		before := trips.n.Load()
		if err := l.Run(ctx, k, func(context.Context) error { return nil }, idem.ReportTo(&res)); err != nil {
			t.Fatalf("Run %s: %v", k, err)
		}
		return trips.n.Load() - before, res.Outcome
	}
	for i := range 3 { // warm the pool's connections: pgx prepares a statement once per connection
		run(idem.Key{Job: "warm", Period: string(rune('a' + i))})
	}
	var keys []idem.Key
	for i := range 10 {
		k := idem.Key{Job: "settle", Period: fmt.Sprintf("2026-10-%02d", i+1)}
		keys = append(keys, k)
		if n, o := run(k); n != 2 || o != idem.Ran {
			t.Fatalf("new key %s after new keys: %d round trips, %v; want 2, Ran", k, n, o)
		}
	}
	for i, k := range keys {
		n, o := run(k)
		if o != idem.AlreadyDone {
			t.Fatalf("done key %s: %v, want AlreadyDone", k, o)
		}
		if want := int64(1); i >= 8 && n != want || n > 2 {
			t.Fatalf("done key %s, %d done keys before it: %d round trips; want 1 after 8, at most 2 before", k, i, n)
		}
	}
	for i := range 4 {
		k := idem.Key{Job: "settle", Period: fmt.Sprintf("2026-11-%02d", i+1)}
		n, o := run(k)
		if o != idem.Ran || n > 3 {
			t.Fatalf("new key %s after done keys: %d round trips, %v; want at most 3, Ran", k, n, o)
		}
		if i >= 2 && n != 2 {
			t.Fatalf("new key %s, %d new keys before it: %d round trips; want 2", k, i, n)
		}
	}
}

// TestRunTxRoundTrips: a RunTx of a new key whose fn runs one statement
// takes 3 round trips in all, where it took 7 (the status read, the
// claim's batch, BEGIN, the fence, fn's statement, the done mark,
// COMMIT): one batch that commits the claim, begins fn's transaction and
// writes the done mark in it (the fence); fn's statement; COMMIT. A
// duplicate trigger takes 2 (the batch, whose claim finds the record and
// fails; ROLLBACK and the status read in one message, sent through
// pgconn, which pgx's tracer does not see: it counts 1). What each step
// still guarantees is proven elsewhere: TestRunTxRowLockKeepsOthersOut
// (the key seen running by another connection while fn runs; the row lock
// keeps a claimer out), TestKilledHolderTakenOverAtOnce/tx and
// TestRunTxRollback (a crash during fn leaves the attempt counted),
// TestFencing (a stale attempt's FinishTx changes nothing).
func TestRunTxRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, trips := tracedPool(t)
	l := openLedger(t, pool)
	createEffects(t, l)
	run := func(k idem.Key) (int64, idem.Outcome) {
		t.Helper()
		var res idem.Result
		before := trips.n.Load()
		err := l.RunTx(ctx, k, func(ctx context.Context, tx pgx.Tx) error {
			return addEffect(ctx, l, tx, k)
		}, idem.ReportTo(&res))
		if err != nil {
			t.Fatalf("RunTx %s: %v", k, err)
		}
		return trips.n.Load() - before, res.Outcome
	}
	// Warm the pool's connections (pgx prepares a statement the first
	// time a connection runs it: one more round trip).
	for i := range 3 {
		run(idem.Key{Job: "warm", Period: string(rune('a' + i))})
	}
	// fn's transaction, which commits the done mark, was begun by the
	// claim's COMMIT AND CHAIN: the claim's synchronous_commit off (a SET
	// LOCAL) must not carry over to it. (Checked outside the count.)
	var server, inFn string
	if err := pool.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&server); err != nil {
		t.Fatal(err)
	}
	err := l.RunTx(ctx, idem.Key{Job: "sync", Period: "2026-10-27"}, func(ctx context.Context, tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&inFn)
	})
	if err != nil || inFn != server {
		t.Fatalf("synchronous_commit in fn's transaction: %q (%v); want the server's %q", inFn, err, server)
	}
	k := idem.Key{Job: "settle", Period: "2026-10-27"}
	if n, o := run(k); n != 3 || o != idem.Ran {
		t.Errorf("new key: %d round trips, %v; want 3 (2 beside fn's one statement), Ran", n, o)
	}
	if n, o := run(k); n != 1 || o != idem.AlreadyDone {
		t.Errorf("duplicate: %d round trips seen by pgx, %v; want 1 (and one through pgconn), AlreadyDone", n, o)
	}
	if n := effects(t, l, k); n != 1 {
		t.Fatalf("effects %d, want 1", n)
	}
	rec, ok, err := l.Lookup(ctx, k)
	if err != nil || !ok || rec.Status != idem.StatusDone || rec.Attempt != 1 {
		t.Fatalf("record %+v, %v, %v; want done by attempt 1", rec, ok, err)
	}
}
