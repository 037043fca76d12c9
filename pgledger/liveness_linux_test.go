package pgledger_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/pgledger"
	"github.com/jackc/pgx/v5"
)

var killedKey = idem.Key{Job: "settle", Period: "2026-10-27"}

// killedRun is the job of TestKilledHolderTakenOverAtOnce in mode: it
// counts its effect in the business table (in fn's transaction, in tx mode)
// and, if kill, SIGKILLs this process inside fn, after the effect.
func killedRun(ctx context.Context, l *pgledger.Ledger, mode string, kill bool, asked *atomic.Int32, opts ...idem.Option) error {
	if mode == "tx" {
		return l.RunTx(ctx, killedKey, func(ctx context.Context, tx pgx.Tx) error {
			if err := addEffect(ctx, l, tx, killedKey); err != nil {
				return err
			}
			if kill {
				idemtest.Kill()
			}
			return nil
		}, opts...)
	}
	runOpts := append([]idem.Option(nil), opts...)
	switch mode {
	case "at-most-once":
		runOpts = append(runOpts, idem.AtMostOnce())
	case "two-phase":
		runOpts = append(runOpts, idem.TwoPhase(func(ctx context.Context, k idem.Key) (bool, error) {
			if asked != nil {
				asked.Add(1)
			}
			var n int
			err := l.Pool().QueryRow(ctx, `SELECT count(*) FROM `+table(l, "effects")+` WHERE k = $1`, k.String()).Scan(&n)
			return n > 0, err
		}))
	}
	return l.Run(ctx, killedKey, func(ctx context.Context) error {
		err := pgx.BeginFunc(ctx, l.Pool(), func(tx pgx.Tx) error { return addEffect(ctx, l, tx, killedKey) })
		if err != nil {
			return err
		}
		if kill {
			idemtest.Kill()
		}
		return nil
	}, runOpts...)
}

// TestKilledHolderTakenOverAtOnce: a child process (a pool of its own)
// claims the key and is SIGKILLed inside fn. This process's next Run takes
// the key over at once, although the database's clock says the child's
// lease (a minute) holds: AtLeastOnce runs fn again, AtMostOnce reports the
// outcome unknown, TwoPhase asks has and finds it done, RunTx runs fn again
// (its transaction died with the child).
func TestKilledHolderTakenOverAtOnce(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"at-least-once", "at-most-once", "two-phase", "tx"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			if idemtest.IsChild(t) {
				idemtest.Start(t, "", func(schema string) { // does not return
					l, err := openChildLedger(context.Background(), eachEnv{schema: schema})
					if err == nil {
						err = killedRun(context.Background(), l, mode, true, nil)
					}
					fmt.Println("run returned:", err)
					os.Exit(3)
				})
			}
			l := openLedger(t, newPool(t))
			createEffects(t, l)
			if exit := idemtest.Fork(t, l.Schema(), nil); !exit.Killed {
				t.Fatalf("child was not killed: %+v", exit)
			}
			ctx := context.Background()
			if rec, _, err := l.Lookup(ctx, killedKey); err != nil || rec.Status != idem.StatusRunning || rec.Attempt != 1 {
				t.Fatalf("the dead child's record: %+v, %v; want attempt 1 running", rec, err)
			}
			var asked atomic.Int32
			var res idem.Result
			err := killedRun(ctx, l, mode, false, &asked, idem.ReportTo(&res))
			n := effects(t, l, killedKey)
			rec, _, lerr := l.Lookup(ctx, killedKey)
			if lerr != nil {
				t.Fatal(lerr)
			}
			switch mode {
			case "at-least-once":
				if err != nil || res.Outcome != idem.Ran || n != 2 || rec.Status != idem.StatusDone || rec.Attempt != 2 {
					t.Fatalf("recovery: %v, outcome %v, effects %d, record %+v; want fn run again at once (attempt 2, done)", err, res.Outcome, n, rec)
				}
			case "at-most-once":
				if !errors.Is(err, idem.ErrUnknownOutcome) || n != 1 || rec.Status != idem.StatusUnknown {
					t.Fatalf("recovery: %v, effects %d, record %+v; want ErrUnknownOutcome at once, fn not run again", err, n, rec)
				}
				if !strings.Contains(rec.LastError, "its process died") {
					t.Fatalf("the unknown record does not say that the holder died: %q", rec.LastError)
				}
			case "two-phase":
				if err != nil || res.Outcome != idem.Recovered || n != 1 || asked.Load() == 0 || rec.Status != idem.StatusDone {
					t.Fatalf("recovery: %v, outcome %v, effects %d, has asked %d times, record %+v; want has asked and the key done",
						err, res.Outcome, n, asked.Load(), rec)
				}
			case "tx":
				if err != nil || res.Outcome != idem.Ran || n != 1 || rec.Status != idem.StatusDone || rec.Attempt != 2 {
					t.Fatalf("recovery: %v, outcome %v, effects %d, record %+v; want fn run again at once, its effect once", err, res.Outcome, n, rec)
				}
			}
		})
	}
}

// TestKilledHolderTakenOverOnce: 16 claimers, through two ledgers with
// pools of their own, find the dead child's key at once; the take-over's
// UPDATE is fenced by the dead attempt, so exactly one of them runs fn.
func TestKilledHolderTakenOverOnce(t *testing.T) {
	t.Parallel()
	if idemtest.IsChild(t) {
		idemtest.Start(t, "", func(schema string) { // does not return
			l, err := openChildLedger(context.Background(), eachEnv{schema: schema})
			if err == nil {
				err = killedRun(context.Background(), l, "at-least-once", true, nil)
			}
			fmt.Println("run returned:", err)
			os.Exit(3)
		})
	}
	l1 := openLedger(t, newPool(t))
	createEffects(t, l1)
	l2, err := pgledger.New(context.Background(), newPool(t), pgledger.WithSchema(l1.Schema()))
	if err != nil {
		t.Fatal(err)
	}
	if exit := idemtest.Fork(t, l1.Schema(), nil); !exit.Killed {
		t.Fatalf("child was not killed: %+v", exit)
	}
	start := make(chan struct{})
	errs := make(chan error, 16)
	for i := range cap(errs) {
		go func() {
			<-start
			errs <- killedRun(context.Background(), []*pgledger.Ledger{l1, l2}[i%2], "at-least-once", false, nil)
		}()
	}
	close(start)
	for range cap(errs) {
		if err := <-errs; err != nil && !errors.Is(err, idem.ErrInProgress) {
			t.Errorf("Run: %v", err)
		}
	}
	if n := effects(t, l1, killedKey); n != 2 {
		t.Fatalf("effects %d; want 2: the child's and one take-over's", n)
	}
	if rec, _, err := l1.Lookup(context.Background(), killedKey); err != nil || rec.Status != idem.StatusDone || rec.Attempt != 2 {
		t.Fatalf("record %+v, %v; want done by attempt 2", rec, err)
	}
}

// deadPid returns the pid of a process that has ended (and was reaped).
func deadPid(t *testing.T) int {
	t.Helper()
	c := exec.Command("true")
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	return c.Process.Pid
}

// TestHolderOnAnotherHostWaitsOutItsLease: a running record whose owner
// names another host is busy until its lease expires, although its pid is
// a dead one here; the same owner with this host's name is taken over at
// once (which shows that only the host name kept the first one).
func TestHolderOnAnotherHostWaitsOutItsLease(t *testing.T) {
	t.Parallel()
	l := openLedger(t, newPool(t))
	ctx := context.Background()
	// This process's owner, as its claims record it.
	var me string
	if err := l.Run(ctx, idem.Key{Job: "probe", Period: "p"}, func(ctx context.Context) error {
		info, _ := idem.InfoFrom(ctx)
		me = info.Owner
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	host, rest, ok := strings.Cut(me, ":")
	if !ok || !strings.Contains(rest, ";start=") {
		t.Fatalf("owner %q: no host, or no scope", me)
	}
	pid := strconv.Itoa(os.Getpid())
	dead := host + ":" + strings.Replace(rest, pid+":", strconv.Itoa(deadPid(t))+":", 1)
	elsewhere := "elsewhere.example:" + strings.Replace(rest, pid+":", strconv.Itoa(deadPid(t))+":", 1)
	if !idemstore.HolderGone(dead) || idemstore.HolderGone(elsewhere) {
		t.Fatalf("HolderGone(%q) = %v, HolderGone(%q) = %v; want true, false", dead, idemstore.HolderGone(dead), elsewhere, idemstore.HolderGone(elsewhere))
	}
	insert := func(k idem.Key, owner string) {
		t.Helper()
		_, err := l.Pool().Exec(ctx, `INSERT INTO `+table(l, "runs")+` (job, period, status, attempt, owner, lease_until)
			VALUES ($1, $2, 'running', 1, $3, clock_timestamp() + interval '1 hour')`, k.Job, k.Period, owner)
		if err != nil {
			t.Fatal(err)
		}
	}
	far, here := idem.Key{Job: "settle", Period: "far"}, idem.Key{Job: "settle", Period: "here"}
	insert(far, elsewhere)
	insert(here, dead)
	ran := 0
	fn := func(context.Context) error { ran++; return nil }

	err := l.Run(ctx, far, fn)
	holder := ""
	if ie := (*idem.Error)(nil); errors.As(err, &ie) {
		holder = ie.Holder
	}
	if !errors.Is(err, idem.ErrInProgress) || holder != elsewhere || ran != 0 {
		t.Fatalf("Run of the other host's key: %v, ran %d; want ErrInProgress held by %s", err, ran, elsewhere)
	}
	if err := l.Resolve(ctx, far, idem.ResolveRetry); !errors.Is(err, idem.ErrNotResolvable) {
		t.Fatalf("Resolve of the other host's key: %v; want ErrNotResolvable while the lease holds", err)
	}
	if err := l.Run(ctx, here, fn); err != nil || ran != 1 {
		t.Fatalf("Run of this host's dead holder's key: %v, ran %d; want it taken over and run", err, ran)
	}
	// Once the lease has expired, the other host's key is taken over as always.
	shift(t, l, 2*time.Hour)
	if err := l.Run(ctx, far, fn); err != nil || ran != 2 {
		t.Fatalf("after the lease: %v, ran %d", err, ran)
	}
}

// TestResolveKilledHolderAtOnce: a key whose holder died on this host is not
// held: Resolve settles it at once, without waiting out the lease.
func TestResolveKilledHolderAtOnce(t *testing.T) {
	t.Parallel()
	if idemtest.IsChild(t) {
		idemtest.Start(t, "", func(schema string) { // does not return
			l, err := openChildLedger(context.Background(), eachEnv{schema: schema})
			if err == nil {
				err = l.Run(context.Background(), killedKey, func(context.Context) error { idemtest.Kill(); return nil }, idem.AtMostOnce())
			}
			fmt.Println("run returned:", err)
			os.Exit(3)
		})
	}
	l := openLedger(t, newPool(t))
	if exit := idemtest.Fork(t, l.Schema(), nil); !exit.Killed {
		t.Fatalf("child was not killed: %+v", exit)
	}
	ctx := context.Background()
	if err := l.Resolve(ctx, killedKey, idem.ResolveDone); err != nil {
		t.Fatalf("Resolve: %v; want the dead holder's key settled at once", err)
	}
	if rec, _, err := l.Lookup(ctx, killedKey); err != nil || rec.Status != idem.StatusDone {
		t.Fatalf("record %+v, %v", rec, err)
	}
}

// within runs f and waits for it to return, at most d; otherwise it fails
// the test, saying what it waited for, with a dump of every goroutine.
func within(t *testing.T, what string, d time.Duration, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		var buf bytes.Buffer
		_ = pprof.Lookup("goroutine").WriteTo(&buf, 2)
		t.Fatalf("%s: still waiting after %v; goroutines:\n%s", what, d, buf.String())
	}
}

// TestEachKilledWorkerTakenOverAtOnce: a child process works a period's
// items with EachTx (or Each, two-phase) and is SIGKILLed inside fn,
// holding a chunk under a lease of a minute on the database's clock. This
// process's Each, which polls on a clock that never moves, takes the chunk
// over at once and completes the period; every item is applied once.
func TestEachKilledWorkerTakenOverAtOnce(t *testing.T) {
	t.Parallel()
	const n = 20
	for _, mode := range []string{"tx", "two-phase"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			run := func(l *pgledger.Ledger, granted string, kill bool, opts ...idem.Option) (idem.EachResult, error) {
				ctx := context.Background()
				maybeKill := func(item string) {
					if kill && item == "acct-000005" {
						idemtest.Kill()
					}
				}
				if mode == "tx" {
					return idem.EachTx(ctx, l, points, accounts(n), func(ctx context.Context, tx pgx.Tx, item string) error {
						if err := grant(ctx, tx, granted, item); err != nil {
							return err
						}
						maybeKill(item)
						return nil
					}, fanOut[idem.Option](opts)...)
				}
				has := func(ctx context.Context, _ idem.Key) (bool, error) {
					info, _ := idem.InfoFrom(ctx)
					var k int
					err := l.Pool().QueryRow(ctx, `SELECT count(*) FROM `+granted+` WHERE item = $1`, info.Item).Scan(&k)
					return k > 0, err
				}
				return idem.Each(ctx, l, points, accounts(n), func(ctx context.Context, item string) error {
					if err := pgx.BeginFunc(ctx, l.Pool(), func(tx pgx.Tx) error { return grant(ctx, tx, granted, item) }); err != nil {
						return err
					}
					maybeKill(item)
					return nil
				}, append(fanOut[idem.Option](opts), idem.TwoPhase(has))...)
			}
			if idemtest.IsChild(t) {
				idemtest.Start(t, "", func(schema string) { // does not return
					l, err := openChildLedger(context.Background(), eachEnv{schema: schema})
					if err == nil {
						_, err = run(l, pgx.Identifier{schema, "granted"}.Sanitize(), true, idem.WithWorkers(1))
					}
					fmt.Println("each returned:", err)
					os.Exit(3)
				})
			}
			l := openLedger(t, newPool(t))
			granted := createGranted(t, l)
			if exit := idemtest.Fork(t, l.Schema(), nil); !exit.Killed {
				t.Fatalf("child was not killed: %+v", exit)
			}
			if c, err := l.CountItems(context.Background(), points); err != nil || c.Running == 0 {
				t.Fatalf("the dead child's items: %+v, %v; want some running", c, err)
			}
			clk := idemtest.NewClock(time.Now()) // never advanced: Each's polls never end
			var res idem.EachResult
			var err error
			within(t, "Each of the dead child's period", time.Minute, func() {
				res, err = run(l, granted, false, idem.WithClock(clk))
			})
			if err != nil || res.Outcome != idem.Ran || res.Counts.Done != n {
				t.Fatalf("Each: %v, %+v; want every item done at once", err, res)
			}
			got := grantedCounts(t, l, granted)
			for i := range n {
				if it := fmt.Sprintf("acct-%06d", i); got[it] != 1 {
					t.Errorf("%s applied %d times, want once", it, got[it])
				}
			}
		})
	}
}

// fanOut is opts as options of Each (O = idem.Option) or EachTx.
func fanOut[O any](opts []idem.Option) []O {
	out := make([]O, len(opts))
	for i, o := range opts {
		out[i] = any(o).(O)
	}
	return out
}
