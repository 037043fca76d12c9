package idem_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/testwait"
)

func TestEachAppliesEveryItemOnce(t *testing.T) {
	t.Parallel()
	l := openLedger(t, t.TempDir())
	ctx := context.Background()
	c := newTally()
	var progress []idem.Progress
	res, err := idem.Each(ctx, l, points, accounts(1000), func(ctx context.Context, item string) error {
		info, _ := idem.InfoFrom(ctx)
		if info.Item != item || info.Key != points || info.RequestID == "" {
			t.Errorf("info %+v for %s", info, item)
		}
		c.Add(item)
		return nil
	}, idem.OnProgress(func(p idem.Progress) { progress = append(progress, p) }))
	if err != nil || res.Outcome != idem.Ran || res.Counts.Done != 1000 {
		t.Fatalf("Each: %v, %+v", err, res)
	}
	c.Check(t, 1000, false)
	last := progress[len(progress)-1]
	if last.Done != 1000 || last.Total != 1000 {
		t.Fatalf("last progress %+v", last)
	}
	for i := 1; i < len(progress); i++ {
		if progress[i].Done < progress[i-1].Done {
			t.Fatalf("progress went back: %+v", progress)
		}
	}
	if rec := mustLookup(t, l, points); rec.Status != idem.StatusDone {
		t.Fatalf("period %+v", rec)
	}
	// Again: the period is done; nothing runs, items are not generated.
	res, err = idem.Each(ctx, l, points, func(yield func(string, error) bool) { t.Error("items generated again") },
		func(context.Context, string) error { t.Error("ran again"); return nil })
	if err != nil || res.Outcome != idem.AlreadyDone {
		t.Fatalf("second Each: %v %v", err, res.Outcome)
	}
}

func TestEachResumesAfterCrash(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"at-least-once", "two-phase", "tx"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			l := openLedger(t, t.TempDir())
			ctx := context.Background()
			if _, err := l.DB().Exec(`CREATE TABLE granted(item TEXT PRIMARY KEY, n INTEGER NOT NULL)`); err != nil {
				t.Fatal(err)
			}
			c := newTally()
			has := func(ctx context.Context, k idem.Key) (bool, error) {
				info, _ := idem.InfoFrom(ctx)
				return c.N()[info.Item] > 0, nil
			}
			run := func(ctx context.Context) error {
				if mode == "tx" {
					_, err := idem.EachTx(ctx, l, points, accounts(500), func(ctx context.Context, tx *sql.Tx, item string) error {
						_, err := tx.ExecContext(ctx, `INSERT INTO granted VALUES(?, 1) ON CONFLICT DO UPDATE SET n = n + 1`, item)
						return err
					}, idem.WithBatch(50))
					return err
				}
				opt := idem.AtLeastOnce()
				if mode == "two-phase" {
					opt = idem.TwoPhase(has)
				}
				_, err := idem.Each(ctx, l, points, accounts(500), func(ctx context.Context, item string) error {
					c.Add(item)
					return nil
				}, opt, idem.WithBatch(50), idem.WithWorkers(1))
				return err
			}
			// Crash after the 4th batch's fn, before its done marks.
			var n atomic.Int32
			crash := idemtest.CrashWhen(ctx, func(p idemstore.Point, _ idem.Key) bool {
				return p == idemstore.AfterFn && (mode == "tx" && n.Add(1) == 4 || mode != "tx" && n.Add(1) == 4*50)
			})
			if err := run(crash); !errors.Is(err, idemtest.ErrCrashed) {
				t.Fatalf("crash: %v", err)
			}
			// The dead worker's lease must expire: a new ledger handle with a clock past it.
			l2 := openLedger(t, filepath.Dir(l.Path()), idem.WithClock(idemtest.NewClock(time.Now().Add(2*idem.DefaultLease))))
			l = l2
			if err := run(ctx); err != nil {
				t.Fatalf("recovery: %v", err)
			}
			if mode == "tx" {
				var items, over int
				l.DB().QueryRow(`SELECT count(*), count(*) FILTER (WHERE n <> 1) FROM granted`).Scan(&items, &over)
				if items != 500 || over != 0 {
					t.Fatalf("%d items granted, %d not exactly once", items, over)
				}
				return
			}
			c.Check(t, 500, mode == "at-least-once")
		})
	}
}

func TestEachParksPoisonItem(t *testing.T) {
	t.Parallel()
	l := openLedger(t, t.TempDir(), idem.WithClock(idemtest.NewAutoClock(t0)))
	c := newTally()
	res, err := idem.Each(context.Background(), l, points, accounts(300), func(ctx context.Context, item string) error {
		if item == "acct-000042" {
			return errors.New("account frozen")
		}
		c.Add(item)
		return nil
	}, idem.WithBackoff(idem.MaxAttempts(3, idem.Constant(time.Second))))
	if err != nil || res.Counts.Parked != 1 || res.Counts.Done != 299 || len(res.Parked) != 1 || res.Parked[0] != "acct-000042" {
		t.Fatalf("Each: %v, %+v", err, res)
	}
	c.Check(t, 299, false)
}

func TestEachAtMostOnceUnknown(t *testing.T) {
	t.Parallel()
	l := openLedger(t, t.TempDir())
	res, err := idem.Each(context.Background(), l, points, accounts(20), func(ctx context.Context, item string) error {
		if item == "acct-000007" {
			return errors.New("gateway timeout")
		}
		return nil
	}, idem.AtMostOnce())
	if !errors.Is(err, idem.ErrUnknownOutcome) || res.Counts.Unknown != 1 || res.Counts.Done != 19 {
		t.Fatalf("Each: %v, %+v", err, res.Counts)
	}
	if rec, ok, _ := l.Lookup(context.Background(), points); ok && rec.Status == idem.StatusDone {
		t.Fatal("period marked done with an unknown item")
	}
}

func TestEachInvalidItem(t *testing.T) {
	t.Parallel()
	l := openLedger(t, t.TempDir())
	_, err := idem.Each(context.Background(), l, points, idem.Items(func(yield func(string) bool) { yield("ok"); yield("bad\n") }),
		func(context.Context, string) error { return nil })
	if !errors.Is(err, idem.ErrInvalidKey) {
		t.Fatalf("Each: %v", err)
	}
}

func TestPruneDeletesItems(t *testing.T) {
	t.Parallel()
	l := openLedger(t, t.TempDir())
	ctx := context.Background()
	if _, err := idem.Each(ctx, l, points, accounts(50), func(context.Context, string) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Prune(ctx, points.Job, points.Period); err != nil {
		t.Fatal(err)
	}
	c, err := l.CountItems(ctx, points)
	if err != nil || c.Total() != 0 || c.Sealed {
		t.Fatalf("items after prune: %+v, %v", c, err)
	}
	res, err := idem.Each(ctx, l, points, accounts(50), func(context.Context, string) error { t.Error("ran a pruned period's item"); return nil })
	if err != nil || res.Outcome != idem.AlreadyDone {
		t.Fatalf("Each of a pruned period: %v, %v", err, res.Outcome)
	}
}

// waitClock is the system clock that records every wait asked of it.
type waitClock struct {
	mu    sync.Mutex
	waits []time.Duration
}

func (c *waitClock) Now() time.Time { return time.Now() }

func (c *waitClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	c.waits = append(c.waits, d)
	c.mu.Unlock()
	return time.After(d)
}

func (c *waitClock) asked() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.waits...)
}

// TestEachWaitsForOtherHoldersSoonThenLess: an Each that finds every item
// held by another Each looks at them again after 1 ms, then after twice as
// long each time, up to the poll interval (200 ms); both calls return once
// the holder is done, and every item ran once.
func TestEachWaitsForOtherHoldersSoonThenLess(t *testing.T) {
	t.Parallel()
	l := openLedger(t, t.TempDir())
	ctx := context.Background()
	key := idem.Key{Job: "held", Period: "2026-10-27"}
	var ran atomic.Int64
	started, release := make(chan struct{}), make(chan struct{})
	aDone := make(chan error, 1)
	go func() {
		var once sync.Once
		_, err := idem.Each(ctx, l, key, accounts(2), func(context.Context, string) error {
			ran.Add(1)
			once.Do(func() { close(started) })
			<-release
			return nil
		}, idem.WithWorkers(1))
		aDone <- err
	}()
	testwait.Recv(t, started, "A to hold the period's only chunk")
	clk := &waitClock{}
	bDone := make(chan error, 1)
	go func() {
		_, err := idem.Each(ctx, l, key, accounts(2), func(context.Context, string) error {
			ran.Add(1)
			return nil
		}, idem.WithWorkers(1), idem.WithClock(clk))
		bDone <- err
	}()
	want := []time.Duration{1, 2, 4, 8, 16, 32, 64, 128, 200, 200}
	testwait.Until(t, func() bool { return len(clk.asked()) >= len(want) }, "B to wait %d times for A's chunk", len(want))
	close(release)
	if err := testwait.Recv(t, aDone, "A's Each to return"); err != nil {
		t.Fatalf("A: %v", err)
	}
	if err := testwait.Recv(t, bDone, "B's Each to return"); err != nil {
		t.Fatalf("B: %v", err)
	}
	for i, w := range clk.asked()[:len(want)] {
		if w != want[i]*time.Millisecond {
			t.Fatalf("B's waits %v; want %v ms first", clk.asked(), want)
		}
	}
	if n := ran.Load(); n != 2 {
		t.Fatalf("fn ran %d times for 2 items", n)
	}
}

// countFails is an item store whose CountItems fails.
type countFails struct{ idemstore.ItemStore }

var errCount = errors.New("count failed")

func (countFails) CountItems(context.Context, idem.Key) (idem.ItemCounts, error) {
	return idem.ItemCounts{}, errCount
}

// TestEachOutcomeOnAStoreError: a store error ends Each with the outcome
// Failed (no outcome at all before), except where the period is already
// done: then failing to count its items leaves the Counts empty, and the
// outcome AlreadyDone with no error (it was AlreadyDone with the error).
func TestEachOutcomeOnAStoreError(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := openLedger(t, t.TempDir())
	st, err := idemstore.Of(l)
	if err != nil {
		t.Fatal(err)
	}
	failing := countFails{st.(idemstore.ItemStore)}
	var ran atomic.Int32
	fn := func(context.Context, string) error { ran.Add(1); return nil }

	res, err := idem.Each(ctx, failing, points, accounts(3), fn)
	if !errors.Is(err, errCount) || res.Outcome != idem.Failed {
		t.Fatalf("Each whose store fails to count: %v, outcome %s; want the store's error and Failed", err, res.Outcome)
	}
	if res, err := idem.Each(ctx, l, points, accounts(3), fn); err != nil || res.Outcome != idem.Ran {
		t.Fatalf("Each: %v, %+v", err, res)
	}
	before := ran.Load()
	var log bytes.Buffer
	res, err = idem.Each(ctx, failing, points, accounts(3), fn, idem.WithLogger(slog.New(slog.NewTextHandler(&log, nil))))
	if err != nil || res.Outcome != idem.AlreadyDone || res.Counts != (idem.ItemCounts{}) || ran.Load() != before {
		t.Fatalf("Each of a done period whose store fails to count: %v, %+v, %d more calls; want AlreadyDone, no error, no counts, no call",
			err, res, ran.Load()-before)
	}
	if !strings.Contains(log.String(), "counting the items of a done period failed") || !strings.Contains(log.String(), errCount.Error()) {
		t.Fatalf("the failed count is not in the log: %q", log.String())
	}
}
