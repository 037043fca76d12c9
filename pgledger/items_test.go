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
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/testwait"
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

// shiftItems makes d pass for l's items (their chunks' leases, their
// records' leases and backoffs), as shift does for its keys.
func shiftItems(t testing.TB, l *pgledger.Ledger, d time.Duration) {
	t.Helper()
	for _, q := range []string{
		`UPDATE ` + table(l, "item_chunks") + ` SET lease_until = lease_until - $1::float8 * interval '1 microsecond'`,
		`UPDATE ` + table(l, "item_state") + ` SET lease_until = lease_until - $1::float8 * interval '1 microsecond',
			not_before = not_before - $1::float8 * interval '1 microsecond'`,
	} {
		if _, err := l.Pool().Exec(context.Background(), q, float64(d/time.Microsecond)); err != nil {
			t.Fatalf("shift items: %v", err)
		}
	}
}

func TestEachAppliesEveryItemOnce(t *testing.T) {
	t.Parallel()
	l := openLedger(t, newPool(t))
	ctx := context.Background()
	var mu sync.Mutex
	applied := map[string]int{}
	var progress []idem.Progress
	res, err := idem.Each(ctx, l, points, accounts(1000), func(ctx context.Context, item string) error {
		info, _ := idem.InfoFrom(ctx)
		if info.Item != item || info.Key != points || info.RequestID == "" {
			t.Errorf("info %+v for %s", info, item)
		}
		mu.Lock()
		applied[item]++
		mu.Unlock()
		return nil
	}, idem.OnProgress(func(p idem.Progress) { progress = append(progress, p) }))
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
	t.Parallel()
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
	}, idem.WithWorkers(1), idem.WithBatch(20), idem.WithBackoff(idem.MaxAttempts(3, idem.Constant(time.Millisecond))))
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
	t.Parallel()
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
	crash := idemtest.CrashWhen(ctx, func(p idemstore.Point, _ idem.Key) bool {
		if p == idemstore.AfterFn {
			fns++
		}
		return fns == 5
	})
	if err := run(crash); !errors.Is(err, idemtest.ErrCrashed) {
		t.Fatalf("crash: %v", err)
	}
	// The 500 items are one chunk (one AddItems), worked in windows of 50:
	// 4 windows done, the rest held by the dead attempt's lease.
	c, err := l.CountItems(ctx, points)
	if err != nil || c.Running != 300 || c.Done != 200 || c.Pending != 0 {
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

// claimer claims work of points from l for owner, with a lease.
func claimer(t testing.TB, l *pgledger.Ledger, owner string, lease time.Duration) func(n int, takeUnknown bool) idemstore.ItemBatch {
	return func(n int, takeUnknown bool) idemstore.ItemBatch {
		t.Helper()
		b, err := l.ClaimItems(context.Background(), points, idemstore.ItemClaimRequest{N: n, Owner: owner, Now: time.Now(), Lease: lease, TakeUnknown: takeUnknown})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
}

// claimedItems lists a batch's items.
func claimedItems(b idemstore.ItemBatch) []string {
	var out []string
	for _, c := range b.Items {
		out = append(out, c.Item)
	}
	return out
}

// doneEnds are done ends of a batch's claims.
func doneEnds(claims []idemstore.ItemClaim) []idemstore.ItemEnd {
	var ends []idemstore.ItemEnd
	for _, c := range claims {
		ends = append(ends, idemstore.ItemEnd{Item: c.Item, Attempt: c.Attempt, Status: idem.StatusDone, Now: time.Now()})
	}
	return ends
}

// step is the step of a window of batch b starting at position from.
func step(b idemstore.ItemBatch, from, next int, lease time.Duration) idemstore.ItemStep {
	now := time.Now()
	return idemstore.ItemStep{Chunk: b.Chunk, Attempt: b.Attempt, From: from, Next: next, Now: now, LeaseUntil: now.Add(lease)}
}

func checkCounts(t testing.TB, l *pgledger.Ledger, want idem.ItemCounts) idem.ItemCounts {
	t.Helper()
	c, err := l.CountItems(context.Background(), points)
	if err != nil {
		t.Fatal(err)
	}
	got := c
	got.NextRetry, got.Now = time.Time{}, time.Time{}
	if got != want {
		t.Fatalf("counts %+v, want %+v", got, want)
	}
	return c
}

// TestItemClaimsFenceAndLease: the ItemStore contract, claim by claim:
// chunks, their windows, the records of items that did not end done, and
// single items.
func TestItemClaimsFenceAndLease(t *testing.T) {
	t.Parallel()
	l := openLedger(t, newPool(t))
	ctx := context.Background()
	items := accountList(12)
	if err := l.AddItems(ctx, points, items[:10]); err != nil { // chunk 1
		t.Fatal(err)
	}
	if err := l.AddItems(ctx, points, items[:3]); err != nil { // again: nothing added
		t.Fatal(err)
	}
	// Chunk 2: the new items in the order given, a duplicate once.
	if err := l.AddItems(ctx, points, []string{items[11], items[9], items[10], items[11]}); err != nil {
		t.Fatal(err)
	}
	checkCounts(t, l, idem.ItemCounts{Pending: 12})
	if err := l.SealItems(ctx, points); err != nil {
		t.Fatal(err)
	}
	if err := l.AddItems(ctx, points, []string{"late"}); err != nil { // sealed: nothing added
		t.Fatal(err)
	}
	checkCounts(t, l, idem.ItemCounts{Sealed: true, Pending: 12})

	a := claimer(t, l, "a", time.Minute)(4, false)
	if a.Chunk != 1 || a.Attempt != 1 || a.Pos != 0 || !slices.Equal(claimedItems(a), items[:10]) || a.Items[0].Doubt || a.Items[0].Attempt != 1 {
		t.Fatalf("claim a: %+v", a)
	}
	b := claimer(t, l, "b", time.Minute)(100, false)
	if b.Chunk != 2 || b.Attempt != 1 || !slices.Equal(claimedItems(b), []string{items[11], items[10]}) {
		t.Fatalf("claim b: %+v", b)
	}
	if more := claimer(t, l, "c", time.Minute)(100, true); more.Chunk != 0 || len(more.Items) != 0 {
		t.Fatalf("claimed held work: %+v", more)
	}

	// a's first window: item 0 done, 1 failed (backoff 1h), 2 unknown, 3 parked.
	now := time.Now()
	win := step(a, 0, 4, time.Minute)
	ends := []idemstore.ItemEnd{
		{Item: items[0], Attempt: 1, Status: idem.StatusDone, Now: now},
		{Item: items[1], Attempt: 1, Status: idem.StatusFailed, Failures: 1, NotBefore: now.Add(time.Hour), Error: "down", Now: now},
		{Item: items[2], Attempt: 1, Status: idem.StatusUnknown, Error: "timeout", Now: now},
		{Item: items[3], Attempt: 1, Status: idem.StatusParked, Failures: 3, Error: "frozen", Now: now},
	}
	if lost, err := l.FinishItems(ctx, points, win, ends); err != nil || len(lost) != 0 {
		t.Fatalf("finish: lost %v, %v", lost, err)
	}
	// The same window again: the chunk moved on; nothing is written.
	if lost, err := l.FinishItems(ctx, points, win, ends); err != nil || !slices.Equal(lost, items[:4]) {
		t.Fatalf("second finish of a window: lost %v, %v", lost, err)
	}
	// Another attempt's window: fenced out.
	wrong := step(a, 4, 0, time.Minute)
	wrong.Attempt = 7
	if lost, err := l.FinishItems(ctx, points, wrong, []idemstore.ItemEnd{{Item: items[4], Attempt: 7, Status: idem.StatusDone, Now: now}}); err != nil || !slices.Equal(lost, items[4:5]) {
		t.Fatalf("finish of another attempt: lost %v, %v", lost, err)
	}
	c := checkCounts(t, l, idem.ItemCounts{Sealed: true, Running: 8, Failed: 1, Done: 1, Unknown: 1, Parked: 1})
	// NextRetry is on this process's clock: about an hour from now.
	if d := time.Until(c.NextRetry); d < 59*time.Minute || d > 61*time.Minute {
		t.Fatalf("NextRetry in %v, want about an hour", d)
	}
	var records int
	if err := l.Pool().QueryRow(ctx, `SELECT count(*) FROM `+table(l, "item_state")+` WHERE chunk = 1`).Scan(&records); err != nil || records != 3 {
		t.Fatalf("%d records of chunk 1's items, %v; want 3 (the items that did not end done)", records, err)
	}

	// The unknown item only with TakeUnknown, as a single item in doubt.
	if u := claimer(t, l, "c", time.Minute)(100, false); len(u.Items) != 0 {
		t.Fatalf("claim without TakeUnknown: %+v", u)
	}
	u := claimer(t, l, "c", time.Minute)(100, true)
	if u.Chunk != 0 || len(u.Items) != 1 || u.Items[0].Item != items[2] || !u.Items[0].Doubt || u.Items[0].Attempt != 2 || u.Items[0].Failures != 0 {
		t.Fatalf("claim of the unknown item: %+v", u)
	}
	if lost, err := l.FinishItems(ctx, points, idemstore.ItemStep{}, []idemstore.ItemEnd{{Item: items[2], Attempt: 1, Status: idem.StatusDone, Now: now}}); err != nil || !slices.Equal(lost, items[2:3]) {
		t.Fatalf("finish of a single item's stale attempt: lost %v, %v", lost, err)
	}

	// Every lease expires, and the failed item's backoff passes. The chunks
	// come first, the started items of their abandoned attempts in doubt.
	shiftItems(t, l, 2*time.Hour)
	d := claimer(t, l, "d", time.Minute)(3, false)
	if d.Chunk != 1 || d.Attempt != 2 || d.Pos != 4 || !slices.Equal(claimedItems(d), items[4:10]) {
		t.Fatalf("takeover of chunk 1: %+v", d)
	}
	for i, cl := range d.Items {
		if inDoubt := i < 4; cl.Doubt != inDoubt || cl.Attempt != 2 || cl.Failures != map[bool]int{true: 1}[inDoubt] {
			t.Fatalf("takeover of chunk 1, item %d (a's attempt had started 4..7): %+v", 4+i, cl)
		}
	}
	e := claimer(t, l, "e", time.Minute)(100, false)
	if e.Chunk != 2 || e.Attempt != 2 || e.Pos != 0 || len(e.Items) != 2 || !e.Items[0].Doubt || !e.Items[1].Doubt || e.Items[1].Failures != 1 {
		t.Fatalf("takeover of chunk 2: %+v", e)
	}
	f := claimer(t, l, "f", time.Minute)(100, false)
	if f.Chunk != 0 || !slices.Equal(claimedItems(f), items[1:3]) {
		t.Fatalf("single items after expiry: %+v", f)
	}
	if cl := f.Items[0]; cl.Doubt || cl.Attempt != 2 || cl.Failures != 1 {
		t.Fatalf("retry of the failed item: %+v", cl)
	}
	if cl := f.Items[1]; !cl.Doubt || cl.Attempt != 3 || cl.Failures != 1 {
		t.Fatalf("takeover of an expired single item: %+v", cl)
	}
	var lastErr string
	if err := l.Pool().QueryRow(ctx, `SELECT last_error FROM `+table(l, "item_state")+` WHERE item = $1`, items[2]).Scan(&lastErr); err != nil ||
		!strings.Contains(lastErr, "attempt 2 by c abandoned") {
		t.Fatalf("last error of a taken-over item %q, %v", lastErr, err)
	}
	if g := claimer(t, l, "g", time.Minute)(100, true); len(g.Items) != 0 {
		t.Fatalf("claimed held work: %+v", g)
	}

	// a's attempt is fenced out, in FinishItems and in FinishItemsTx (fn
	// does not run).
	stale := step(a, 4, 0, time.Minute)
	if lost, err := l.FinishItems(ctx, points, stale, doneEnds(a.Items[4:6])); err != nil || !slices.Equal(lost, items[4:6]) {
		t.Fatalf("finish of a taken-over chunk: lost %v, %v", lost, err)
	}
	ran := 0
	fn := func(tx pgx.Tx, c idemstore.ItemClaim) error {
		ran++
		if c.Item == items[5] {
			return errors.New("account frozen")
		}
		return nil
	}
	failed := func(c idemstore.ItemClaim, err error) idemstore.ItemEnd {
		return idemstore.ItemEnd{Item: c.Item, Attempt: c.Attempt, Status: idem.StatusFailed, Failures: c.Failures + 1,
			NotBefore: now.Add(time.Hour), Error: err.Error(), Now: now}
	}
	txEnds, lost, err := l.FinishItemsTx(ctx, points, stale, a.Items[4:6], fn, failed)
	if err != nil || len(txEnds) != 0 || !slices.Equal(lost, items[4:6]) || ran != 0 {
		t.Fatalf("FinishItemsTx of a taken-over chunk: ends %v, lost %v, %v, fn ran %d", txEnds, lost, err, ran)
	}
	checkCounts(t, l, idem.ItemCounts{Sealed: true, Running: 10, Done: 1, Parked: 1})
	// d's window 4..6 in a transaction: item 5's fn fails, it gets a record.
	txEnds, lost, err = l.FinishItemsTx(ctx, points, step(d, 4, 0, time.Minute), d.Items[:3], fn, failed)
	if err != nil || len(lost) != 0 || ran != 3 || len(txEnds) != 3 ||
		txEnds[0].Status != idem.StatusDone || txEnds[1].Status != idem.StatusFailed || txEnds[1].Failures != 2 || txEnds[2].Status != idem.StatusDone {
		t.Fatalf("FinishItemsTx: ends %+v, lost %v, %v, fn ran %d", txEnds, lost, err, ran)
	}
	var status string
	var chunk int64
	if err := l.Pool().QueryRow(ctx, `SELECT status, chunk FROM `+table(l, "item_state")+` WHERE item = $1`, items[5]).Scan(&status, &chunk); err != nil || status != "failed" || chunk != 1 {
		t.Fatalf("record of the failed item: %q, chunk %d, %v", status, chunk, err)
	}
	// Single items in a transaction: a stale claim is skipped.
	ran = 0
	txEnds, lost, err = l.FinishItemsTx(ctx, points, idemstore.ItemStep{Now: now}, []idemstore.ItemClaim{{Item: items[1], Attempt: 1}, f.Items[1]}, fn, failed)
	if err != nil || len(txEnds) != 1 || txEnds[0].Item != items[2] || !slices.Equal(lost, items[1:2]) || ran != 1 {
		t.Fatalf("FinishItemsTx with a stale claim: ends %+v, lost %v, %v, fn ran %d", txEnds, lost, err, ran)
	}
	if _, err := l.FinishItems(ctx, points, idemstore.ItemStep{}, []idemstore.ItemEnd{{Item: items[1], Attempt: 2, Status: "pending"}}); err == nil {
		t.Fatal("an end with status pending accepted")
	}
	checkCounts(t, l, idem.ItemCounts{Sealed: true, Running: 6, Failed: 1, Done: 4, Parked: 1})

	// The rest: everything is done but the parked and the failed item.
	if lost, err := l.FinishItems(ctx, points, step(d, 7, 0, time.Minute), doneEnds(d.Items[3:])); err != nil || len(lost) != 0 {
		t.Fatalf("finish of chunk 1: lost %v, %v", lost, err)
	}
	if lost, err := l.FinishItems(ctx, points, step(e, 0, 0, time.Minute), doneEnds(e.Items)); err != nil || len(lost) != 0 {
		t.Fatalf("finish of chunk 2: lost %v, %v", lost, err)
	}
	if lost, err := l.FinishItems(ctx, points, idemstore.ItemStep{}, doneEnds(f.Items[:1])); err != nil || len(lost) != 0 {
		t.Fatalf("finish of the retried item: lost %v, %v", lost, err)
	}
	checkCounts(t, l, idem.ItemCounts{Sealed: true, Failed: 1, Done: 10, Parked: 1})
	var open int
	if err := l.Pool().QueryRow(ctx, `SELECT count(*) FROM `+table(l, "item_chunks")+` WHERE status <> 'done'`).Scan(&open); err != nil || open != 0 {
		t.Fatalf("%d chunks not done, %v", open, err)
	}
}

// claimWhenExpired claims until the lease of the work held expires.
func claimWhenExpired(t testing.TB, claim func(n int, takeUnknown bool) idemstore.ItemBatch, n int) idemstore.ItemBatch {
	t.Helper()
	var b idemstore.ItemBatch
	testwait.Until(t, func() bool { b = claim(n, false); return len(b.Items) > 0 }, "the lease of the work held to expire (a claim of %d items)", n)
	return b
}

// TestChunkDoubtAfterExpiry: a chunk whose lease expires is claimed again
// with the items its attempt had marked started in doubt; the started mark
// never moves back, so a window that marked nothing more started (Next 0)
// keeps an earlier claim's doubt.
func TestChunkDoubtAfterExpiry(t *testing.T) {
	t.Parallel()
	l := openLedger(t, newPool(t))
	ctx := context.Background()
	items := accountList(20)
	if err := l.AddItems(ctx, points, items); err != nil {
		t.Fatal(err)
	}
	const lease = 300 * time.Millisecond
	a := claimer(t, l, "a", lease)(10, false) // marks 0..9 started
	if len(a.Items) != 20 || a.Items[9].Doubt {
		t.Fatalf("claim a: %+v", a)
	}
	if lost, err := l.FinishItems(ctx, points, step(a, 0, 0, lease), doneEnds(a.Items[:5])); err != nil || len(lost) != 0 {
		t.Fatalf("a's window 0..4: lost %v, %v", lost, err)
	}
	// a dies; b takes the chunk over once a's lease expired.
	b := claimWhenExpired(t, claimer(t, l, "b", lease), 3)
	if b.Chunk != a.Chunk || b.Attempt != 2 || b.Pos != 5 || !slices.Equal(claimedItems(b), items[5:]) {
		t.Fatalf("claim b: %+v", b)
	}
	for i, c := range b.Items {
		if inDoubt := 5+i < 10; c.Doubt != inDoubt || c.Attempt != 2 || c.Failures != map[bool]int{true: 1}[inDoubt] {
			t.Fatalf("claim b, item %d: %+v", 5+i, c)
		}
	}
	if lost, err := l.FinishItems(ctx, points, step(a, 5, 0, lease), doneEnds(a.Items[5:10])); err != nil || !slices.Equal(lost, items[5:10]) {
		t.Fatalf("a's late window: lost %v, %v", lost, err)
	}
	checkCounts(t, l, idem.ItemCounts{Running: 15, Done: 5})
	// b settles 5..7, marks nothing more started, and dies: c finds 8 and 9
	// in doubt still (a had started them; b's claim of 3 did not move the
	// mark back to 8).
	if lost, err := l.FinishItems(ctx, points, step(b, 5, 0, lease), doneEnds(b.Items[:3])); err != nil || len(lost) != 0 {
		t.Fatalf("b's window 5..7: lost %v, %v", lost, err)
	}
	c := claimWhenExpired(t, claimer(t, l, "c", time.Minute), 1)
	if c.Attempt != 3 || c.Pos != 8 || len(c.Items) != 12 {
		t.Fatalf("claim c: %+v", c)
	}
	for i, cl := range c.Items {
		if inDoubt := 8+i < 10; cl.Doubt != inDoubt || cl.Attempt != 3 || cl.Failures != map[bool]int{true: 2}[inDoubt] {
			t.Fatalf("claim c, item %d: %+v", 8+i, cl)
		}
	}
	if lost, err := l.FinishItems(ctx, points, step(c, 8, 0, time.Minute), doneEnds(c.Items)); err != nil || len(lost) != 0 {
		t.Fatalf("c's window 8..19: lost %v, %v", lost, err)
	}
	checkCounts(t, l, idem.ItemCounts{Done: 20})
	if more := claimer(t, l, "d", time.Minute)(10, true); len(more.Items) != 0 {
		t.Fatalf("claim of a done chunk: %+v", more)
	}
}

// TestItemsDatabaseClock: item leases and backoffs run on the server's
// clock, whatever the clients' clocks say.
func TestItemsDatabaseClock(t *testing.T) {
	l := openLedger(t, newPool(t))
	ctx := context.Background()
	if err := l.AddItems(ctx, points, []string{"x", "y"}); err != nil {
		t.Fatal(err)
	}
	behind := time.Now().AddDate(-1, 0, 0)
	b, err := l.ClaimItems(ctx, points, idemstore.ItemClaimRequest{N: 1, Owner: "behind", Now: behind, Lease: time.Minute})
	if err != nil || b.Chunk != 1 || len(b.Items) != 2 {
		t.Fatal(b, err)
	}
	scanSpan := func(tbl, col string) time.Duration {
		t.Helper()
		var us float64
		if err := l.Pool().QueryRow(ctx, `SELECT extract(epoch FROM `+col+` - clock_timestamp()) * 1e6 FROM `+table(l, tbl)).Scan(&us); err != nil {
			t.Fatal(err)
		}
		return time.Duration(us) * time.Microsecond
	}
	if lease := scanSpan("item_chunks", "lease_until"); lease < 50*time.Second || lease > 70*time.Second {
		t.Fatalf("lease ends %v after the server's now, want about a minute", lease)
	}
	if again, err := l.ClaimItems(ctx, points, idemstore.ItemClaimRequest{N: 1, Owner: "ahead", Now: time.Now().AddDate(1, 0, 0), Lease: time.Minute}); err != nil || len(again.Items) != 0 {
		t.Fatalf("claim from a clock a year ahead: %+v, %v", again, err)
	}
	// A window whose times are a year behind: the renewed lease and the
	// backoff are durations from the server's now.
	win := idemstore.ItemStep{Chunk: b.Chunk, Attempt: b.Attempt, Next: 1, Now: behind, LeaseUntil: behind.Add(2 * time.Minute)}
	if lost, err := l.FinishItems(ctx, points, win, []idemstore.ItemEnd{{Item: "x", Attempt: 1, Status: idem.StatusFailed, Failures: 1,
		Now: behind, NotBefore: behind.Add(time.Hour), Error: "down"}}); err != nil || len(lost) != 0 {
		t.Fatal(lost, err)
	}
	if lease := scanSpan("item_chunks", "lease_until"); lease < 110*time.Second || lease > 130*time.Second {
		t.Fatalf("renewed lease ends %v after the server's now, want about two minutes", lease)
	}
	if nb := scanSpan("item_state", "not_before"); nb < 59*time.Minute || nb > 61*time.Minute {
		t.Fatalf("backoff ends %v after the server's now, want about an hour", nb)
	}
}

// TestClaimItemsConcurrent: 8 claimers on two pools ("hosts") take disjoint
// chunks and single items until none is left.
func TestClaimItemsConcurrent(t *testing.T) {
	t.Parallel()
	p1, p2 := newPool(t), newPool(t)
	l1 := openLedger(t, p1)
	l2, err := pgledger.New(context.Background(), p2, pgledger.WithSchema(l1.Schema()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	all := accountList(2000)
	for i := 0; i < len(all); i += 100 { // 20 chunks
		if err := l1.AddItems(ctx, points, all[i:i+100]); err != nil {
			t.Fatal(err)
		}
	}
	// The first chunk's items all fail, runnable at once: 100 single items.
	first := claimer(t, l1, "setup", time.Minute)(100, false)
	var ends []idemstore.ItemEnd
	now := time.Now()
	for _, c := range first.Items {
		ends = append(ends, idemstore.ItemEnd{Item: c.Item, Attempt: c.Attempt, Status: idem.StatusFailed, Failures: 1, NotBefore: now, Now: now, Error: "down"})
	}
	if lost, err := l1.FinishItems(ctx, points, step(first, 0, 0, time.Minute), ends); err != nil || len(lost) != 0 {
		t.Fatalf("setup: lost %v, %v", lost, err)
	}
	var mu sync.Mutex
	owner := map[string]int{}
	chunks, singles := 0, 0
	var wg sync.WaitGroup
	for w := range 8 {
		l := []*pgledger.Ledger{l1, l2}[w%2]
		wg.Go(func() {
			for {
				b, err := l.ClaimItems(ctx, points, idemstore.ItemClaimRequest{N: 37, Owner: fmt.Sprint(w), Lease: time.Minute})
				if err != nil {
					t.Error(err)
					return
				}
				if len(b.Items) == 0 {
					return
				}
				mu.Lock()
				if b.Chunk != 0 {
					chunks++
				} else {
					singles++
				}
				for _, c := range b.Items {
					if prev, ok := owner[c.Item]; ok {
						t.Errorf("%s claimed by %d and %d", c.Item, prev, w)
					}
					owner[c.Item] = w
				}
				mu.Unlock()
			}
		})
	}
	testwait.Group(t, &wg, "8 goroutines claiming the items of %s", points)
	if len(owner) != 2000 || chunks != 19 || singles < 3 {
		t.Fatalf("%d items claimed in %d chunks and %d batches of single items, want 2000, 19 and at least 3", len(owner), chunks, singles)
	}
}

// TestAddItemsConcurrent: AddItems of one period from 8 goroutines on two
// pools, with overlapping batches: every item is in exactly one chunk, and
// the chunks are numbered 1, 2, 3... without a gap or a repeat.
func TestAddItemsConcurrent(t *testing.T) {
	t.Parallel()
	p1, p2 := newPool(t), newPool(t)
	l1 := openLedger(t, p1)
	l2, err := pgledger.New(context.Background(), p2, pgledger.WithSchema(l1.Schema()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	all := accountList(1000)
	var wg sync.WaitGroup
	for w := range 8 {
		l := []*pgledger.Ledger{l1, l2}[w%2]
		wg.Go(func() {
			// Every goroutine adds all items, in batches of 50 that start
			// at a place of its own.
			for i := 0; i < len(all); i += 50 {
				from := (i + w*30) % len(all)
				batch := all[from:min(from+50, len(all))]
				if err := l.AddItems(ctx, points, batch); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	testwait.Group(t, &wg, "8 goroutines adding the items of %s", points)
	rows, err := l1.Pool().Query(ctx, `SELECT c.chunk, c.n, l.items FROM `+table(l1, "item_chunks")+` AS c
		JOIN `+table(l1, "item_lists")+` AS l USING (job, period, chunk) ORDER BY c.chunk`)
	if err != nil {
		t.Fatal(err)
	}
	in := map[string]int64{}
	var want int64 = 1
	var chunk int64
	var n int
	var list []string
	_, err = pgx.ForEachRow(rows, []any{&chunk, &n, &list}, func() error {
		if chunk != want || n != len(list) || n == 0 {
			return fmt.Errorf("chunk %d (want %d) of %d items, list of %d", chunk, want, n, len(list))
		}
		want++
		for _, it := range list {
			if prev, ok := in[it]; ok {
				return fmt.Errorf("%s in chunks %d and %d", it, prev, chunk)
			}
			in[it] = chunk
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(in) != len(all) {
		t.Fatalf("%d items in the chunks, want %d", len(in), len(all))
	}
	checkCounts(t, l1, idem.ItemCounts{Pending: 1000})
}

// TestUpgradeFromVersion1: a schema written by pgledger's version 1 (no
// items tables) is upgraded in place; its records stay.
func TestUpgradeFromVersion1(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ctx := context.Background()
	l := openLedger(t, pool)
	k := idem.Key{Job: "old", Period: "2026-10-26"}
	if err := l.Run(ctx, k, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	// Back to version 1: what pgledger 1 created.
	if _, err := pool.Exec(ctx, `DROP TABLE `+table(l, "item_set")+`, `+table(l, "item_chunks")+`, `+table(l, "item_lists")+`,
			`+table(l, "item_state")+`, `+table(l, "itemsets")+`;
		UPDATE `+table(l, "meta")+` SET value = 1 WHERE name = 'schema_version'`); err != nil {
		t.Fatal(err)
	}
	// Several processes' worth of New at once.
	ls := newConcurrently(t, 4, l.Schema())
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

// TestPruneDeletesItems: Prune deletes the pruned periods' rows from every
// item table; a later Each of such a period is done at once.
func TestPruneDeletesItems(t *testing.T) {
	t.Parallel()
	l := openLedger(t, newPool(t))
	ctx := context.Background()
	later := idem.Key{Job: points.Job, Period: "2026-10-28"}
	for _, k := range []idem.Key{points, later} {
		// One item by AddItems, which writes its row in item_set (Each's
		// RecordItems writes none), and again by Each.
		if err := l.AddItems(ctx, k, []string{"acct-000001"}); err != nil {
			t.Fatal(err)
		}
		_, err := idem.Each(ctx, l, k, accounts(50), func(_ context.Context, item string) error {
			if item == "acct-000007" { // a record of its own
				return idem.Permanent(errors.New("account closed"))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.Prune(ctx, points.Job, points.Period); err != nil {
		t.Fatal(err)
	}
	for _, tbl := range []string{"item_set", "item_chunks", "item_lists", "item_state", "itemsets"} {
		var pruned, kept int
		if err := l.Pool().QueryRow(ctx, `SELECT count(*) FILTER (WHERE period = $1), count(*) FILTER (WHERE period = $2) FROM `+table(l, tbl),
			points.Period, later.Period).Scan(&pruned, &kept); err != nil || pruned != 0 || kept == 0 {
			t.Fatalf("%s after prune: %d rows of the pruned period, %d of the later one, %v", tbl, pruned, kept, err)
		}
	}
	if c, err := l.CountItems(ctx, points); err != nil || c.Total() != 0 || c.Sealed {
		t.Fatalf("items after prune: %+v, %v", c, err)
	}
	res, err := idem.Each(ctx, l, points, accounts(50), func(context.Context, string) error { t.Error("ran a pruned period's item"); return nil })
	if err != nil || res.Outcome != idem.AlreadyDone {
		t.Fatalf("Each of a pruned period: %v, %v", err, res.Outcome)
	}
}

// version2DDL is what pgledger's version 2 created (its runs and jobs are
// version 3's).
const version2DDL = `
CREATE SCHEMA {s};
CREATE TABLE {s}.meta (
	name  text PRIMARY KEY,
	value bigint NOT NULL
);
CREATE TABLE {s}.runs (
	job         text COLLATE "C" NOT NULL,
	period      text COLLATE "C" NOT NULL,
	status      text NOT NULL CHECK (status IN ('running', 'failed', 'done', 'unknown', 'parked', 'skipped')),
	attempt     bigint NOT NULL,
	failures    integer NOT NULL DEFAULT 0,
	owner       text NOT NULL DEFAULT '',
	lease_until timestamptz,
	not_before  timestamptz,
	last_error  text NOT NULL DEFAULT '',
	created     timestamptz NOT NULL DEFAULT clock_timestamp(),
	updated     timestamptz NOT NULL DEFAULT clock_timestamp(),
	PRIMARY KEY (job, period)
);
CREATE TABLE {s}.jobs (
	job     text COLLATE "C" PRIMARY KEY,
	cursor  text COLLATE "C" NOT NULL DEFAULT '',
	horizon text COLLATE "C" NOT NULL DEFAULT ''
);
CREATE TABLE {s}.items (
	job         text COLLATE "C" NOT NULL,
	period      text COLLATE "C" NOT NULL,
	item        text COLLATE "C" NOT NULL,
	status      text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'running', 'failed', 'done', 'unknown', 'parked')),
	attempt     bigint NOT NULL DEFAULT 0,
	failures    integer NOT NULL DEFAULT 0,
	doubt       boolean NOT NULL DEFAULT false,
	owner       text NOT NULL DEFAULT '',
	lease_until timestamptz,
	not_before  timestamptz,
	last_error  text NOT NULL DEFAULT '',
	updated     timestamptz NOT NULL DEFAULT clock_timestamp(),
	PRIMARY KEY (job, period, item)
);
CREATE INDEX items_by_status ON {s}.items (job, period, status, updated);
CREATE TABLE {s}.itemsets (
	job    text COLLATE "C" NOT NULL,
	period text COLLATE "C" NOT NULL,
	sealed boolean NOT NULL DEFAULT false,
	PRIMARY KEY (job, period)
);
INSERT INTO {s}.meta VALUES ('schema_version', 2);`

// TestUpgradeFromVersion2: a version-2 schema's items are moved into
// version 3's tables, keeping their status, attempts and errors; the
// old table goes. Each then finishes the period, and AddItems knows the
// items recorded before.
func TestUpgradeFromVersion2(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ctx := context.Background()
	schema := uniqueName("idemtest_")
	dropSchemaLater(t, pool, schema)
	s := pgx.Identifier{schema}.Sanitize()
	if _, err := pool.Exec(ctx, strings.ReplaceAll(version2DDL, "{s}", s)); err != nil {
		t.Fatal(err)
	}
	// points: sealed, an item in every status but unknown (a running one's
	// lease expired); another period: not sealed, one item pending.
	_, err := pool.Exec(ctx, `
		INSERT INTO `+s+`.items (job, period, item, status, attempt, failures, owner, lease_until, not_before, last_error) VALUES
			($1, $2, 'a', 'done', 1, 0, 'h', NULL, NULL, ''),
			($1, $2, 'b', 'failed', 1, 1, 'h', NULL, clock_timestamp() - interval '1 second', 'down'),
			($1, $2, 'c', 'pending', 0, 0, '', NULL, NULL, ''),
			($1, $2, 'd', 'parked', 3, 3, 'h', NULL, NULL, 'frozen'),
			($1, $2, 'e', 'running', 2, 1, 'h', clock_timestamp() - interval '1 second', NULL, ''),
			($1, 'other', 'x', 'pending', 0, 0, '', NULL, NULL, '')`, points.Job, points.Period)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO `+s+`.itemsets VALUES ($1, $2, true)`, points.Job, points.Period); err != nil {
		t.Fatal(err)
	}
	// Two processes' worth of New at once.
	ls := newConcurrently(t, 2, schema)
	if t.Failed() {
		return
	}
	l := ls[0]
	var v int
	var old bool
	if err := pool.QueryRow(ctx, `SELECT value, to_regclass($1) IS NOT NULL FROM `+s+`.meta WHERE name = 'schema_version'`, s+".items").Scan(&v, &old); err != nil || v != pgledger.SchemaVersion || old {
		t.Fatalf("version %d, old items table left %v, %v; want %d and none", v, old, err, pgledger.SchemaVersion)
	}
	checkCounts(t, l, idem.ItemCounts{Sealed: true, Pending: 1, Running: 1, Failed: 1, Done: 1, Parked: 1})
	var attempt int64
	var failures int
	var lastErr string
	if err := pool.QueryRow(ctx, `SELECT attempt, failures, last_error FROM `+s+`.item_state WHERE item = 'b'`).Scan(&attempt, &failures, &lastErr); err != nil ||
		attempt != 1 || failures != 1 || lastErr != "down" {
		t.Fatalf("failed item after the upgrade: attempt %d, failures %d, %q, %v", attempt, failures, lastErr, err)
	}
	// The other period: x is known; only y is new.
	other := idem.Key{Job: points.Job, Period: "other"}
	if err := l.AddItems(ctx, other, []string{"x", "y"}); err != nil {
		t.Fatal(err)
	}
	if c, err := l.CountItems(ctx, other); err != nil || c.Pending != 2 || c.Total() != 2 {
		t.Fatalf("other period's counts %+v, %v", c, err)
	}
	// Each runs what is left: the failed, the pending and the expired item.
	var mu sync.Mutex
	var ran []string
	res, err := idem.Each(ctx, ls[1], points, func(yield func(string, error) bool) { t.Error("items generated again") },
		func(_ context.Context, item string) error {
			mu.Lock()
			ran = append(ran, item)
			mu.Unlock()
			return nil
		})
	slices.Sort(ran)
	if err != nil || res.Outcome != idem.Ran || res.Counts.Done != 4 || res.Counts.Parked != 1 || !slices.Equal(ran, []string{"b", "c", "e"}) {
		t.Fatalf("Each on the upgraded schema: %v, %+v, ran %v", err, res, ran)
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

// newConcurrently opens n ledgers on schema at once, each on a pool of its
// own, as n processes starting together would (the schema's upgrade must
// happen once); a failure is reported with t.Error.
func newConcurrently(t *testing.T, n int, schema string) []*pgledger.Ledger {
	t.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	ls := make([]*pgledger.Ledger, n)
	for i := range ls {
		wg.Go(func() {
			p, err := pgxpool.New(ctx, testDSN(t))
			if err != nil {
				t.Error(err)
				return
			}
			t.Cleanup(p.Close)
			if ls[i], err = pgledger.New(ctx, p, pgledger.WithSchema(schema)); err != nil {
				t.Errorf("New on schema %s: %v", schema, err)
			}
		})
	}
	testwait.Group(t, &wg, "%d pgledger.New on schema %s at once", n, schema)
	return ls
}
