package pgledger_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/testwait"
	"github.com/idemgo/idem/pgledger"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The period's done mark of idem.Each (MarkFresh): once a period's items
// are settled, one write marks it done; the holders that lose the race
// find it done; a record already there (another holder's) is claimed the
// usual way.

// writesOfRuns returns the statements sent that write the runs table.
func (l *sqlLog) writesOfRuns() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var w []string
	for _, q := range l.sql {
		one := strings.Join(strings.Fields(q), " ")
		if (strings.HasPrefix(one, "INSERT INTO") || strings.HasPrefix(one, "UPDATE")) && strings.Contains(one, `".runs`) {
			w = append(w, one)
		}
	}
	return w
}

// limited is a context that ends at the test's deadline (testwait.Limit),
// so that an Each that never returns fails the test instead of hanging it.
func limited(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Limit(t))
	t.Cleanup(cancel)
	return ctx
}

// periodRecord returns key's record in l, failing t if it has none.
func periodRecord(t testing.TB, l idem.Store, key idem.Key) idemstore.Record {
	t.Helper()
	rec, ok, err := l.Lookup(context.Background(), key)
	if err != nil || !ok {
		t.Fatalf("record of %s: found %v, %v", key, ok, err)
	}
	return rec
}

// TestEachMarksThePeriodInOneWrite: the period's done mark is one INSERT
// of the record as done, attempt 1: no claim of the period before it, no
// UPDATE after it.
func TestEachMarksThePeriodInOneWrite(t *testing.T) {
	t.Parallel()
	ctx := limited(t)
	pool, log := loggedPool(t, testDSN(t))
	l := openLedger(t, pool)
	var applied atomic.Int64
	res, err := idem.Each(ctx, l, points, accounts(300), func(context.Context, string) error {
		applied.Add(1)
		return nil
	}, idem.WithParams(map[string]string{"points": "10"}))
	if err != nil || res.Outcome != idem.Ran || applied.Load() != 300 {
		t.Fatalf("Each: %v, %v, %d items applied; want nil, Ran, 300", err, res.Outcome, applied.Load())
	}
	w := log.writesOfRuns()
	if len(w) != 1 || !strings.Contains(w[0], "'done'") {
		t.Fatalf("the writes of the runs table: %q; want one INSERT of the record as done", w)
	}
	rec := periodRecord(t, l, points)
	if rec.Status != idemstore.StatusDone || rec.Attempt != 1 || rec.Fingerprint == "" || rec.Owner == "" {
		t.Fatalf("the period's record %+v; want done, attempt 1, with the params' fingerprint and an owner", rec)
	}
	// A second Each finds it done, and writes nothing.
	if res, err := idem.Each(ctx, l, points, accounts(300), func(context.Context, string) error {
		t.Error("an item ran again")
		return nil
	}, idem.WithParams(map[string]string{"points": "10"})); err != nil || res.Outcome != idem.AlreadyDone {
		t.Fatalf("second Each: %v, %v; want AlreadyDone", err, res.Outcome)
	}
	if w := log.writesOfRuns(); len(w) != 1 {
		t.Fatalf("the second Each wrote the runs table: %q", w[1:])
	}
}

// TestEachMark: idem.Each's period mark (MarkFresh) with four hosts at
// once, beside a holder of the period, and stopped before it writes
// (idemtest.TestEachMark), on a pgx pool and on each database/sql driver.
func TestEachMark(t *testing.T) {
	eachPool(t, func(t *testing.T, driver string) {
		idemtest.TestEachMark(t, func(t *testing.T, n int) []idem.Store {
			var hosts []idem.Store
			schema := ""
			for i := range n {
				h := openAs(t, driver, schema, fmt.Sprintf("mark-%d", i), 2)
				schema = h.Schema()
				hosts = append(hosts, h)
			}
			return hosts
		})
	})
}

// TestEmptyClaimRoundTrips: a claim that finds no work is one round trip
// while the period has no records of single items, and two once it has
// one (the single items' statement runs too); either way it claims
// nothing that is not runnable.
func TestEmptyClaimRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := limited(t)
	pool, trips := tracedPool(t)
	l := openLedger(t, pool)
	if err := l.AddItems(ctx, points, []string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	if err := l.SealItems(ctx, points); err != nil {
		t.Fatal(err)
	}
	empty := func(what string) int64 {
		t.Helper()
		before := trips.n.Load()
		if b := claimer(t, l, "w", time.Minute)(10, false); b.Chunk != 0 || len(b.Items) != 0 {
			t.Fatalf("%s: claimed %+v, want nothing", what, b)
		}
		return trips.n.Load() - before
	}
	b := claimer(t, l, "w", time.Minute)(10, false)
	if b.Chunk == 0 || len(b.Items) != 2 {
		t.Fatalf("claim: %+v", b)
	}
	if n := empty("the chunk held"); n != 1 {
		t.Fatalf("a claim that found the only chunk held: %d round trips, want 1", n)
	}
	now := time.Now()
	if lost, err := l.FinishItems(ctx, points, step(b, 0, 0, time.Minute), []idemstore.ItemEnd{
		{Item: "a", Attempt: b.Attempt, Status: idem.StatusDone, Now: now},
		{Item: "b", Attempt: b.Attempt, Status: idem.StatusFailed, Failures: 1, NotBefore: now.Add(time.Hour), Error: "down", Now: now},
	}); err != nil || len(lost) != 0 {
		t.Fatalf("finish: lost %v, %v", lost, err)
	}
	if n := empty("an item backing off"); n != 2 {
		t.Fatalf("a claim beside a record backing off: %d round trips, want 2", n)
	}
}

// TestEachMarkLoserOneRoundTrip: a holder whose mark finds the period
// marked by another (a moment before, between its last count and its
// mark) returns Ran after one round trip for the mark, and writes nothing
// to the record.
func TestEachMarkLoserOneRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := limited(t)
	pool, trips := tracedPool(t)
	b := openLedger(t, pool)
	a, err := pgledger.New(ctx, newPool(t), pgledger.WithSchema(b.Schema()))
	if err != nil {
		t.Fatal(err)
	}
	var marked atomic.Int64 // b's round trips when a's mark was in
	hook := idemstore.WithTrace(ctx, &idemstore.Trace{Checkpoint: func(_ context.Context, at idemstore.Point, k idem.Key) error {
		if at == idemstore.BeforeClaim && k == points && marked.Load() == 0 { // b's mark is next: a marks first
			done, err := a.MarkFresh(ctx, idemstore.ClaimRequest{Key: points, Owner: "host-a", Now: time.Now(), Lease: time.Minute})
			if !done || err != nil {
				t.Errorf("a's mark: %v, %v", done, err)
			}
			marked.Store(trips.n.Load())
		}
		return nil
	}})
	res, err := idem.Each(hook, b, points, accounts(20), func(context.Context, string) error { return nil })
	if err != nil || res.Outcome != idem.Ran {
		t.Fatalf("b's Each: %v, %v; want nil, Ran", err, res.Outcome)
	}
	if marked.Load() == 0 {
		t.Fatal("b's Each never came to its mark")
	}
	if n := trips.n.Load() - marked.Load(); n != 1 {
		t.Fatalf("b's mark took %d round trips, want 1", n)
	}
	if rec := periodRecord(t, b, points); rec.Owner != "host-a" || rec.Attempt != 1 || rec.Status != idemstore.StatusDone {
		t.Fatalf("record %+v; want a's mark, unchanged", rec)
	}
}

// TestMarkFreshGivesUpOnAHeldRow: MarkFresh does not wait for a
// transaction that holds the key's row (a RunTx whose fn runs) beyond its
// lock timeout: it returns the lock error, and the record is left as the
// holder has it.
func TestMarkFreshGivesUpOnAHeldRow(t *testing.T) {
	t.Parallel()
	ctx := limited(t)
	l := openLedger(t, newPool(t))
	entered, release := make(chan struct{}), make(chan struct{})
	ran := make(chan error, 1)
	go func() {
		ran <- l.RunTx(ctx, points, func(context.Context, pgx.Tx) error {
			close(entered)
			<-release
			return nil
		})
	}()
	testwait.Recv(t, entered, "the RunTx's fn to start")
	done, err := l.MarkFresh(ctx, idemstore.ClaimRequest{Key: points, Owner: "marker", Now: time.Now(), Lease: time.Minute})
	close(release)
	var pgErr *pgconn.PgError
	if done || !errors.As(err, &pgErr) || pgErr.Code != "55P03" {
		t.Fatalf("MarkFresh beside a RunTx holding the row: %v, %v; want false and lock_not_available (55P03)", done, err)
	}
	if err := testwait.Recv(t, ran, "the RunTx to return"); err != nil {
		t.Fatalf("RunTx: %v", err)
	}
	if rec := periodRecord(t, l, points); rec.Owner == "marker" || rec.Status != idemstore.StatusDone || rec.Attempt != 1 {
		t.Fatalf("record %+v; want the RunTx's attempt 1, done", rec)
	}
}

// TestEachBackoffWaitOnAClockOfItsOwn: Each waits for an item's backoff
// the duration the server has left of it, whatever clock its calls run on.
// The calls run on a fake clock years behind the server's; CountItems gives
// NextRetry on this process's time.Now(), with that time.Now() beside it
// (ItemCounts.Now). Measured against the fake clock, NextRetry lay years
// ahead, and Each slept that long on it: one minute and a second on the fake
// clock (and on the server's, moved by shift) did not wake it.
func TestEachBackoffWaitOnAClockOfItsOwn(t *testing.T) {
	t.Parallel()
	clk := idemtest.NewClock(time.Date(2020, 3, 1, 9, 0, 0, 0, time.UTC))
	l := openLedger(t, newPool(t), pgledger.WithRunOptions(idem.WithClock(clk)))
	ctx := limited(t)
	key := idem.Key{Job: "backoff-clock", Period: "2026-10-27"}
	var calls atomic.Int32
	type result struct {
		res idem.EachResult
		err error
	}
	out := make(chan result, 1)
	go func() {
		res, err := idem.Each(ctx, l, key, idem.Items(slices.Values([]string{"acct-1"})), func(context.Context, string) error {
			if calls.Add(1) == 1 {
				return idem.NothingHappened(errors.New("downstream busy"))
			}
			return nil
		}, idem.WithBackoff(idem.Constant(time.Minute)))
		out <- result{res, err}
	}()
	// Each sleeps on the fake clock for the backoff; one minute and a
	// second later (on the server's clock too) it runs the item again.
	clk.BlockUntil(1)
	shift(t, l, time.Minute+time.Second)
	clk.Advance(time.Minute + time.Second)
	select {
	case r := <-out:
		if r.err != nil || r.res.Outcome != idem.Ran || calls.Load() != 2 {
			t.Fatalf("Each: %v, %+v after %d calls; want Ran after 2", r.err, r.res, calls.Load())
		}
	case <-ctx.Done():
		t.Fatalf("Each still waiting at the test's deadline after the backoff (a minute) passed on both clocks; %d timers pending on the fake clock", clk.Waiters())
	}
}
