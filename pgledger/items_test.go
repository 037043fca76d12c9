package pgledger_test

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/pgledger"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

var points = idem.Key{Job: "daily_points", Period: "2026-10-27"}

// accounts streams n item ids without holding them.
func accounts(n int) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		for i := range n {
			if !yield(fmt.Sprintf("acct-%06d", i), nil) {
				return
			}
		}
	}
}

func accountList(n int) []string {
	var out []string
	for it := range accounts(n) {
		out = append(out, it)
	}
	return out
}

// shiftItems makes d pass for l's items, as shift does for its keys.
func shiftItems(t testing.TB, l *pgledger.Ledger, d time.Duration) {
	t.Helper()
	_, err := l.Pool().Exec(context.Background(), `UPDATE `+table(l, "items")+` SET
		lease_until = lease_until - $1::float8 * interval '1 microsecond',
		not_before = not_before - $1::float8 * interval '1 microsecond'`, float64(d/time.Microsecond))
	if err != nil {
		t.Fatalf("shift items: %v", err)
	}
}

func TestEachAppliesEveryItemOnce(t *testing.T) {
	l := openLedger(t, newPool(t))
	ctx := context.Background()
	var mu sync.Mutex
	applied := map[string]int{}
	var progress []idem.EachProgress
	res, err := idem.Each(ctx, l, points, accounts(1000), func(ctx context.Context, item string) error {
		info, _ := idem.InfoFrom(ctx)
		if info.Item != item || info.Key != points || info.RequestID == "" {
			t.Errorf("info %+v for %s", info, item)
		}
		mu.Lock()
		applied[item]++
		mu.Unlock()
		return nil
	}, idem.OnProgress(func(p idem.EachProgress) { progress = append(progress, p) }))
	if err != nil || res.Outcome != idem.Ran || res.Counts.Done != 1000 || !res.Counts.Sealed {
		t.Fatalf("Each: %v, %+v", err, res)
	}
	if len(applied) != 1000 {
		t.Fatalf("%d items applied, want 1000", len(applied))
	}
	for it, n := range applied {
		if n != 1 {
			t.Fatalf("%s applied %d times", it, n)
		}
	}
	last := progress[len(progress)-1]
	if last.Done != 1000 || last.Total != 1000 {
		t.Fatalf("last progress %+v", last)
	}
	for i := 1; i < len(progress); i++ {
		if progress[i].Done < progress[i-1].Done {
			t.Fatalf("progress went back: %+v", progress)
		}
	}
	if rec, ok, err := l.Lookup(ctx, points); err != nil || !ok || rec.Status != idem.StatusDone {
		t.Fatalf("period %+v, %v, %v", rec, ok, err)
	}
	// Again: the period is done; nothing runs, items are not generated.
	res, err = idem.Each(ctx, l, points, func(yield func(string, error) bool) { t.Error("items generated again") },
		func(context.Context, string) error { t.Error("ran again"); return nil })
	if err != nil || res.Outcome != idem.AlreadyDone || res.Counts.Done != 1000 {
		t.Fatalf("second Each: %v, %+v", err, res)
	}
}

// TestEachTxRollsBackFailedItem: in EachTx, an item whose fn fails leaves
// nothing behind while the rest of its batch commits; it is retried and,
// failing for good, parked.
func TestEachTxRollsBackFailedItem(t *testing.T) {
	l := openLedger(t, newPool(t))
	ctx := context.Background()
	granted := createGranted(t, l)
	calls := map[string]int{}
	res, err := idem.EachTx(ctx, l, points, accounts(50), func(ctx context.Context, tx pgx.Tx, item string) error {
		calls[item]++
		if err := grant(ctx, tx, granted, item); err != nil {
			return err
		}
		if item == "acct-000007" {
			return errors.New("account frozen") // after its write: the savepoint must undo it
		}
		return nil
	}, idem.WithWorkers(1), idem.WithBatch(20), idem.WithBackoff(idem.WithMaxAttempts(3, idem.Constant(time.Millisecond))))
	if err != nil || res.Counts.Done != 49 || res.Counts.Parked != 1 || !slices.Equal(res.Parked, []string{"acct-000007"}) {
		t.Fatalf("EachTx: %v, %+v", err, res)
	}
	if calls["acct-000007"] != 3 {
		t.Fatalf("poison item ran %d times, want 3", calls["acct-000007"])
	}
	got := grantedCounts(t, l, granted)
	if len(got) != 49 || got["acct-000007"] != 0 {
		t.Fatalf("%d items granted (poison: %d), want 49 and none", len(got), got["acct-000007"])
	}
	for it, n := range got {
		if n != 1 {
			t.Fatalf("%s granted %d times", it, n)
		}
	}
}

// TestEachTxCrashBeforeCommit: a crash at AfterFn (after the batch's fn
// calls, before the commit) leaves nothing; the next EachTx, once the
// leases expired, applies every item exactly once.
func TestEachTxCrashBeforeCommit(t *testing.T) {
	l := openLedger(t, newPool(t))
	ctx := context.Background()
	granted := createGranted(t, l)
	run := func(ctx context.Context) error {
		_, err := idem.EachTx(ctx, l, points, accounts(500), func(ctx context.Context, tx pgx.Tx, item string) error {
			return grant(ctx, tx, granted, item)
		}, idem.WithBatch(50), idem.WithWorkers(1))
		return err
	}
	fns := 0 // the 5th batch crashes after its fn calls
	crash := idemtest.CrashWhen(ctx, func(p idem.Point, _ idem.Key) bool {
		if p == idem.AfterFn {
			fns++
		}
		return fns == 5
	})
	if err := run(crash); !errors.Is(err, idemtest.ErrCrashed) {
		t.Fatalf("crash: %v", err)
	}
	c, err := l.CountItems(ctx, points)
	if err != nil || c.Running != 50 || c.Done != 200 || c.Pending != 250 {
		t.Fatalf("counts after the crash %+v, %v", c, err)
	}
	if got := grantedCounts(t, l, granted); int64(len(got)) != c.Done {
		t.Fatalf("%d items granted, %d done: the crashed batch left writes", len(got), c.Done)
	}
	shiftItems(t, l, 2*idem.DefaultLease)
	if err := run(ctx); err != nil {
		t.Fatalf("recovery: %v", err)
	}
	got := grantedCounts(t, l, granted)
	if len(got) != 500 {
		t.Fatalf("%d items granted, want 500", len(got))
	}
	for it, n := range got {
		if n != 1 {
			t.Fatalf("%s granted %d times", it, n)
		}
	}
}

// TestItemClaimsFenceAndLease: the ItemStore contract, claim by claim.
func TestItemClaimsFenceAndLease(t *testing.T) {
	l := openLedger(t, newPool(t))
	ctx := context.Background()
	items := accountList(10)
	if err := l.AddItems(ctx, points, items); err != nil {
		t.Fatal(err)
	}
	if err := l.AddItems(ctx, points, items[:3]); err != nil { // again: nothing added
		t.Fatal(err)
	}
	c, err := l.CountItems(ctx, points)
	if err != nil || c.Pending != 10 || c.Total() != 10 || c.Sealed {
		t.Fatalf("counts %+v, %v", c, err)
	}
	if err := l.SealItems(ctx, points); err != nil {
		t.Fatal(err)
	}
	claim := func(owner string, n int, takeUnknown bool) []idem.ItemClaim {
		t.Helper()
		cs, err := l.ClaimItems(ctx, points, idem.ItemClaimRequest{N: n, Owner: owner, Now: time.Now(), Lease: time.Minute, TakeUnknown: takeUnknown})
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	a := claim("a", 4, false)
	if len(a) != 4 || a[0].Item != items[0] || a[3].Item != items[3] || a[0].Attempt != 1 || a[0].Doubt {
		t.Fatalf("claim a: %+v", a)
	}
	b := claim("b", 100, false)
	if len(b) != 6 || b[0].Item != items[4] {
		t.Fatalf("claim b: %+v", b)
	}
	if more := claim("c", 100, true); len(more) != 0 {
		t.Fatalf("claimed held items: %+v", more)
	}
	// a: item 0 done, 1 failed (backoff 1h), 2 unknown, 3 parked.
	now := time.Now()
	lost, err := l.FinishItems(ctx, points, []idem.ItemEnd{
		{Item: items[0], Attempt: 1, Status: idem.StatusDone, Now: now},
		{Item: items[1], Attempt: 1, Status: idem.StatusFailed, Failures: 1, NotBefore: now.Add(time.Hour), Error: "down", Now: now},
		{Item: items[2], Attempt: 1, Status: idem.StatusUnknown, Error: "timeout", Now: now},
		{Item: items[3], Attempt: 1, Status: idem.StatusParked, Failures: 3, Error: "frozen", Now: now},
		{Item: items[4], Attempt: 7, Status: idem.StatusDone, Now: now}, // not a's: lost
	})
	if err != nil || !slices.Equal(lost, []string{items[4]}) {
		t.Fatalf("finish: lost %v, %v", lost, err)
	}
	if lost, err := l.FinishItems(ctx, points, []idem.ItemEnd{{Item: items[0], Attempt: 1, Status: idem.StatusDone, Now: now}}); err != nil || len(lost) != 1 {
		t.Fatalf("second finish of a done item: lost %v, %v", lost, err)
	}
	c, err = l.CountItems(ctx, points)
	if err != nil || !c.Sealed || c.Done != 1 || c.Failed != 1 || c.Unknown != 1 || c.Parked != 1 || c.Running != 6 {
		t.Fatalf("counts %+v, %v", c, err)
	}
	// NextRetry is on this process's clock: about an hour from now.
	if d := time.Until(c.NextRetry); d < 59*time.Minute || d > 61*time.Minute {
		t.Fatalf("NextRetry in %v, want about an hour", d)
	}
	// The unknown item only with TakeUnknown, in doubt.
	if u := claim("c", 100, false); len(u) != 0 {
		t.Fatalf("claim without TakeUnknown: %+v", u)
	}
	u := claim("c", 100, true)
	if len(u) != 1 || u[0].Item != items[2] || !u[0].Doubt || u[0].Attempt != 2 || u[0].Failures != 0 {
		t.Fatalf("claim of the unknown item: %+v", u)
	}
	// b's leases expire, and the failed item's backoff passes.
	shiftItems(t, l, 2*time.Hour)
	d := claim("d", 100, false)
	if len(d) != 8 { // the failed item, b's 6 and c's
		t.Fatalf("claim after expiry: %+v", d)
	}
	for _, cl := range d {
		switch cl.Item {
		case items[1]:
			if cl.Doubt || cl.Attempt != 2 || cl.Failures != 1 {
				t.Fatalf("retry of the failed item: %+v", cl)
			}
		default:
			if !cl.Doubt || cl.Attempt != 2 && cl.Item != items[2] || cl.Failures != 1 {
				t.Fatalf("takeover of an expired item: %+v", cl)
			}
		}
	}
	var lastErr string
	if err := l.Pool().QueryRow(ctx, `SELECT last_error FROM `+table(l, "items")+` WHERE item = $1`, items[5]).Scan(&lastErr); err != nil ||
		!strings.Contains(lastErr, "attempt 1 by b abandoned") {
		t.Fatalf("last error of a taken-over item %q, %v", lastErr, err)
	}
	// b's attempts are fenced out.
	if lost, err := l.FinishItems(ctx, points, []idem.ItemEnd{{Item: items[5], Attempt: 1, Status: idem.StatusDone, Now: now}}); err != nil || len(lost) != 1 {
		t.Fatalf("finish of a taken-over attempt: lost %v, %v", lost, err)
	}
	ran := 0
	failed, lost, err := l.FinishItemsTx(ctx, points, []idem.ItemClaim{{Item: items[5], Attempt: 1}, {Item: items[6], Attempt: 2}}, now,
		func(tx pgx.Tx, c idem.ItemClaim) error { ran++; return nil })
	if err != nil || len(failed) != 0 || !slices.Equal(lost, []string{items[5]}) || ran != 1 {
		t.Fatalf("FinishItemsTx with a stale claim: failed %v, lost %v, %v, fn ran %d", failed, lost, err, ran)
	}
	if _, err := l.FinishItems(ctx, points, []idem.ItemEnd{{Item: items[1], Attempt: 2, Status: "pending"}}); err == nil {
		t.Fatal("an end with status pending accepted")
	}
}

// TestItemsDatabaseClock: item leases and backoffs run on the server's
// clock, whatever the clients' clocks say.
func TestItemsDatabaseClock(t *testing.T) {
	l := openLedger(t, newPool(t))
	ctx := context.Background()
	if err := l.AddItems(ctx, points, []string{"x"}); err != nil {
		t.Fatal(err)
	}
	behind := time.Now().AddDate(-1, 0, 0)
	cs, err := l.ClaimItems(ctx, points, idem.ItemClaimRequest{N: 1, Owner: "behind", Now: behind, Lease: time.Minute})
	if err != nil || len(cs) != 1 {
		t.Fatal(cs, err)
	}
	var lease time.Duration
	scanSpan := func(col string) time.Duration {
		var us float64
		if err := l.Pool().QueryRow(ctx, `SELECT extract(epoch FROM `+col+` - clock_timestamp()) * 1e6 FROM `+table(l, "items")).Scan(&us); err != nil {
			t.Fatal(err)
		}
		return time.Duration(us) * time.Microsecond
	}
	if lease = scanSpan("lease_until"); lease < 50*time.Second || lease > 70*time.Second {
		t.Fatalf("lease ends %v after the server's now, want about a minute", lease)
	}
	if again, err := l.ClaimItems(ctx, points, idem.ItemClaimRequest{N: 1, Owner: "ahead", Now: time.Now().AddDate(1, 0, 0), Lease: time.Minute}); err != nil || len(again) != 0 {
		t.Fatalf("claim from a clock a year ahead: %+v, %v", again, err)
	}
	if _, err := l.FinishItems(ctx, points, []idem.ItemEnd{{Item: "x", Attempt: 1, Status: idem.StatusFailed, Failures: 1,
		Now: behind, NotBefore: behind.Add(time.Hour), Error: "down"}}); err != nil {
		t.Fatal(err)
	}
	if nb := scanSpan("not_before"); nb < 59*time.Minute || nb > 61*time.Minute {
		t.Fatalf("backoff ends %v after the server's now, want about an hour", nb)
	}
}

// TestClaimItemsConcurrent: 8 claimers on two pools ("hosts") take disjoint
// items until none is left.
func TestClaimItemsConcurrent(t *testing.T) {
	p1, p2 := newPool(t), newPool(t)
	l1 := openLedger(t, p1)
	l2, err := pgledger.New(context.Background(), p2, pgledger.WithSchema(l1.Schema()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := l1.AddItems(ctx, points, accountList(2000)); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	owner := map[string]int{}
	var wg sync.WaitGroup
	for w := range 8 {
		l := []*pgledger.Ledger{l1, l2}[w%2]
		wg.Go(func() {
			for {
				cs, err := l.ClaimItems(ctx, points, idem.ItemClaimRequest{N: 37, Owner: fmt.Sprint(w), Lease: time.Minute})
				if err != nil {
					t.Error(err)
					return
				}
				if len(cs) == 0 {
					return
				}
				mu.Lock()
				for _, c := range cs {
					if prev, ok := owner[c.Item]; ok {
						t.Errorf("%s claimed by %d and %d", c.Item, prev, w)
					}
					owner[c.Item] = w
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(owner) != 2000 {
		t.Fatalf("%d items claimed, want 2000", len(owner))
	}
}

// TestUpgradeFromVersion1: a schema written by pgledger's version 1 (no
// items tables) is upgraded in place; its records stay.
func TestUpgradeFromVersion1(t *testing.T) {
	pool := newPool(t)
	ctx := context.Background()
	l := openLedger(t, pool)
	k := idem.Key{Job: "old", Period: "2026-10-26"}
	if err := l.Run(ctx, k, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	// Back to version 1: what pgledger 1 created.
	if _, err := pool.Exec(ctx, `DROP TABLE `+table(l, "items")+`, `+table(l, "itemsets")+`;
		UPDATE `+table(l, "meta")+` SET value = 1 WHERE name = 'schema_version'`); err != nil {
		t.Fatal(err)
	}
	// Several processes' worth of New at once.
	var wg sync.WaitGroup
	ls := make([]*pgledger.Ledger, 4)
	for i := range ls {
		wg.Go(func() {
			p, err := pgxpool.New(ctx, testDSN(t))
			if err != nil {
				t.Error(err)
				return
			}
			t.Cleanup(p.Close)
			if ls[i], err = pgledger.New(ctx, p, pgledger.WithSchema(l.Schema())); err != nil {
				t.Errorf("New on a version-1 schema: %v", err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	var v int
	if err := pool.QueryRow(ctx, `SELECT value FROM `+table(l, "meta")+` WHERE name = 'schema_version'`).Scan(&v); err != nil || v != pgledger.SchemaVersion {
		t.Fatalf("version %d, %v; want %d", v, err, pgledger.SchemaVersion)
	}
	if rec, ok, err := ls[0].Lookup(ctx, k); err != nil || !ok || rec.Status != idem.StatusDone {
		t.Fatalf("old record %+v, %v, %v", rec, ok, err)
	}
	res, err := idem.Each(ctx, ls[1], points, accounts(10), func(context.Context, string) error { return nil })
	if err != nil || res.Outcome != idem.Ran || res.Counts.Done != 10 {
		t.Fatalf("Each on the upgraded schema: %v, %+v", err, res)
	}
}

// createGranted creates the business table of the EachTx tests in l's
// schema and returns its name.
func createGranted(t testing.TB, l *pgledger.Ledger) string {
	t.Helper()
	name := table(l, "granted")
	if _, err := l.Pool().Exec(context.Background(), `CREATE TABLE IF NOT EXISTS `+name+` (item text PRIMARY KEY, n int NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return name
}

// grant is the EachTx tests' business write: NOT idempotent on purpose, so
// that a second application shows as n = 2.
func grant(ctx context.Context, tx pgx.Tx, granted, item string) error {
	_, err := tx.Exec(ctx, `INSERT INTO `+granted+` AS g (item, n) VALUES ($1, 1) ON CONFLICT (item) DO UPDATE SET n = g.n + 1`, item)
	return err
}

func grantedCounts(t testing.TB, l *pgledger.Ledger, granted string) map[string]int {
	t.Helper()
	rows, err := l.Pool().Query(context.Background(), `SELECT item, n FROM `+granted)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	var it string
	var n int
	if _, err := pgx.ForEachRow(rows, []any{&it, &n}, func() error { got[it] = n; return nil }); err != nil {
		t.Fatal(err)
	}
	return got
}
