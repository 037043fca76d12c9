package idem_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/testwait"
)

var key = idem.Key{Job: "daily_settle", Period: "2026-10-27"}

func TestDuplicateTriggerRunsOnce(t *testing.T) {
	t.Parallel()
	l := openLedger(t, t.TempDir())
	ctx := context.Background()
	var runs int
	for i := range 100 {
		var res idem.Result
		err := l.Run(ctx, key, func(context.Context) error { runs++; return nil }, idem.ReportTo(&res))
		if err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		want := idem.AlreadyDone
		if i == 0 {
			want = idem.Ran
		}
		if res.Outcome != want {
			t.Fatalf("run %d: outcome %v, want %v", i, res.Outcome, want)
		}
	}
	if runs != 1 {
		t.Fatalf("fn ran %d times, want 1", runs)
	}
	rec := mustLookup(t, l, key)
	if rec.Status != idem.StatusDone || rec.Attempt != 1 {
		t.Fatalf("record %+v, want done at attempt 1", rec)
	}
}

func TestConcurrentGoroutines(t *testing.T) {
	t.Parallel()
	for _, nkeys := range []int{1, 200} {
		t.Run(fmt.Sprintf("keys=%d", nkeys), func(t *testing.T) {
			t.Parallel()
			l := openLedger(t, t.TempDir())
			ctx := context.Background()
			var mu sync.Mutex
			ran := map[idem.Key]int{}
			var wg sync.WaitGroup
			errs := make(chan error, 16*nkeys)
			for g := range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range nkeys {
						k := idem.Key{Job: "job", Period: fmt.Sprintf("p%04d", (i+g*7)%nkeys)}
						err := l.Run(ctx, k, func(context.Context) error {
							mu.Lock()
							ran[k]++
							mu.Unlock()
							return nil
						}, idem.WaitForTurn())
						if err != nil {
							errs <- err
						}
					}
				}()
			}
			testwait.Group(t, &wg, "16 goroutines running %d keys each", nkeys)
			close(errs)
			for err := range errs {
				t.Errorf("Run: %v", err)
			}
			if len(ran) != nkeys {
				t.Fatalf("%d keys ran, want %d", len(ran), nkeys)
			}
			for k, n := range ran {
				if n != 1 {
					t.Errorf("%s ran %d times, want 1", k, n)
				}
			}
		})
	}
}

// TestConcurrentProcesses runs 8 OS processes (re-executions of this test
// binary) on one ledger file, all triggering the same keys at once.
func TestConcurrentProcesses(t *testing.T) {
	t.Parallel()
	for _, nkeys := range []int{1, 200} {
		t.Run(fmt.Sprintf("keys=%d", nkeys), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			if !idemtest.IsChild(t) { // (a child gets the directory as its arg)
				openLedger(t, dir) // create the schema once, as a deployment would
			}
			children := make([]*idemtest.Child, 8)
			for i := range children {
				children[i] = idemtest.Start(t, dir, func(dir string) {
					l, err := idem.OpenLedger(filepath.Join(dir, "ledger.db"))
					if err != nil {
						fmt.Println("open:", err)
						os.Exit(2)
					}
					eff := newEffects(dir)
					for i := range nkeys {
						k := idem.Key{Job: "job", Period: fmt.Sprintf("p%04d", i)}
						err := l.Run(context.Background(), k, func(context.Context) error {
							eff.Add(nil, k.String())
							return nil
						}, idem.WaitForTurn())
						if err != nil {
							fmt.Println("run:", err)
							os.Exit(3)
						}
					}
				})
			}
			for i, c := range children {
				if e := c.Wait(); e.Killed || e.Code != 0 {
					t.Fatalf("child %d: %+v", i, e)
				}
			}
			got := newEffects(dir).Counts(t)
			if len(got) != nkeys {
				t.Fatalf("%d keys have effects, want %d", len(got), nkeys)
			}
			for k, n := range got {
				if n != 1 {
					t.Errorf("%s: %d effects, want 1", k, n)
				}
			}
		})
	}
}

// TestCrashAtEveryPoint kills a child process (SIGKILL) at each protocol
// boundary, then recovers in this process, for each mode.
func TestCrashAtEveryPoint(t *testing.T) {
	t.Parallel()
	points := []idemstore.Point{idemstore.BeforeClaim, idemstore.AfterClaim, idemstore.AfterFn, idemstore.AfterDone}
	modes := []string{"at-least-once", "at-most-once", "two-phase", "tx"}
	for _, mode := range modes {
		for _, p := range points {
			t.Run(mode+"/"+string(p), func(t *testing.T) {
				t.Parallel()
				dir := t.TempDir()
				exit := idemtest.Fork(t, dir, func(dir string) {
					ctx := idemtest.KillAt(context.Background(), p)
					if err := crashJob(ctx, dir, mode, nil); err != nil {
						fmt.Println("run:", err)
						os.Exit(3)
					}
					os.Exit(4) // KillAt should have killed us
				})
				if !exit.Killed {
					t.Fatalf("child was not killed at %s: %+v", p, exit)
				}
				// Recover in a fresh process state, past the dead child's lease.
				clk := idemtest.NewClock(time.Now().Add(2 * idem.DefaultLease))
				err := crashJob(context.Background(), dir, mode, clk)
				eff := newEffects(dir).Counts(t)
				l := openLedger(t, dir)
				rec := mustLookup(t, l, key)
				switch mode {
				case "at-least-once":
					if err != nil {
						t.Fatalf("recovery: %v", err)
					}
					if rec.Status != idem.StatusDone || eff[key.String()] < 1 {
						t.Fatalf("status %s, effects %d: want done, at least 1", rec.Status, eff[key.String()])
					}
					if wantTwice := p == idemstore.AfterFn; wantTwice != (eff[key.String()] == 2) {
						t.Fatalf("effects %d after a crash at %s", eff[key.String()], p)
					}
				case "at-most-once":
					if eff[key.String()] > 1 {
						t.Fatalf("fn ran %d times", eff[key.String()])
					}
					inDoubt := p == idemstore.AfterClaim || p == idemstore.AfterFn
					if inDoubt {
						if !errors.Is(err, idem.ErrUnknownOutcome) || rec.Status != idem.StatusUnknown {
							t.Fatalf("recovery: %v, status %s; want ErrUnknownOutcome", err, rec.Status)
						}
					} else if err != nil || rec.Status != idem.StatusDone || eff[key.String()] != 1 {
						t.Fatalf("recovery: %v, status %s, effects %d", err, rec.Status, eff[key.String()])
					}
				case "two-phase":
					if err != nil || rec.Status != idem.StatusDone || eff[key.String()] != 1 {
						t.Fatalf("recovery: %v, status %s, effects %d; want done, exactly 1", err, rec.Status, eff[key.String()])
					}
				case "tx":
					if err != nil {
						t.Fatalf("recovery: %v", err)
					}
					var n, amount int64
					if err := l.DB().QueryRow(`SELECT count(*), coalesce(sum(amount_cent),0) FROM daily_settle`).Scan(&n, &amount); err != nil {
						t.Fatal(err)
					}
					if rec.Status != idem.StatusDone || n != 1 || amount != 1500 {
						t.Fatalf("status %s, %d settle rows, amount %d; want done, 1 row, 1500", rec.Status, n, amount)
					}
				}
			})
		}
	}
}

// crashJob runs the job of TestCrashAtEveryPoint once in mode.
func crashJob(ctx context.Context, dir, mode string, clk idem.Clock) error {
	l, err := idem.OpenLedger(filepath.Join(dir, "ledger.db"))
	if err != nil {
		return err
	}
	defer l.Close()
	var opts []idem.Option
	var txOpts []idem.Option
	if clk != nil {
		opts = append(opts, idem.WithClock(clk))
		txOpts = append(txOpts, idem.WithClock(clk))
	}
	eff := newEffects(dir)
	switch mode {
	case "tx":
		if err := setupSettle(ctx, l.DB()); err != nil {
			return err
		}
		return l.RunTx(ctx, key, func(ctx context.Context, tx *sql.Tx) error {
			return settle(ctx, tx, key.Period)
		}, txOpts...)
	case "at-most-once":
		opts = append(opts, idem.AtMostOnce())
	case "two-phase":
		opts = append(opts, idem.TwoPhase(func(_ context.Context, k idem.Key) (bool, error) {
			return eff.Counts(nil)[k.String()] > 0, nil
		}))
	}
	return l.Run(ctx, key, func(context.Context) error { eff.Add(nil, key.String()); return nil }, opts...)
}

func setupSettle(ctx context.Context, db *sql.DB) error {
	_, err := db.ExecContext(ctx, `
		CREATE TABLE IF NOT EXISTS flow(id INTEGER PRIMARY KEY, biz_date TEXT NOT NULL, amount_cent INTEGER NOT NULL);
		CREATE TABLE IF NOT EXISTS daily_settle(biz_date TEXT PRIMARY KEY, amount_cent INTEGER NOT NULL);
		INSERT OR IGNORE INTO flow(id, biz_date, amount_cent) VALUES (1, '2026-10-27', 1000), (2, '2026-10-27', 500), (3, '2026-10-28', 700);`)
	return err
}

// settle recomputes a day's amount from the flow table and upserts it by
// business date: never amount = amount + ?.
func settle(ctx context.Context, tx *sql.Tx, day string) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO daily_settle(biz_date, amount_cent)
		SELECT ?, coalesce(sum(amount_cent), 0) FROM flow WHERE biz_date = ?
		ON CONFLICT(biz_date) DO UPDATE SET amount_cent = excluded.amount_cent
		WHERE daily_settle.amount_cent <> excluded.amount_cent`, day, day)
	return err
}

// TestCrashInProcess stops Run at each point in-process and recovers with a
// second Run on the same ledger once the clock passes the lease.
func TestCrashInProcess(t *testing.T) {
	t.Parallel()
	for _, p := range []idemstore.Point{idemstore.BeforeClaim, idemstore.AfterClaim, idemstore.AfterFn, idemstore.AfterDone} {
		t.Run(string(p), func(t *testing.T) {
			t.Parallel()
			clk := idemtest.NewClock(t0)
			l := openLedger(t, t.TempDir(), idem.WithClock(clk))
			runs := 0
			fn := func(context.Context) error { runs++; return nil }
			err := l.Run(idemtest.CrashAt(context.Background(), p), key, fn)
			if !errors.Is(err, idemtest.ErrCrashed) {
				t.Fatalf("crashed run: %v, want ErrCrashed", err)
			}
			if p == idemstore.AfterClaim {
				// The dead attempt's lease still holds.
				if err := l.Run(context.Background(), key, fn); !errors.Is(err, idem.ErrInProgress) {
					t.Fatalf("run within the lease: %v, want ErrInProgress", err)
				}
			}
			clk.Advance(idem.DefaultLease + time.Second)
			var res idem.Result
			if err := l.Run(context.Background(), key, fn, idem.ReportTo(&res)); err != nil {
				t.Fatalf("recovery: %v", err)
			}
			wantRuns := map[idemstore.Point]int{idemstore.BeforeClaim: 1, idemstore.AfterClaim: 1, idemstore.AfterFn: 2, idemstore.AfterDone: 1}[p]
			if runs != wantRuns {
				t.Fatalf("fn ran %d times, want %d", runs, wantRuns)
			}
		})
	}
}

func TestLeaseExpiryFencing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clkA := idemtest.NewClock(t0)
	clkB := idemtest.NewClock(t0.Add(idem.DefaultLease + time.Second))
	a := openLedger(t, dir, idem.WithClock(clkA))
	b := openLedger(t, dir, idem.WithClock(clkB))
	ctx := context.Background()

	started := make(chan struct{})
	aErr := make(chan error, 1)
	var aCause error
	go func() {
		aErr <- a.Run(ctx, key, func(ctx context.Context) error {
			info, _ := idem.InfoFrom(ctx)
			if info.Attempt != 1 {
				t.Errorf("A attempt %d, want 1", info.Attempt)
			}
			close(started)
			timer := time.NewTimer(testwait.Limit(t))
			defer timer.Stop()
			select {
			case <-ctx.Done():
				aCause = context.Cause(ctx)
			case <-timer.C:
				t.Errorf("A's fn was never cancelled; goroutines:\n%s", testwait.Goroutines())
			}
			return nil
		})
	}()
	testwait.Recv(t, started, "A's fn to start")
	// A stalls (its clock does not move, so its heartbeat does not renew).
	// B's clock is past A's lease: B takes over with attempt 2.
	var bAttempt int64
	if err := b.Run(ctx, key, func(ctx context.Context) error {
		info, _ := idem.InfoFrom(ctx)
		bAttempt = info.Attempt
		return nil
	}); err != nil {
		t.Fatalf("B: %v", err)
	}
	if bAttempt != 2 {
		t.Fatalf("B attempt %d, want 2", bAttempt)
	}
	// A's heartbeat now fires, finds attempt 2 and cancels A's fn.
	clkA.BlockUntil(1)
	clkA.Advance(idem.DefaultLease / 3)
	err := testwait.Recv(t, aErr, "A's Run to return after its heartbeat found attempt 2")
	if !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("A: %v, want ErrLeaseLost", err)
	}
	if !errors.Is(aCause, idem.ErrLeaseLost) {
		t.Fatalf("A's fn context cause %v, want ErrLeaseLost", aCause)
	}
	rec := mustLookup(t, b, key)
	if rec.Status != idem.StatusDone || rec.Attempt != 2 {
		t.Fatalf("record %+v, want done by attempt 2", rec)
	}
}

// TestDoneRefusedAfterTakeover: the stalled holder's fn returns before its
// heartbeat notices; its done mark must still be refused.
func TestDoneRefusedAfterTakeover(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clkA := idemtest.NewClock(t0)
	clkB := idemtest.NewClock(t0.Add(idem.DefaultLease + time.Second))
	a := openLedger(t, dir, idem.WithClock(clkA))
	b := openLedger(t, dir, idem.WithClock(clkB))
	ctx := context.Background()
	err := a.Run(ctx, key, func(context.Context) error {
		// While A runs, B (another process: its context is not derived
		// from A's fn) takes over and completes.
		if err := b.Run(ctx, key, func(context.Context) error { return nil }, idem.WithClock(clkB)); err != nil {
			t.Errorf("B: %v", err)
		}
		return nil
	})
	var ierr *idem.Error
	if !errors.Is(err, idem.ErrLeaseLost) || !errors.As(err, &ierr) || ierr.Attempt != 1 {
		t.Fatalf("A: %v, want ErrLeaseLost for attempt 1", err)
	}
}

func TestHeartbeatKeepsLease(t *testing.T) {
	t.Parallel()
	clk := idemtest.NewClock(t0)
	l := openLedger(t, t.TempDir(), idem.WithClock(clk))
	ctx := context.Background()
	inFn := make(chan struct{})
	done := make(chan error, 1)
	release := make(chan struct{})
	go func() {
		done <- l.Run(ctx, key, func(context.Context) error { close(inFn); <-release; return nil })
	}()
	testwait.Recv(t, inFn, "fn to start")
	// Five lease lengths pass; the heartbeat renews every third of a lease.
	for i := range 15 {
		clk.BlockUntil(1)
		before := mustLookup(t, l, key).LeaseUntil
		clk.Advance(idem.DefaultLease / 3)
		testwait.Until(t, func() bool { return mustLookup(t, l, key).LeaseUntil.After(before) }, "renewal %d of the lease (past %s)", i+1, before)
	}
	if err := l.Run(ctx, key, func(context.Context) error { return nil }); !errors.Is(err, idem.ErrInProgress) {
		t.Fatalf("second holder: %v, want ErrInProgress", err)
	}
	close(release)
	if err := testwait.Recv(t, done, "the Run to return once fn is released"); err != nil {
		t.Fatal(err)
	}
}

// TestHeartbeatKeepsLeaseSystemClock: on the system clock the heartbeat is
// started by a timer a third of a lease after fn starts (no goroutine
// before); it then renews the lease for as long as fn runs.
func TestHeartbeatKeepsLeaseSystemClock(t *testing.T) {
	t.Parallel()
	// A renewal every 1.5 s: the lease is lost only if the heartbeat (or
	// its write, an fsync) stalls for 3 s. With a 600 ms lease, a stall of
	// 400 ms lost it, and a clean-clone run of the test command on a busy
	// machine did (the second holder below took the key).
	const lease = 4500 * time.Millisecond
	l := openLedger(t, t.TempDir(), idem.WithLease(lease))
	ctx := context.Background()
	inFn := make(chan struct{})
	release := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- l.Run(ctx, key, func(context.Context) error { close(inFn); <-release; return nil })
	}()
	testwait.Recv(t, inFn, "fn to start")
	first := mustLookup(t, l, key).LeaseUntil
	// Renewed by a renewal made more than a lease after the claim: the
	// heartbeat outlives the lease it started with.
	testwait.Until(t, func() bool { return mustLookup(t, l, key).LeaseUntil.After(first.Add(lease)) },
		"the heartbeat to renew the lease past %s", first.Add(lease))
	if err := l.Run(ctx, key, func(context.Context) error { return nil }); !errors.Is(err, idem.ErrInProgress) {
		t.Fatalf("second holder: %v, want ErrInProgress", err)
	}
	close(release)
	if err := testwait.Recv(t, done, "the Run to return once fn is released"); err != nil {
		t.Fatal(err)
	}
	if rec := mustLookup(t, l, key); rec.Status != idem.StatusDone || rec.Attempt != 1 {
		t.Fatalf("record %+v, want done by attempt 1", rec)
	}
}

func TestInfoFromContext(t *testing.T) {
	t.Parallel()
	l := openLedger(t, t.TempDir())
	var info idem.Info
	if err := l.Run(context.Background(), key, func(ctx context.Context) error {
		info, _ = idem.InfoFrom(ctx)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if info.Key != key || info.Attempt != 1 || info.RequestID != key.RequestID() || info.Owner == "" {
		t.Fatalf("info %+v", info)
	}
	if key.RequestID() != (idem.Key{Job: "daily_settle", Period: "2026-10-27"}).RequestID() ||
		key.RequestID() == (idem.Key{Job: "daily_settle", Period: "2026-10-28"}).RequestID() {
		t.Fatal("RequestID is not a function of the key")
	}
}

func TestFnErrorWrappedAndRetried(t *testing.T) {
	t.Parallel()
	clk := idemtest.NewAutoClock(t0)
	l := openLedger(t, t.TempDir(), idem.WithClock(clk))
	boom := errors.New("gateway timeout")
	calls := 0
	var res idem.Result
	err := l.Run(context.Background(), key, func(context.Context) error {
		calls++
		if calls < 3 {
			return boom
		}
		return nil
	}, idem.ReportTo(&res), idem.RetryWithin(time.Hour)) // see below
	if err != nil || calls != 3 || res.Outcome != idem.Ran || res.Attempts != 3 {
		t.Fatalf("err %v, calls %d, result %+v", err, calls, res)
	}
	// Always failing: parked after the backoff's 5 attempts, error wraps
	// fn's. (The auto clock moves while fn runs, as the heartbeat waits on
	// it: RetryWithin keeps all 5 attempts in this call whatever it reads.)
	k2 := idem.Key{Job: "daily_settle", Period: "2026-10-28"}
	calls = 0
	five := []idem.Option{idem.WithBackoff(idem.MaxAttempts(5, idem.Exponential(time.Second))), idem.RetryWithin(time.Hour)}
	err = l.Run(context.Background(), k2, func(context.Context) error { calls++; return boom }, five...)
	var ierr *idem.Error
	if !errors.Is(err, idem.ErrParked) || !errors.Is(err, boom) || !errors.As(err, &ierr) || calls != 5 {
		t.Fatalf("err %v, calls %d; want ErrParked wrapping boom after 5 calls", err, calls)
	}
	if rec := mustLookup(t, l, k2); rec.Status != idem.StatusParked || rec.Failures != 5 || rec.LastError != boom.Error() {
		t.Fatalf("record %+v", rec)
	}
	if err := l.Run(context.Background(), k2, func(context.Context) error { calls++; return nil }); !errors.Is(err, idem.ErrParked) || calls != 5 {
		t.Fatalf("parked key ran: %v, calls %d", err, calls)
	}
	if err := l.Reset(context.Background(), k2); err != nil {
		t.Fatal(err)
	}
	if err := l.Run(context.Background(), k2, func(context.Context) error { calls++; return nil }); err != nil || calls != 6 {
		t.Fatalf("after Reset: %v, calls %d", err, calls)
	}
}

func TestPermanentErrorParksAtOnce(t *testing.T) {
	t.Parallel()
	l := openLedger(t, t.TempDir(), idem.WithClock(idemtest.NewAutoClock(t0)))
	bad := errors.New("account closed")
	calls := 0
	err := l.Run(context.Background(), key, func(context.Context) error { calls++; return idem.Permanent(bad) })
	if !errors.Is(err, idem.ErrParked) || !errors.Is(err, bad) || calls != 1 {
		t.Fatalf("err %v, calls %d", err, calls)
	}
}

// TestBackoffPersistsAcrossRuns: a cron firing every minute starts a new
// process each time; the failure count and next-allowed time live in the
// ledger, so each new Run honours them.
func TestBackoffPersistsAcrossRuns(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clk := idemtest.NewClock(t0)
	b := idem.MaxAttempts(3, idem.Exponential(time.Hour)) // 1h, 2h, then give up
	calls := 0
	fail := func(context.Context) error { calls++; return errors.New("downstream down") }
	run := func() error {
		// A separate handle on the file, like a new process; the context
		// ends when the run starts sleeping its backoff.
		l := openLedger(t, dir, idem.WithClock(clk), idem.WithBackoff(b))
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		n := clk.Waiters() + 1
		go func() { // a run that does not sleep ends ctx itself
			if clk.BlockUntilContext(ctx, n) == nil {
				cancel()
			}
		}()
		return l.Run(ctx, key, fail)
	}
	if err := run(); !errors.Is(err, idem.ErrBackingOff) || calls != 1 {
		t.Fatalf("first run: %v, calls %d", err, calls)
	}
	l := openLedger(t, dir)
	rec := mustLookup(t, l, key)
	if rec.Failures != 1 || !rec.NotBefore.Equal(t0.Add(time.Hour)) {
		t.Fatalf("after 1 failure: %+v", rec)
	}
	clk.Advance(30 * time.Minute) // the next cron tick: still backing off
	err := run()
	var ierr *idem.Error
	if !errors.Is(err, idem.ErrBackingOff) || !errors.As(err, &ierr) || !ierr.NotBefore.Equal(t0.Add(time.Hour)) || calls != 1 {
		t.Fatalf("run within backoff: %v, calls %d", err, calls)
	}
	clk.Advance(31 * time.Minute)
	if err := run(); !errors.Is(err, idem.ErrBackingOff) || calls != 2 {
		t.Fatalf("second attempt: %v, calls %d", err, calls)
	}
	if rec := mustLookup(t, l, key); rec.Failures != 2 || !rec.NotBefore.Equal(clk.Now().Add(2*time.Hour)) {
		t.Fatalf("after 2 failures: %+v", rec)
	}
	clk.Advance(2 * time.Hour)
	if err := run(); !errors.Is(err, idem.ErrParked) || calls != 3 {
		t.Fatalf("third attempt: %v, calls %d", err, calls)
	}
	if err := run(); !errors.Is(err, idem.ErrParked) || calls != 3 {
		t.Fatalf("parked: %v, calls %d", err, calls)
	}
}

func TestAtMostOnceErrors(t *testing.T) {
	t.Parallel()
	l := openLedger(t, t.TempDir(), idem.WithClock(idemtest.NewAutoClock(t0)), idem.AtMostOnce())
	ctx := context.Background()
	calls := 0
	// A timeout is no proof that nothing happened: unknown.
	err := l.Run(ctx, key, func(context.Context) error { calls++; return context.DeadlineExceeded })
	if !errors.Is(err, idem.ErrUnknownOutcome) || !errors.Is(err, context.DeadlineExceeded) || calls != 1 {
		t.Fatalf("err %v, calls %d", err, calls)
	}
	if err := l.Run(ctx, key, func(context.Context) error { calls++; return nil }); !errors.Is(err, idem.ErrUnknownOutcome) || calls != 1 {
		t.Fatalf("unknown key ran: %v, calls %d", err, calls)
	}
	// The operator checked: it did not happen.
	if err := l.Resolve(ctx, key, idem.ResolveRetry); err != nil {
		t.Fatal(err)
	}
	// Declared harmless errors are retried.
	err = l.Run(ctx, key, func(context.Context) error {
		calls++
		if calls < 3 {
			return idem.NothingHappened(errors.New("validation failed before sending"))
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("harmless retries: %v, calls %d", err, calls)
	}
	k2 := idem.Key{Job: "pay", Period: "2026-10-27"}
	_ = l.Run(ctx, k2, func(context.Context) error { return errors.New("timeout") })
	if err := l.Resolve(ctx, k2, idem.ResolveDone); err != nil {
		t.Fatal(err)
	}
	var res idem.Result
	if err := l.Run(ctx, k2, func(context.Context) error { t.Error("ran a resolved key"); return nil }, idem.ReportTo(&res)); err != nil || res.Outcome != idem.AlreadyDone {
		t.Fatalf("resolved done: %v %v", err, res.Outcome)
	}
}

func TestResolveRefusals(t *testing.T) {
	t.Parallel()
	clk := idemtest.NewClock(t0)
	l := openLedger(t, t.TempDir(), idem.WithClock(clk))
	ctx := context.Background()
	if err := l.Resolve(ctx, key, idem.ResolveRetry); !errors.Is(err, idem.ErrNotResolvable) {
		t.Fatalf("retry of a key with no record: %v", err)
	}
	if err := l.Run(ctx, key, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	for _, to := range []idem.Resolution{idem.ResolveRetry} {
		if err := l.Resolve(ctx, key, to); !errors.Is(err, idem.ErrNotResolvable) {
			t.Fatalf("resolve %d of a done key: %v", to, err)
		}
	}
	// A live attempt cannot be resolved under its holder.
	k2 := idem.Key{Job: "j", Period: "p"}
	err := l.Run(idemtest.CrashAt(ctx, idemstore.AfterClaim), k2, func(context.Context) error { return nil })
	if !errors.Is(err, idemtest.ErrCrashed) {
		t.Fatal(err)
	}
	if err := l.Resolve(ctx, k2, idem.ResolveDone); !errors.Is(err, idem.ErrNotResolvable) || !strings.Contains(err.Error(), "held by attempt 1") {
		t.Fatalf("resolve of a held key: %v", err)
	}
}

func TestPanicPropagates(t *testing.T) {
	t.Parallel()
	clk := idemtest.NewClock(t0)
	l := openLedger(t, t.TempDir(), idem.WithClock(clk))
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Fatalf("recovered %v, want boom", r)
			}
		}()
		_ = l.Run(context.Background(), key, func(context.Context) error { panic("boom") })
	}()
	// The claim stays until its lease expires; then AtLeastOnce runs again.
	if rec := mustLookup(t, l, key); rec.Status != idem.StatusRunning {
		t.Fatalf("after panic: %+v", rec)
	}
	clk.Advance(idem.DefaultLease + time.Second)
	var res idem.Result
	if err := l.Run(context.Background(), key, func(context.Context) error { return nil }, idem.ReportTo(&res)); err != nil || res.Outcome != idem.Ran || res.Attempt != 2 {
		t.Fatalf("after lease: %v %+v", err, res)
	}
}

func TestInvalidKeyWritesNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := openLedger(t, dir)
	long := strings.Repeat("x", idemstore.MaxKeyPart+1)
	bad := []idem.Key{
		{Job: "", Period: "2026-10-27"}, {Job: "job", Period: ""}, {Job: long, Period: "p"}, {Job: "job", Period: long},
		{Job: "job\n", Period: "p"}, {Job: "job", Period: "2026-10-27\x00"}, {Job: "job", Period: "\x7f"},
		{Job: string([]byte{0xff, 0xfe}), Period: "p"}, {Job: "job", Period: "p\u0085"},
	}
	for _, k := range bad {
		err := l.Run(context.Background(), k, func(context.Context) error { t.Errorf("fn ran for %q", k); return nil })
		if !errors.Is(err, idem.ErrInvalidKey) {
			t.Errorf("Run(%q): %v, want ErrInvalidKey", k, err)
		}
		if err := l.Resolve(context.Background(), k, idem.ResolveDone); !errors.Is(err, idem.ErrInvalidKey) {
			t.Errorf("Resolve(%q): %v, want ErrInvalidKey", k, err)
		}
	}
	var n int
	if err := l.DB().QueryRow(`SELECT count(*) FROM idem_runs`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d rows written (%v), want 0", n, err)
	}
	if err := (idem.Key{Job: strings.Repeat("é", 100), Period: "2026-10-27"}).Validate(); err != nil {
		t.Fatalf("200-byte job rejected: %v", err)
	}
}

func TestOpenLedgerBadInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notDB := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(notDB, []byte("these are my notes, not a database\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	regular := filepath.Join(dir, "file")
	if err := os.WriteFile(regular, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, path, want string
	}{
		{"directory", dir, "is a directory"},
		{"not sqlite", notDB, "not a SQLite database"},
		{"under a regular file", filepath.Join(regular, "ledger.db"), "not a directory"},
		{"missing directory", filepath.Join(dir, "nope", "ledger.db"), "no such file or directory"},
		{"proc", "/proc/idem-ledger.db", "ledger /proc/idem-ledger.db"},
		{"empty", "", "empty"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l, err := idem.OpenLedger(c.path)
			if err == nil {
				l.Close()
				t.Fatalf("OpenLedger(%q) succeeded", c.path)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("OpenLedger(%q): %v, want it to say %q", c.path, err, c.want)
			}
		})
	}
	if b, _ := os.ReadFile(notDB); string(b) != "these are my notes, not a database\n" {
		t.Fatalf("not-a-database file changed: %q", b)
	}
}

// TestNewerSchemaRefused: a ledger two versions newer than SchemaVersion is
// refused with ErrNewerSchema, which says which versions may share a
// ledger, and is not written to.
func TestNewerSchemaRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := openLedger(t, dir)
	if _, err := l.DB().Exec(`UPDATE idem_meta SET value = ? WHERE name = 'schema_version'`, idem.SchemaVersion+2); err != nil {
		t.Fatal(err)
	}
	l.Close()
	path := filepath.Join(dir, "ledger.db")
	before, _ := os.ReadFile(path)
	_, err := idem.OpenLedger(path)
	if !errors.Is(err, idem.ErrNewerSchema) || !strings.Contains(err.Error(), path) {
		t.Fatalf("OpenLedger: %v, want ErrNewerSchema naming the path", err)
	}
	share := fmt.Sprintf("versions %d and %d may share a ledger", idem.SchemaVersion+1, idem.SchemaVersion+2)
	if !strings.Contains(err.Error(), share) {
		t.Fatalf("OpenLedger: %v, want it to say %q", err, share)
	}
	if after, _ := os.ReadFile(path); string(before) != string(after) {
		t.Fatal("newer ledger was written to")
	}
}

func TestAttachCallersDB(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "app.db")+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	if err := setupSettle(ctx, db); err != nil {
		t.Fatal(err)
	}
	l, err := idem.NewLedger(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := l.RunTx(ctx, key, func(ctx context.Context, tx *sql.Tx) error { return settle(ctx, tx, key.Period) }); err != nil {
			t.Fatal(err)
		}
	}
	var amount int64
	if err := db.QueryRow(`SELECT amount_cent FROM daily_settle WHERE biz_date = ?`, key.Period).Scan(&amount); err != nil || amount != 1500 {
		t.Fatalf("amount %d (%v), want 1500", amount, err)
	}
	l.Close()
	if err := db.Ping(); err != nil {
		t.Fatalf("Close closed the caller's db: %v", err)
	}
}

func TestRunTxRollsBackOnError(t *testing.T) {
	t.Parallel()
	l := openLedger(t, t.TempDir(), idem.WithClock(idemtest.NewAutoClock(t0)))
	ctx := context.Background()
	if err := setupSettle(ctx, l.DB()); err != nil {
		t.Fatal(err)
	}
	calls := 0
	var res idem.Result
	err := l.RunTx(ctx, key, func(ctx context.Context, tx *sql.Tx) error {
		calls++
		// The first attempt claims, runs and (would) mark done in one
		// transaction; its failure leaves the claim alone committed.
		if info, _ := idem.InfoFrom(ctx); info.Attempt != int64(calls) {
			t.Errorf("call %d runs as attempt %d", calls, info.Attempt)
		}
		if err := settle(ctx, tx, key.Period); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO flow(id, biz_date, amount_cent) VALUES (100 + ?, ?, 1)`, calls, key.Period); err != nil {
			return err
		}
		if calls < 3 {
			return errors.New("fail after writing")
		}
		return nil
	}, idem.ReportTo(&res))
	if err != nil || calls != 3 || res.Attempt != 3 || res.Attempts != 3 || res.Outcome != idem.Ran {
		t.Fatalf("RunTx: %v, calls %d, result %+v", err, calls, res)
	}
	if rec := mustLookup(t, l, key); rec.Status != idem.StatusDone || rec.Attempt != 3 {
		t.Fatalf("record %+v, want done by attempt 3", rec)
	}
	var n int
	if err := l.DB().QueryRow(`SELECT count(*) FROM flow WHERE id > 100`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d rows from failed attempts survived (%v), want 1", n, err)
	}
}

func TestRunTxConcurrent(t *testing.T) {
	t.Parallel()
	l := openLedger(t, t.TempDir())
	ctx := context.Background()
	if err := setupSettle(ctx, l.DB()); err != nil {
		t.Fatal(err)
	}
	if _, err := l.DB().Exec(`CREATE TABLE hits(n INTEGER)`); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := l.RunTx(ctx, key, func(ctx context.Context, tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, `INSERT INTO hits VALUES (1)`)
				return err
			}, idem.WaitForTurn())
			if err != nil {
				t.Error(err)
			}
		}()
	}
	testwait.Group(t, &wg, "16 concurrent RunTx of %s", key)
	var n int
	if err := l.DB().QueryRow(`SELECT count(*) FROM hits`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d hits (%v), want 1", n, err)
	}
}

func TestDefaultStore(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(idem.EnvLedger, filepath.Join(dir, "sub", "dir", "ledger.db"))
	idem.SetDefault(nil)
	t.Cleanup(func() { idem.SetDefault(nil) })
	runs := 0
	for range 3 {
		if err := idem.Run(context.Background(), key, func(context.Context) error { runs++; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if runs != 1 {
		t.Fatalf("ran %d times", runs)
	}
	if _, err := os.Stat(filepath.Join(dir, "sub", "dir", "ledger.db")); err != nil {
		t.Fatalf("default ledger not at $IDEM_LEDGER: %v", err)
	}
	l := openLedger(t, t.TempDir())
	idem.SetDefault(l)
	if err := idem.Run(context.Background(), key, func(context.Context) error { runs++; return nil }); err != nil || runs != 2 {
		t.Fatalf("SetDefault store not used: %v, runs %d", err, runs)
	}
}

func TestList(t *testing.T) {
	t.Parallel()
	clk := idemtest.NewAutoClock(t0)
	l := openLedger(t, t.TempDir(), idem.WithClock(clk))
	ctx := context.Background()
	for _, p := range []string{"2026-10-25", "2026-10-26", "2026-10-27"} {
		_ = l.Run(ctx, idem.Key{Job: "a", Period: p}, func(context.Context) error { return nil })
	}
	_ = l.Run(ctx, idem.Key{Job: "b", Period: "2026-10-27"}, func(context.Context) error { return idem.Permanent(errors.New("x")) })
	all, err := l.List(ctx, idem.Filter{})
	if err != nil || len(all) != 4 || all[0].Key.Period != "2026-10-25" || all[3].Key.Job != "b" {
		t.Fatalf("List all: %v %+v", err, all)
	}
	parked, _ := l.List(ctx, idem.Filter{Status: idem.StatusParked})
	if len(parked) != 1 || parked[0].Key.Job != "b" || parked[0].LastError != "x" {
		t.Fatalf("parked: %+v", parked)
	}
	if a, _ := l.List(ctx, idem.Filter{Job: "a", Limit: 2}); len(a) != 2 {
		t.Fatalf("job a, limit 2: %+v", a)
	}
	s := openState(t, t.TempDir())
	_ = s.Run(ctx, idem.Key{Job: "r", Period: "2026-10-27"}, func(context.Context) error { return nil })
	if recs, err := s.List(ctx, idem.Filter{}); err != nil || len(recs) != 1 || recs[0].Status != idem.StatusDone || recs[0].Key.Period != "2026-10-27" {
		t.Fatalf("state file list: %v %+v", err, recs)
	}
}

func TestOneAttemptAndCancelledCaller(t *testing.T) {
	t.Parallel()
	clk := idemtest.NewClock(t0)
	l := openLedger(t, t.TempDir(), idem.WithClock(clk))
	calls := 0
	err := l.Run(context.Background(), key, func(context.Context) error { calls++; return errors.New("down") }, idem.OneAttempt())
	var ierr *idem.Error
	if !errors.Is(err, idem.ErrBackingOff) || !errors.As(err, &ierr) || ierr.NotBefore.IsZero() || calls != 1 {
		t.Fatalf("OneAttempt: %v, calls %d", err, calls)
	}
	if rec := mustLookup(t, l, key); rec.Status != idem.StatusFailed || rec.Failures != 1 {
		t.Fatalf("record %+v", rec)
	}
	// The caller gives up while fn runs (SIGTERM): the attempt is still recorded.
	k2 := idem.Key{Job: "daily_settle", Period: "2026-10-28"}
	ctx, cancel := context.WithCancel(context.Background())
	err = l.Run(ctx, k2, func(ctx context.Context) error { cancel(); return ctx.Err() })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled run: %v", err)
	}
	if rec := mustLookup(t, l, k2); rec.Status != idem.StatusFailed {
		t.Fatalf("the cancelled attempt was not recorded: %+v", rec)
	}
	// A done mark after the caller gave up is still written.
	k3 := idem.Key{Job: "daily_settle", Period: "2026-10-29"}
	ctx, cancel = context.WithCancel(context.Background())
	if err := l.Run(ctx, k3, func(context.Context) error { cancel(); return nil }); err != nil {
		t.Fatalf("fn succeeded as the caller gave up: %v", err)
	}
	if rec := mustLookup(t, l, k3); rec.Status != idem.StatusDone {
		t.Fatalf("done mark lost: %+v", rec)
	}
}

// TestStoreDefaultsApplyEverywhere: options given to OpenLedger apply to
// RunOn, CatchUp and Each on it, not only to its methods.
func TestStoreDefaultsApplyEverywhere(t *testing.T) {
	t.Parallel()
	clk := idemtest.NewClock(day(10))
	l := openLedger(t, t.TempDir(), idem.WithClock(clk))
	var got time.Time
	_, err := idem.CatchUp(context.Background(), l, "j", daily, func(ctx context.Context, p idem.Period) error {
		got = p.End
		return nil
	})
	if err != nil || !got.Equal(day(10).Truncate(24*time.Hour)) {
		t.Fatalf("CatchUp used another clock: %v, period ends %v", err, got)
	}
}

func TestCheckLease(t *testing.T) {
	t.Parallel()
	clk := stalledClock{idemtest.NewClock(t0)} // no timer fires: the heartbeat cannot renew
	l := openLedger(t, t.TempDir(), idem.WithClock(clk))
	if err := idem.CheckLease(context.Background()); err != nil {
		t.Fatalf("outside a Run: %v", err)
	}
	var inFn error
	err := l.Run(stallGuard(t), key, func(ctx context.Context) error {
		if err := idem.CheckLease(ctx); err != nil {
			t.Fatalf("fresh lease: %v", err)
		}
		// The process stalls past its lease: no heartbeat could run.
		clk.Set(clk.Now().Add(idem.DefaultLease + time.Second))
		inFn = idem.CheckLease(ctx)
		return inFn
	}, idem.OneAttempt())
	if !errors.Is(inFn, idem.ErrLeaseLost) {
		t.Fatalf("after the stall: %v, want ErrLeaseLost", inFn)
	}
	// No newer attempt took the key: fn's failure is recorded by the mode
	// (TestLeaseRunOutWithoutTakeover).
	if !errors.Is(err, idem.ErrBackingOff) || errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("Run after the stall: %v, want ErrBackingOff", err)
	}
}

// TestRunTxDuplicateTakesNoWriteLock: a duplicate trigger of a RunTx job
// reads and returns; it does not wait for SQLite's write lock, which another
// connection holds throughout.
func TestRunTxDuplicateTakesNoWriteLock(t *testing.T) {
	t.Parallel()
	l := openLedger(t, t.TempDir())
	ctx := context.Background()
	body := func(context.Context, *sql.Tx) error { return nil }
	if err := l.RunTx(ctx, key, body); err != nil {
		t.Fatal(err)
	}
	conn, err := l.DB().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		t.Fatal(err)
	}
	defer conn.ExecContext(ctx, `ROLLBACK`)
	tctx, cancel := context.WithTimeout(ctx, 5*time.Second) // the lock is held far longer than this
	defer cancel()
	var res idem.Result
	if err := l.RunTx(tctx, key, body, idem.ReportTo(&res)); err != nil || res.Outcome != idem.AlreadyDone {
		t.Fatalf("duplicate RunTx while the write lock is held: %v, %s", err, res.Outcome)
	}
}
