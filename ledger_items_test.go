package idem_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem/internal/testwait"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/idemtest"
)

// TestItemIDsRoundTrip: item ids with quotes, backslashes and runes outside
// the Basic Multilingual Plane reach fn exactly as generated (the ledger
// inserts them as a JSON array).
func TestItemIDsRoundTrip(t *testing.T) {
	t.Parallel()
	l := openLedger(t, t.TempDir())
	ids := []string{`a"b`, `back\slash`, `\"`, `"`, `\`, "line\u2028sep", "tag\U000E0001", "emoji 🧾", "ünïcödé", "plain"}
	got := newTally()
	res, err := idem.Each(context.Background(), l, points, idem.Items(slices.Values(ids)), func(_ context.Context, item string) error {
		got.Add(item)
		return nil
	})
	if err != nil || res.Counts.Done != int64(len(ids)) {
		t.Fatalf("Each: %+v, %v", res, err)
	}
	got.Check(t, len(ids), false)
	for _, id := range ids {
		if got.N()[id] != 1 {
			t.Fatalf("%q applied %d times", id, got.N()[id])
		}
	}
}

// TestAddItemsAgain: generating the item set again, in another order, with
// duplicates and new items mixed in, adds only the new items, once; once
// the set is sealed nothing is added.
func TestAddItemsAgain(t *testing.T) {
	t.Parallel()
	l := openLedger(t, t.TempDir())
	ctx := context.Background()
	if err := store(t, l).AddItems(ctx, points, []string{"a", "b", "c", "a"}); err != nil {
		t.Fatal(err)
	}
	if err := store(t, l).AddItems(ctx, points, []string{"c", "d", "b", "e", "d"}); err != nil {
		t.Fatal(err)
	}
	if err := store(t, l).AddItems(ctx, points, []string{"e", "a"}); err != nil { // nothing new: no chunk
		t.Fatal(err)
	}
	c, err := l.CountItems(ctx, points)
	if err != nil || c.Total() != 5 || c.Pending != 5 || c.Sealed {
		t.Fatalf("counts %+v, %v; want 5 pending", c, err)
	}
	if err := store(t, l).SealItems(ctx, points); err != nil {
		t.Fatal(err)
	}
	if err := store(t, l).AddItems(ctx, points, []string{"f"}); err != nil {
		t.Fatal(err)
	}
	if c, err := l.CountItems(ctx, points); err != nil || c.Total() != 5 || !c.Sealed {
		t.Fatalf("counts after adding to a sealed set %+v, %v", c, err)
	}
	var chunks [][]string
	for {
		b, err := store(t, l).ClaimItems(ctx, points, idemstore.ItemClaimRequest{N: 10, Owner: "t", Now: time.Now(), Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if len(b.Items) == 0 {
			break
		}
		var ids []string
		for _, it := range b.Items {
			ids = append(ids, it.Item)
		}
		chunks = append(chunks, ids)
	}
	if len(chunks) != 2 || !slices.Equal(chunks[0], []string{"a", "b", "c"}) || !slices.Equal(chunks[1], []string{"d", "e"}) {
		t.Fatalf("chunks %q, want [a b c] [d e]", chunks)
	}
}

// TestChunkDoubt walks one chunk through the store's protocol: a window's
// done marks are fenced by the chunk's attempt, a reclaimed chunk's started
// items are in doubt, a window stopped early does not clear an abandoned
// attempt's doubt, and an item that failed becomes a record of its own,
// claimed alone.
func TestChunkDoubt(t *testing.T) {
	t.Parallel()
	l := openLedger(t, t.TempDir())
	ctx := context.Background()
	ids := []string{"i0", "i1", "i2", "i3", "i4", "i5", "i6", "i7", "i8", "i9"}
	if err := store(t, l).AddItems(ctx, points, ids); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	lease := time.Minute
	claim := func(at time.Time) idemstore.ItemBatch {
		t.Helper()
		b, err := store(t, l).ClaimItems(ctx, points, idemstore.ItemClaimRequest{N: 4, Owner: "t", Now: at, Lease: lease, Durable: true})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	doubtful := func(b idemstore.ItemBatch) (d []string) {
		for _, c := range b.Items {
			if c.Doubt {
				d = append(d, c.Item)
			}
		}
		return d
	}
	b1 := claim(t0)
	if b1.Chunk != 1 || b1.Attempt != 1 || b1.Pos != 0 || len(b1.Items) != 10 || len(doubtful(b1)) != 0 {
		t.Fatalf("first claim %+v", b1)
	}
	if again := claim(t0.Add(time.Second)); len(again.Items) != 0 {
		t.Fatalf("a held chunk was claimed again: %+v", again)
	}
	// Attempt 1 marked i0..i3 started and dies. Attempt 2 finds them in doubt.
	t1 := t0.Add(lease)
	b2 := claim(t1)
	if b2.Attempt != 2 || !slices.Equal(doubtful(b2), ids[:4]) || b2.Items[0].Failures != 1 {
		t.Fatalf("reclaim %+v, doubt %q", b2, doubtful(b2))
	}
	// Attempt 1 comes back: fenced, nothing written.
	lost, err := store(t, l).FinishItems(ctx, points, idemstore.ItemStep{Chunk: 1, Attempt: 1, From: 0, Next: 4, LeaseUntil: t1.Add(lease), Now: t1},
		[]idemstore.ItemEnd{{Item: "i0", Attempt: 1, Status: idem.StatusDone, Now: t1}})
	if err != nil || !slices.Equal(lost, []string{"i0"}) {
		t.Fatalf("stale finish: lost %q, %v", lost, err)
	}
	// Attempt 2 settles two items (i1 failed) and stops, marking nothing more started.
	lost, err = store(t, l).FinishItems(ctx, points, idemstore.ItemStep{Chunk: 1, Attempt: 2, From: 0, Next: 0, LeaseUntil: t1.Add(lease), Now: t1},
		[]idemstore.ItemEnd{
			{Item: "i0", Attempt: 2, Status: idem.StatusDone, Now: t1},
			{Item: "i1", Attempt: 2, Status: idem.StatusFailed, Failures: 1, NotBefore: t1, Error: "boom", Now: t1},
		})
	if err != nil || len(lost) != 0 {
		t.Fatalf("finish: lost %q, %v", lost, err)
	}
	c, err := l.CountItems(ctx, points)
	if err != nil || c.Done != 1 || c.Failed != 1 || c.Running != 8 || c.Total() != 10 {
		t.Fatalf("counts %+v, %v", c, err)
	}
	// Attempt 2 dies too. Attempt 3: i2, i3 are still in doubt (attempt 1 may have run them).
	t2 := t1.Add(2 * lease)
	b3 := claim(t2)
	if b3.Chunk != 1 || b3.Attempt != 3 || b3.Pos != 2 || !slices.Equal(doubtful(b3), ids[2:4]) {
		t.Fatalf("third claim %+v, doubt %q", b3, doubtful(b3))
	}
	ends := make([]idemstore.ItemEnd, 0, 8)
	for _, c := range b3.Items {
		ends = append(ends, idemstore.ItemEnd{Item: c.Item, Attempt: c.Attempt, Status: idem.StatusDone, Now: t2})
	}
	if lost, err := store(t, l).FinishItems(ctx, points, idemstore.ItemStep{Chunk: 1, Attempt: 3, From: 2, LeaseUntil: t2.Add(lease), Now: t2}, ends); err != nil || len(lost) != 0 {
		t.Fatalf("finish: lost %q, %v", lost, err)
	}
	// The chunk is done; i1 is claimed alone, with its own attempt after the chunk's.
	b4 := claim(t2)
	if b4.Chunk != 0 || len(b4.Items) != 1 || b4.Items[0].Item != "i1" || b4.Items[0].Attempt != 3 {
		t.Fatalf("single claim %+v", b4)
	}
	if lost, err := store(t, l).FinishItems(ctx, points, idemstore.ItemStep{Now: t2}, []idemstore.ItemEnd{{Item: "i1", Attempt: 3, Status: idem.StatusDone, Now: t2}}); err != nil || len(lost) != 0 {
		t.Fatalf("finish i1: lost %q, %v", lost, err)
	}
	if c, err := l.CountItems(ctx, points); err != nil || c.Done != 10 || c.Total() != 10 {
		t.Fatalf("counts %+v, %v", c, err)
	}
}

// TestUpgradeVersion2Items: a version 2 ledger's items (one table, a row
// per item with its status) survive the upgrade with their status, and
// Each finishes the period from there.
func TestUpgradeVersion2Items(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := openLedger(t, dir)
	for _, q := range []string{
		`DROP TABLE idem_item_set`, `DROP TABLE idem_item_chunks`, `DROP TABLE idem_item_lists`, `DROP TABLE idem_item_state`,
		// Version 2's table, as it created it.
		`CREATE TABLE idem_items (
			job TEXT NOT NULL, period TEXT NOT NULL, item TEXT NOT NULL,
			status TEXT NOT NULL DEFAULT 'pending', attempt INTEGER NOT NULL DEFAULT 0,
			failures INTEGER NOT NULL DEFAULT 0, doubt INTEGER NOT NULL DEFAULT 0,
			owner TEXT NOT NULL DEFAULT '', lease_until INTEGER NOT NULL DEFAULT 0,
			not_before INTEGER NOT NULL DEFAULT 0, last_error TEXT NOT NULL DEFAULT '',
			updated INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (job, period, item)) WITHOUT ROWID`,
		`CREATE INDEX idem_items_by_status ON idem_items(job, period, status)`,
		`INSERT INTO idem_items(job, period, item, status, attempt) VALUES
			('daily_points', '2026-10-27', 'a', 'done', 1),
			('daily_points', '2026-10-27', 'b', 'pending', 0),
			('daily_points', '2026-10-27', 'c', 'parked', 3)`,
		`INSERT INTO idem_itemsets(job, period, sealed) VALUES ('daily_points', '2026-10-27', 1)`,
		`UPDATE idem_meta SET value = 2 WHERE name = 'schema_version'`,
	} {
		if _, err := l.DB().Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	l.Close()
	l = openLedger(t, dir)
	var v int
	if err := l.DB().QueryRow(`SELECT value FROM idem_meta WHERE name = 'schema_version'`).Scan(&v); err != nil || v != idem.SchemaVersion {
		t.Fatalf("version %d, %v", v, err)
	}
	ctx := context.Background()
	c, err := l.CountItems(ctx, points)
	if err != nil || c.Done != 1 || c.Pending != 1 || c.Parked != 1 || !c.Sealed {
		t.Fatalf("counts after the upgrade %+v, %v", c, err)
	}
	ran := newTally()
	res, err := idem.Each(ctx, l, points, accounts(0), func(_ context.Context, item string) error { ran.Add(item); return nil })
	if err != nil || res.Outcome != idem.Ran || res.Counts.Done != 2 || res.Counts.Parked != 1 {
		t.Fatalf("Each after the upgrade: %+v, %v", res, err)
	}
	ran.Check(t, 1, false)
	if ran.N()["b"] != 1 {
		t.Fatalf("ran %v, want b once", ran.N())
	}
}

// TestEachSmallPeriodInParallel: a period smaller than a chunk per worker
// is still worked by every worker at once: 8 items, 4 workers, and each of
// the first 4 items waits until 4 are running.
func TestEachSmallPeriodInParallel(t *testing.T) {
	t.Parallel()
	l := openLedger(t, t.TempDir())
	var mu sync.Mutex
	running, most, closed := 0, 0, false
	all := make(chan struct{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := idem.Each(ctx, l, points, accounts(8), func(ctx context.Context, item string) error {
		mu.Lock()
		running++
		most = max(most, running)
		if running == 4 && most == 4 && !closed {
			closed = true
			close(all)
		}
		mu.Unlock()
		defer func() { mu.Lock(); running--; mu.Unlock() }()
		select {
		case <-all:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}, idem.WithWorkers(4))
	if err != nil {
		t.Fatalf("Each: %v (at most %d items ran at once, want 4)", err, most)
	}
	if most != 4 {
		t.Fatalf("at most %d items ran at once, want 4", most)
	}
}

// TestWritesAfterCancelledWrites: write transactions cut short by a
// cancelled context leave the ledger's kept write connections usable.
func TestWritesAfterCancelledWrites(t *testing.T) {
	t.Parallel()
	l := openLedger(t, t.TempDir())
	for i := range 20 {
		ctx, cancel := context.WithCancel(context.Background())
		if i%2 == 0 {
			cancel() // before the transaction
		} else {
			go cancel() // somewhere in it
		}
		k := idem.Key{Job: "cancel", Period: fmt.Sprintf("%03d", i)}
		_ = l.Run(ctx, k, func(context.Context) error { return nil })
		_ = store(t, l).AddItems(ctx, k, []string{"a", "b"})
		cancel()
	}
	ctx := context.Background()
	for i := range 20 {
		k := idem.Key{Job: "after", Period: fmt.Sprintf("%03d", i)}
		if err := l.Run(ctx, k, func(context.Context) error { return nil }); err != nil {
			t.Fatalf("Run after cancelled writes: %v", err)
		}
		if err := store(t, l).AddItems(ctx, k, []string{"a", "b"}); err != nil {
			t.Fatalf("AddItems after cancelled writes: %v", err)
		}
	}
}

// TestEachSlowItemsKeepTheirChunk: items slower in total than the lease are
// worked by the attempt that claimed their chunk, to the end: a window ends
// after a third of the lease and its done marks renew the lease, so the
// chunk is never left to expire and be claimed again. The items take their
// time on a fake clock, so that a busy machine cannot make them slower.
func TestEachSlowItemsKeepTheirChunk(t *testing.T) {
	t.Parallel()
	const lease = 150 * time.Millisecond
	clk := idemtest.NewClock(t0)
	l := openLedger(t, t.TempDir(), idem.WithLease(lease), idem.WithClock(clk))
	got := newTally()
	var mu sync.Mutex
	attempts := map[int64]int{}
	var commits []time.Time
	res, err := idem.Each(context.Background(), l, points, accounts(30), func(ctx context.Context, item string) error {
		info, _ := idem.InfoFrom(ctx)
		mu.Lock()
		attempts[info.Attempt]++
		mu.Unlock()
		clk.Advance(20 * time.Millisecond) // 30 items: four leases' worth
		got.Add(item)
		return nil
	}, idem.WithWorkers(1), idem.OnProgress(func(p idem.Progress) {
		commits = append(commits, clk.Now()) // one call at a time
	}))
	if err != nil || res.Counts.Done != 30 {
		t.Fatalf("Each: %v, %+v", err, res)
	}
	// Each commit renewed the chunk's lease before it ran out: from the
	// claim (at t0) to each commit, and from each commit to the next, less
	// than a lease passed.
	last := t0
	for i, at := range commits {
		if at.Sub(last) >= lease {
			t.Fatalf("commit %d of %d came %s after the one before (lease %s): the chunk's lease ran out; commits at %v", i+1, len(commits), at.Sub(last), lease, commits)
		}
		last = at
	}
	got.Check(t, 30, false)
	if len(attempts) != 1 || attempts[1] != 30 {
		t.Fatalf("items ran under attempts %v, want all 30 under attempt 1", attempts)
	}
}

// TestEachStallBetweenItemsStopsTheWindow: a process that stalls after an
// item's fn, past its chunk's lease, runs no further item of that window:
// the lease is checked right before each item runs, and the window ends
// there (its done marks then find the chunk still this attempt's, as no
// one took it over, and the next window goes on). The stall is a fake
// clock moved at the first item's AfterFn crash point; the windows are
// seen in OnProgress, called once per committed window.
func TestEachStallBetweenItemsStopsTheWindow(t *testing.T) {
	t.Parallel()
	const lease = 150 * time.Millisecond
	clk := idemtest.NewClock(t0)
	l := openLedger(t, t.TempDir(), idem.WithLease(lease), idem.WithClock(clk))
	stalled := false
	limit, cancel := context.WithTimeout(context.Background(), testwait.Limit(t))
	defer cancel()
	ctx := idemstore.WithTrace(limit, &idemstore.Trace{Checkpoint: func(_ context.Context, at idemstore.Point, _ idem.Key) error {
		if at == idemstore.AfterFn && !stalled {
			stalled = true // one worker: no other call at once
			clk.Advance(2 * lease)
		}
		return nil
	}})
	var windows []int64 // done items at each commit
	res, err := idem.Each(ctx, l, points, accounts(10), func(context.Context, string) error { return nil },
		idem.WithWorkers(1), idem.WithBatch(10), idem.OnProgress(func(p idem.Progress) { windows = append(windows, p.Done) }))
	if err != nil || res.Counts.Done != 10 {
		t.Fatalf("Each: %v, %+v", err, res)
	}
	if len(windows) == 0 || windows[0] != 1 {
		t.Fatalf("done items at each commit %v: want the first window to end after the item before the stall", windows)
	}
}
