package guard_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem/guard"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
)

// fakeCgroup is a cgroup v2 directory of a test: memory.max and a
// memory.current the test sets.
type fakeCgroup struct {
	t   testing.TB
	dir string
}

func newFakeCgroup(t testing.TB, max int64) *fakeCgroup {
	c := &fakeCgroup{t, t.TempDir()}
	c.write("memory.max", fmt.Sprint(max))
	c.write("memory.stat", "anon 0\ninactive_file 0\n")
	c.setUsed(0)
	return c
}

func (c *fakeCgroup) write(name, text string) {
	if err := os.WriteFile(filepath.Join(c.dir, name), []byte(text+"\n"), 0o644); err != nil {
		c.t.Error(err)
	}
}

func (c *fakeCgroup) setUsed(n int64) { c.write("memory.current", fmt.Sprint(n)) }

// itemRecords returns, by the items' own records in the ledger, how many
// items record a failure (failures > 0) and how many are parked.
func itemRecords(t *testing.T, db *sql.DB, key idem.Key) (failed, parked int) {
	t.Helper()
	if err := db.QueryRow(`SELECT count(*) FILTER (WHERE failures > 0), count(*) FILTER (WHERE status = 'parked')
		FROM idem_item_state WHERE job = ? AND period = ?`, key.Job, key.Period).Scan(&failed, &parked); err != nil {
		t.Fatal(err)
	}
	return failed, parked
}

// TestMemoryGuardDefersEachTx: a memory guard on fake cgroup files trips at
// its limit while EachTx runs: the call is deferred, the items it had not
// started stay unclaimed, no item records a failure; a call while memory
// is still high claims nothing; once memory is down, the next call finishes
// every item exactly once.
func TestMemoryGuardDefersEachTx(t *testing.T) {
	const n = 3000
	l := openLedger(t, t.TempDir())
	ctx := context.Background()
	if _, err := l.DB().Exec(`CREATE TABLE effects(item TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	cg := newFakeCgroup(t, 1000)
	cg.setUsed(500)
	guard := guard.MemoryGuard{Limit: 0.85, Cgroup: cg.dir}
	clk := idemtest.NewClock(time.Date(2026, 10, 28, 2, 0, 0, 0, time.UTC))
	var calls atomic.Int64
	fn := func(ctx context.Context, tx *sql.Tx, item string) error {
		if calls.Add(1) == 700 {
			cg.setUsed(851) // 85.1 %: above the limit
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO effects(item) VALUES(?)`, item)
		return err
	}
	opts := []idem.Option{idem.WithGuard(guard), idem.WithClock(clk), idem.WithBatch(100)}

	res, err := idem.EachTx(ctx, l, points, accounts(n), fn, opts...)
	var d *idem.Deferral
	if !errors.Is(err, idem.ErrDeferred) || !errors.As(err, &d) || d.Reason != "memory" || res.Outcome != idem.Deferred {
		t.Fatalf("EachTx with memory at 85.1%%: %v (outcome %v, deferral %+v), want ErrDeferred by the memory guard", err, res.Outcome, d)
	}
	t.Logf("deferred: %v; counts %+v after %d calls of fn", err, res.Counts, calls.Load())
	// The guard is asked before each window is marked started: the windows
	// running when it trips finish, and nothing is handed back.
	if res.Counts.Pending == 0 || res.Counts.Done == 0 || res.Counts.Failed+res.Counts.Parked+res.Counts.Unknown != 0 {
		t.Errorf("counts after the deferral: %+v, want some done, some still pending, none failed, parked or unknown", res.Counts)
	}
	if failed, parked := itemRecords(t, l.DB(), points); failed != 0 || parked != 0 {
		t.Errorf("%d items record a failure and %d are parked after a deferral, want 0 and 0", failed, parked)
	}

	// Memory still high: the next trigger claims nothing.
	before := calls.Load()
	res2, err := idem.EachTx(ctx, l, points, accounts(n), fn, opts...)
	if !errors.Is(err, idem.ErrDeferred) || calls.Load() != before || res2.Counts != res.Counts {
		t.Fatalf("EachTx with memory still high: %v, fn ran %d times, counts %+v (were %+v); want deferred at once, nothing run or claimed",
			err, calls.Load()-before, res2.Counts, res.Counts)
	}

	cg.setUsed(400)
	res3, err := idem.EachTx(ctx, l, points, accounts(n), fn, opts...)
	if err != nil || res3.Outcome != idem.Ran || res3.Counts.Done != n {
		t.Fatalf("EachTx once memory is down: %v, %v, %+v; want ran, %d done", err, res3.Outcome, res3.Counts, n)
	}
	var rows, distinct int
	if err := l.DB().QueryRow(`SELECT count(*), count(DISTINCT item) FROM effects`).Scan(&rows, &distinct); err != nil {
		t.Fatal(err)
	}
	if rows != n || distinct != n {
		t.Errorf("effects: %d rows of %d items, want each of the %d items exactly once", rows, distinct, n)
	}
	if failed, parked := itemRecords(t, l.DB(), points); failed != 0 || parked != 0 {
		t.Errorf("%d items record a failure and %d are parked, want 0 and 0", failed, parked)
	}
}

// TestMemoryGuardMeminfo: without a cgroup limit the guard reads the
// host's memory from a meminfo file.
func TestMemoryGuardMeminfo(t *testing.T) {
	dir := t.TempDir()
	cg := newFakeCgroup(t, 0)
	cg.write("memory.max", "max") // no limit: the host's memory counts
	meminfo := filepath.Join(dir, "meminfo")
	set := func(avail int) {
		text := fmt.Sprintf("MemTotal:       1000000 kB\nMemFree:         10000 kB\nMemAvailable:    %d kB\n", avail)
		if err := os.WriteFile(meminfo, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	g := guard.MemoryGuard{Cgroup: cg.dir, Meminfo: meminfo} // the default limit, 85 %
	for _, tc := range []struct {
		avail int
		trips bool
	}{{500000, false}, {150000, false}, {149000, true}, {0, true}} {
		set(tc.avail)
		err := g.Check(context.Background())
		if (err != nil) != tc.trips {
			t.Errorf("MemAvailable %d of 1000000 kB: Check = %v, want a refusal: %v", tc.avail, err, tc.trips)
		}
	}
	if err := (guard.MemoryGuard{Meminfo: filepath.Join(dir, "missing")}).Check(context.Background()); err == nil {
		t.Error("MemoryGuard on a meminfo file that is not there: no error, want one (it defers)")
	}
}

// TestBreakerStopsAnOutage: a downstream fails every item after the 300th
// of 10 000. The breaker opens after 5 failures in a row: at most 5 items
// (plus one per other worker whose item was running) record a failure,
// none is parked, and the call is deferred. A trigger within the cool-down
// runs nothing; once the downstream recovers and the cool-down is over, the
// next trigger probes and finishes all 10 000, each done once.
func TestBreakerStopsAnOutage(t *testing.T) {
	for _, tx := range []bool{false, true} {
		t.Run(map[bool]string{false: "Each", true: "EachTx"}[tx], func(t *testing.T) {
			const n, threshold, workers = 10000, 5, 4
			const coolDown = time.Minute
			l := openLedger(t, t.TempDir())
			ctx := context.Background()
			clk := idemtest.NewAutoClock(time.Date(2026, 10, 28, 2, 0, 0, 0, time.UTC))
			br := idem.NewBreaker(threshold, coolDown)
			var mu sync.Mutex
			done := map[string]int{}
			var calls atomic.Int64
			var down atomic.Bool
			down.Store(true)
			downstream := func(item string) error {
				if calls.Add(1) > 300 && down.Load() {
					return errors.New("partner API: 503")
				}
				mu.Lock()
				done[item]++
				mu.Unlock()
				return nil
			}
			call := func() (idem.EachResult, error) {
				if tx {
					return idem.EachTx(ctx, l, points, accounts(n), func(ctx context.Context, _ *sql.Tx, item string) error {
						return downstream(item)
					}, idem.WithBreaker(br), idem.WithClock(clk), idem.WithWorkers(workers))
				}
				return idem.Each(ctx, l, points, accounts(n), func(ctx context.Context, item string) error {
					return downstream(item)
				}, idem.WithBreaker(br), idem.WithClock(clk), idem.WithWorkers(workers))
			}

			res, err := call()
			var d *idem.Deferral
			if !errors.Is(err, idem.ErrDeferred) || !errors.As(err, &d) || d.Reason != idem.ReasonBreaker {
				t.Fatalf("call during the outage: %v (%+v), want deferred by the breaker", err, res.Counts)
			}
			failed, parked := itemRecords(t, l.DB(), points)
			t.Logf("deferred: %v; counts %+v; %d items record a failure; fn called %d times", err, res.Counts, failed, calls.Load())
			if failed > threshold+workers-1 || parked != 0 || res.Counts.Parked != 0 {
				t.Errorf("%d items record a failure, %d parked; want at most %d and 0", failed, parked, threshold+workers-1)
			}
			if st, _ := br.State(clk.Now()); st != idem.BreakerOpen {
				t.Errorf("breaker %v after the outage, want open", st)
			}

			before := calls.Load()
			if _, err := call(); !errors.Is(err, idem.ErrDeferred) || calls.Load() != before {
				t.Fatalf("call within the cool-down: %v, fn ran %d times; want deferred, nothing run", err, calls.Load()-before)
			}

			down.Store(false)
			clk.Advance(coolDown)
			res, err = call()
			if err != nil || res.Outcome != idem.Ran || res.Counts.Done != n || res.Counts.Parked != 0 {
				t.Fatalf("call after recovery: %v, %v, %+v; want ran, %d done, none parked", err, res.Outcome, res.Counts, n)
			}
			if len(done) != n {
				t.Errorf("%d items succeeded, want %d", len(done), n)
			}
			for it, k := range done {
				if k != 1 {
					t.Errorf("item %s succeeded %d times, want once", it, k)
				}
			}
			if st, _ := br.State(clk.Now()); st != idem.BreakerClosed {
				t.Errorf("breaker %v after recovery, want closed", st)
			}
		})
	}
}

// TestBreakerProbe: after the cool-down one item probes; a failed probe
// opens the breaker for another cool-down.
func TestBreakerProbe(t *testing.T) {
	l := openLedger(t, t.TempDir())
	ctx := context.Background()
	clk := idemtest.NewAutoClock(time.Date(2026, 10, 28, 2, 0, 0, 0, time.UTC))
	br := idem.NewBreaker(2, time.Minute)
	var calls atomic.Int64
	fail := func(ctx context.Context, item string) error {
		calls.Add(1)
		return errors.New("down")
	}
	opts := []idem.Option{idem.WithBreaker(br), idem.WithClock(clk), idem.WithWorkers(1)}
	if _, err := idem.Each(ctx, l, points, accounts(50), fail, opts...); !errors.Is(err, idem.ErrDeferred) || calls.Load() != 2 {
		t.Fatalf("first call: %v after %d calls of fn, want deferred after 2", err, calls.Load())
	}
	clk.Advance(time.Minute)
	if st, _ := br.State(clk.Now()); st != idem.BreakerHalfOpen {
		t.Fatalf("breaker %v after the cool-down, want half_open", st)
	}
	_, err := idem.Each(ctx, l, points, accounts(50), fail, opts...)
	var d *idem.Deferral
	if !errors.As(err, &d) || d.Reason != idem.ReasonBreaker || calls.Load() != 3 {
		t.Fatalf("probe call: %v after %d calls of fn, want one probe (3 calls) and the breaker open again", err, calls.Load())
	}
	if st, _ := br.State(clk.Now()); st != idem.BreakerOpen {
		t.Errorf("breaker %v after a failed probe, want open", st)
	}
}

// TestRatePacesItems: with WithRate(100, 10) on a fake clock, fn never
// starts more than 100 × elapsed seconds + 10 items (to within a
// microsecond), for Each (a token per item) and EachTx (a window's tokens
// before its transaction).
func TestRatePacesItems(t *testing.T) {
	for _, tx := range []bool{false, true} {
		t.Run(map[bool]string{false: "Each", true: "EachTx"}[tx], func(t *testing.T) {
			const n, perSecond, burst = 1000, 100.0, 10
			l := openLedger(t, t.TempDir())
			ctx := context.Background()
			clk := idemtest.NewAutoClock(time.Date(2026, 10, 28, 2, 0, 0, 0, time.UTC))
			start := clk.Now()
			var mu sync.Mutex
			var starts []time.Duration
			at := func() {
				mu.Lock()
				starts = append(starts, clk.Now().Sub(start))
				mu.Unlock()
			}
			var err error
			if tx {
				_, err = idem.EachTx(ctx, l, points, accounts(n), func(ctx context.Context, _ *sql.Tx, _ string) error { at(); return nil },
					idem.WithRate(perSecond, burst), idem.WithClock(clk), idem.WithLease(10*time.Minute))
			} else {
				_, err = idem.Each(ctx, l, points, accounts(n), func(ctx context.Context, _ string) error { at(); return nil },
					idem.WithRate(perSecond, burst), idem.WithClock(clk), idem.WithLease(10*time.Minute))
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(starts) != n {
				t.Fatalf("fn started %d times, want %d", len(starts), n)
			}
			slices.Sort(starts)
			// golang.org/x/time/rate turns a wait into a Duration by
			// truncation, so a start may come a nanosecond before its
			// exact time (CI saw item 33 at 229.999999ms, where 230ms
			// is exact): each start is taken a microsecond later.
			const slack = time.Microsecond
			for i, s := range starts {
				if allowed := perSecond*(s+slack).Seconds() + burst; float64(i+1) > allowed {
					t.Fatalf("item %d started at %v: more than rate × time + burst = %.2f", i+1, s, allowed)
				}
			}
			t.Logf("%d items in %v of fake time", n, starts[n-1])
		})
	}
}

// TestPauseBetweenWindows: WithPause spaces a worker's windows.
func TestPauseBetweenWindows(t *testing.T) {
	l := openLedger(t, t.TempDir())
	clk := idemtest.NewAutoClock(time.Date(2026, 10, 28, 2, 0, 0, 0, time.UTC))
	start := clk.Now()
	var last time.Time
	_, err := idem.Each(context.Background(), l, points, accounts(1000), func(ctx context.Context, _ string) error {
		last = clk.Now()
		return nil
	}, idem.WithPause(500*time.Millisecond), idem.WithBatch(100), idem.WithWorkers(1), idem.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	// 10 windows: the last starts after 9 pauses.
	if got := last.Sub(start); got < 9*500*time.Millisecond {
		t.Errorf("last item at %v, want after 9 pauses of 500ms", got)
	}
}

// TestGuardOptions: bad guard, rate, pause and breaker values are refused
// before anything is written.
func TestGuardOptions(t *testing.T) {
	l := openLedger(t, t.TempDir())
	ctx := context.Background()
	noop := func(context.Context, string) error { return nil }
	for name, opt := range map[string]idem.Option{
		"nil guard":       idem.WithGuard(nil),
		"limit 0.0001%":   idem.WithGuard(guard.MemoryGuard{Limit: 1.5}),
		"rate 0":          idem.WithRate(0, 1),
		"burst 0":         idem.WithRate(10, 0),
		"slow rate":       idem.WithRate(0.01, 1), // one item per 100 s, the default lease is a minute
		"negative pause":  idem.WithPause(-time.Second),
		"long pause":      idem.WithPause(time.Minute),
		"nil breaker":     idem.WithBreaker(nil),
		"breaker 0":       idem.WithBreaker(idem.NewBreaker(0, time.Minute)),
		"breaker no cool": idem.WithBreaker(idem.NewBreaker(3, 0)),
	} {
		_, err := idem.Each(ctx, l, points, accounts(10), noop, opt)
		if !errors.Is(err, idem.ErrInvalidOption) {
			t.Errorf("%s: %v, want ErrInvalidOption", name, err)
		}
	}
	if c, err := l.CountItems(ctx, points); err != nil || c.Total() != 0 {
		t.Errorf("after refused options: %+v, %v; want nothing recorded", c, err)
	}
}

// TestGuardDefersRun: Run and CatchUp ask the guards before claiming.
func TestGuardDefersRun(t *testing.T) {
	l := openLedger(t, t.TempDir())
	ctx := context.Background()
	busy := true
	g := guard.Func("partner", func(context.Context) error {
		if busy {
			return errors.New("partner API is in maintenance")
		}
		return nil
	})
	ran := 0
	key := idem.Key{Job: "settle", Period: "2026-10-27"}
	var r idem.Result
	err := l.Run(ctx, key, func(context.Context) error { ran++; return nil }, idem.WithGuard(g), idem.ReportTo(&r))
	var d *idem.Deferral
	if !errors.Is(err, idem.ErrDeferred) || !errors.As(err, &d) || d.Reason != "partner" || r.Outcome != idem.Deferred || ran != 0 {
		t.Fatalf("Run with the guard refusing: %v (outcome %v), fn ran %d times; want deferred by partner, fn not run", err, r.Outcome, ran)
	}
	if _, ok, _ := l.Lookup(ctx, key); ok {
		t.Error("a deferred Run left a record, want none")
	}
	busy = false
	if err := l.Run(ctx, key, func(context.Context) error { ran++; return nil }, idem.WithGuard(g)); err != nil || ran != 1 {
		t.Fatalf("Run with the guard passing: %v, fn ran %d times", err, ran)
	}
}

// TestDiskGuard: free space below MinFree defers; a DiskGuard with no
// Path watches the ledger's file.
func TestDiskGuard(t *testing.T) {
	l := openLedger(t, t.TempDir())
	ctx := context.Background()
	key := idem.Key{Job: "settle", Period: "2026-10-27"}
	err := l.Run(ctx, key, func(context.Context) error { return nil }, idem.WithGuard(guard.DiskGuard{MinFree: 1 << 62}))
	var d *idem.Deferral
	if !errors.As(err, &d) || d.Reason != "disk" {
		t.Fatalf("Run with 4 EiB required free: %v, want deferred by the disk guard", err)
	}
	t.Log(err)
	if err := l.Run(ctx, key, func(context.Context) error { return nil }, idem.WithGuard(guard.DiskGuard{MinFree: 1})); err != nil {
		t.Fatalf("Run with 1 byte required free: %v", err)
	}
}

// TestBreakerPermanentStillParks: errors fn marks Permanent park as
// without a breaker, and do not open it.
func TestBreakerPermanentStillParks(t *testing.T) {
	l := openLedger(t, t.TempDir())
	br := idem.NewBreaker(2, time.Minute)
	clk := idemtest.NewAutoClock(time.Date(2026, 10, 28, 2, 0, 0, 0, time.UTC))
	res, err := idem.Each(context.Background(), l, points, accounts(20), func(ctx context.Context, _ string) error {
		return idem.Permanent(errors.New("account closed"))
	}, idem.WithBreaker(br), idem.WithClock(clk))
	if err != nil || res.Outcome != idem.Ran || res.Counts.Parked != 20 {
		t.Fatalf("Each of 20 items failing permanently: %v, %v, %+v; want ran with 20 parked", err, res.Outcome, res.Counts)
	}
	if st, _ := br.State(clk.Now()); st != idem.BreakerClosed {
		t.Errorf("breaker %v after permanent errors, want closed", st)
	}
}

// TestGuardStopsCatchUp: a deferred period stops a catch-up, even with
// ContinueAfterFailure: the later periods are left for the next call.
func TestGuardStopsCatchUp(t *testing.T) {
	l := openLedger(t, t.TempDir())
	clk := idemtest.NewClock(time.Date(2026, 10, 28, 2, 0, 0, 0, time.UTC))
	busy := guard.Func("partner", func(context.Context) error { return errors.New("in maintenance") })
	ran := 0
	res, err := idem.CatchUp(context.Background(), l, "daily_export", idem.Daily(time.UTC), func(context.Context, idem.Period) error {
		ran++
		return nil
	}, idem.Since(time.Date(2026, 10, 20, 0, 0, 0, 0, time.UTC)), idem.ContinueAfterFailure(), idem.WithGuard(busy), idem.WithClock(clk))
	if !errors.Is(err, idem.ErrDeferred) || ran != 0 || len(res.Periods) != 1 || res.Periods[0].Outcome != idem.Deferred || res.Deferred != 7 {
		t.Fatalf("CatchUp of 8 days with the guard refusing: %v, fn ran %d times, %+v; want one period deferred and 7 left", err, ran, res)
	}
}

// TestGuardSeesTheKey: a guard's Check learns the key it guards from its
// context (idem.InfoFrom), for Run and for Each, and can refuse by period:
// the refused period is deferred, the others run.
func TestGuardSeesTheKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := openLedger(t, t.TempDir())
	var mu sync.Mutex
	var seen []idem.Key
	holiday := guard.Func("holiday", func(ctx context.Context) error {
		info, ok := idem.InfoFrom(ctx)
		mu.Lock()
		seen = append(seen, info.Key)
		mu.Unlock()
		if !ok || info.Key.Period == "" {
			return errors.New("no key in the guard's context")
		}
		if info.Key.Period == "2026-12-25" {
			return errors.New("no settlement on a holiday")
		}
		return nil
	})
	ran := 0
	fn := func(context.Context) error { ran++; return nil }
	if err := l.Run(ctx, idem.Key{Job: "settle", Period: "2026-12-24"}, fn, idem.WithGuard(holiday)); err != nil {
		t.Fatal(err)
	}
	err := l.Run(ctx, idem.Key{Job: "settle", Period: "2026-12-25"}, fn, idem.WithGuard(holiday))
	var d *idem.Deferral
	if !errors.Is(err, idem.ErrDeferred) || !errors.As(err, &d) || d.Reason != "holiday" || ran != 1 {
		t.Fatalf("the holiday: %v (ran %d); want deferred by the holiday guard", err, ran)
	}
	items := idem.Items(func(yield func(string) bool) { yield("a") })
	if _, err := idem.Each(ctx, l, idem.Key{Job: "grant", Period: "2026-12-24"}, items,
		func(context.Context, string) error { return nil }, idem.WithGuard(holiday)); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) < 3 || seen[0].Period != "2026-12-24" || seen[1].Period != "2026-12-25" || seen[len(seen)-1] != (idem.Key{Job: "grant", Period: "2026-12-24"}) {
		t.Fatalf("the guard saw %v", seen)
	}
}
