package idem_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/holder"
)

// openStoreIn opens the store of kind ("ledger" or "statefile") in dir.
func openStoreIn(kind, dir string) (idem.Store, error) {
	if kind == "statefile" {
		return idem.OpenStateFile(filepath.Join(dir, "state.json"))
	}
	return idem.OpenLedger(filepath.Join(dir, "ledger.db"))
}

// modeAsking is the option of mode; has counts its calls in asked.
func modeAsking(mode string, eff *effects, asked *atomic.Int32) idem.Option {
	switch mode {
	case "at-most-once":
		return idem.AtMostOnce()
	case "two-phase":
		return idem.TwoPhase(func(_ context.Context, k idem.Key) (bool, error) {
			if asked != nil {
				asked.Add(1)
			}
			return eff.Counts(nil)[k.String()] > 0, nil
		})
	}
	return idem.AtLeastOnce()
}

// TestKilledHolderTakenOverAtOnce: a child process claims the key and is
// SIGKILLed inside fn. This process's next Run, on the system clock and
// without waiting, takes the key over at once: the dead holder's lease (a
// minute) does not keep it busy. AtLeastOnce runs fn again, AtMostOnce
// reports the outcome unknown, TwoPhase asks has and finds it done.
func TestKilledHolderTakenOverAtOnce(t *testing.T) {
	t.Parallel()
	for _, store := range []string{"ledger", "statefile"} {
		for _, mode := range []string{"at-least-once", "at-most-once", "two-phase"} {
			t.Run(store+"/"+mode, func(t *testing.T) {
				t.Parallel()
				dir := t.TempDir()
				exit := idemtest.Fork(t, dir, func(dir string) {
					s, err := openStoreIn(store, dir)
					if err != nil {
						fmt.Println("open:", err)
						os.Exit(2)
					}
					eff := newEffects(dir)
					err = idem.RunOn(context.Background(), s, key, func(context.Context) error {
						eff.Add(nil, key.String())
						idemtest.Kill()
						return nil
					}, modeAsking(mode, eff, nil))
					fmt.Println("run returned:", err)
					os.Exit(3)
				})
				if !exit.Killed {
					t.Fatalf("child was not killed: %+v", exit)
				}
				s, err := openStoreIn(store, dir)
				if err != nil {
					t.Fatal(err)
				}
				if c, ok := s.(interface{ Close() error }); ok {
					defer c.Close()
				}
				// (An AtLeastOnce claim of the state file writes nothing: its
				// lock is the claim.)
				if store != "statefile" || mode != "at-least-once" {
					if rec := mustLookup(t, s, key); rec.Status != idem.StatusRunning || rec.Attempt != 1 {
						t.Fatalf("the dead child's record: %+v; want attempt 1 running", rec)
					}
				}
				eff := newEffects(dir)
				var asked atomic.Int32
				var res idem.Result
				err = idem.RunOn(context.Background(), s, key, func(context.Context) error {
					eff.Add(nil, key.String())
					return nil
				}, modeAsking(mode, eff, &asked), idem.ReportTo(&res))
				n := eff.Counts(t)[key.String()]
				rec := mustLookup(t, s, key)
				switch mode {
				case "at-least-once":
					if err != nil || res.Outcome != idem.Ran || n != 2 || rec.Status != idem.StatusDone {
						t.Fatalf("recovery: %v, outcome %v, effects %d, record %+v; want fn run again at once, and done", err, res.Outcome, n, rec)
					}
				case "at-most-once":
					if !errors.Is(err, idem.ErrUnknownOutcome) || n != 1 || rec.Status != idem.StatusUnknown {
						t.Fatalf("recovery: %v, effects %d, record %+v; want ErrUnknownOutcome at once, fn not run again", err, n, rec)
					}
					if !strings.Contains(rec.LastError, "died") || !strings.Contains(err.Error(), "died") {
						t.Fatalf("the unknown record does not say that the holder died: %q (error %v)", rec.LastError, err)
					}
				case "two-phase":
					if err != nil || res.Outcome != idem.Recovered || n != 1 || asked.Load() == 0 || rec.Status != idem.StatusDone {
						t.Fatalf("recovery: %v, outcome %v, effects %d, has asked %d times, record %+v; want has asked and the key done",
							err, res.Outcome, n, asked.Load(), rec)
					}
				}
			})
		}
	}
}

// TestHolderOnAnotherHostWaitsOutItsLease: a holder recorded with another
// host name (a child process whose host name is overridden, SIGKILLed
// inside fn) cannot be proven dead from here: its key stays busy, and
// Resolve refuses it, until its lease expires.
func TestHolderOnAnotherHostWaitsOutItsLease(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	exit := idemtest.Fork(t, dir, func(dir string) {
		holder.SetHostnameForTest("elsewhere.example")
		l, err := idem.OpenLedger(filepath.Join(dir, "ledger.db"))
		if err != nil {
			fmt.Println("open:", err)
			os.Exit(2)
		}
		err = l.Run(context.Background(), key, func(context.Context) error { idemtest.Kill(); return nil })
		fmt.Println("run returned:", err)
		os.Exit(3)
	})
	if !exit.Killed {
		t.Fatalf("child was not killed: %+v", exit)
	}
	l := openLedger(t, dir)
	ran := 0
	fn := func(context.Context) error { ran++; return nil }
	err := l.Run(context.Background(), key, fn)
	holder := ""
	if ie := (*idem.Error)(nil); errors.As(err, &ie) {
		holder = ie.Holder
	}
	if !errors.Is(err, idem.ErrInProgress) || !strings.HasPrefix(holder, "elsewhere.example:") || ran != 0 {
		t.Fatalf("Run: %v (holder %q), ran %d; want ErrInProgress held by elsewhere.example", err, holder, ran)
	}
	if err := l.Resolve(context.Background(), key, idem.ResolveRetry); !errors.Is(err, idem.ErrNotResolvable) {
		t.Fatalf("Resolve: %v; want ErrNotResolvable while the lease holds", err)
	}
	// Once the lease has expired, the key is taken over as always.
	clk := idemtest.NewClock(time.Now().Add(idem.DefaultLease + time.Second))
	if err := l.Run(context.Background(), key, fn, idem.WithClock(clk)); err != nil || ran != 1 {
		t.Fatalf("after the lease: %v, ran %d", err, ran)
	}
	if rec := mustLookup(t, l, key); rec.Status != idem.StatusDone || rec.Attempt != 2 {
		t.Fatalf("record %+v", rec)
	}
}

// killChildHolding forks a child that claims key on the ledger in dir in
// mode and SIGKILLs itself inside fn, after recording its effect.
func killChildHolding(t *testing.T, dir, mode string) {
	t.Helper()
	exit := idemtest.Fork(t, dir, func(dir string) {
		l, err := idem.OpenLedger(filepath.Join(dir, "ledger.db"))
		if err != nil {
			fmt.Println("open:", err)
			os.Exit(2)
		}
		eff := newEffects(dir)
		err = l.Run(context.Background(), key, func(context.Context) error {
			eff.Add(nil, key.String())
			idemtest.Kill()
			return nil
		}, modeAsking(mode, eff, nil))
		fmt.Println("run returned:", err)
		os.Exit(3)
	})
	if !exit.Killed {
		t.Fatalf("child was not killed: %+v", exit)
	}
}

// TestResolveKilledHolderAtOnce: a key whose holder died on this host is
// not held: Resolve settles it at once, without waiting out the lease.
func TestResolveKilledHolderAtOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	killChildHolding(t, dir, "at-most-once")
	l := openLedger(t, dir)
	if err := l.Resolve(context.Background(), key, idem.ResolveDone); err != nil {
		t.Fatalf("Resolve: %v; want the dead holder's key settled at once", err)
	}
	if rec := mustLookup(t, l, key); rec.Status != idem.StatusDone {
		t.Fatalf("record %+v", rec)
	}
}

// TestKilledHolderTakenOverOnce: many claimers, through two ledgers (two
// connection pools), find the dead child's key at once; exactly one of them
// takes it over and runs fn, the others find it held by the new attempt.
func TestKilledHolderTakenOverOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	killChildHolding(t, dir, "at-least-once")
	ls := []*idem.Ledger{openLedger(t, dir), openLedger(t, dir)}
	eff := newEffects(dir)
	start := make(chan struct{})
	errs := make(chan error, 16)
	for i := range cap(errs) {
		go func() {
			<-start
			errs <- ls[i%2].Run(context.Background(), key, func(context.Context) error {
				eff.Add(nil, key.String())
				return nil
			})
		}()
	}
	close(start)
	ran, busy := 0, 0
	for range cap(errs) {
		switch err := <-errs; {
		case err == nil:
			ran++
		case errors.Is(err, idem.ErrInProgress):
			busy++
		default:
			t.Errorf("Run: %v", err)
		}
	}
	if n := eff.Counts(t)[key.String()]; n != 2 || ran < 1 {
		t.Fatalf("effects %d (the child's and the takeover's), %d runs returned nil, %d busy; want 2 effects", n, ran, busy)
	}
	if rec := mustLookup(t, ls[0], key); rec.Status != idem.StatusDone || rec.Attempt != 2 || rec.Failures != 0 {
		t.Fatalf("record %+v; want done by attempt 2", rec)
	}
}

// TestEachKilledWorkerTakenOverAtOnce: a child process works a period's
// items with Each (or EachTx) and is SIGKILLed inside fn, holding a chunk
// under a lease of a minute. This process's Each, on a clock that never
// moves (so that the dead child's lease never expires), takes the chunk
// over at once and completes the period.
func TestEachKilledWorkerTakenOverAtOnce(t *testing.T) {
	t.Parallel()
	const n = 20
	for _, variant := range []string{"each", "eachtx"} {
		t.Run(variant, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			setup := func(l *idem.Ledger) error {
				_, err := l.DB().Exec(`CREATE TABLE IF NOT EXISTS applied(item TEXT PRIMARY KEY, n INTEGER NOT NULL)`)
				return err
			}
			apply := func(ctx context.Context, tx *sql.Tx, item string) error {
				_, err := tx.ExecContext(ctx, `INSERT INTO applied VALUES(?, 1) ON CONFLICT DO UPDATE SET n = n + 1`, item)
				return err
			}
			run := func(l *idem.Ledger, kill bool, opts ...idem.Option) (idem.EachResult, error) {
				eff := newEffects(dir)
				maybeKill := func(item string) {
					if kill && item == "acct-000005" {
						idemtest.Kill()
					}
				}
				if variant == "eachtx" {
					return idem.EachTx(context.Background(), l, points, accounts(n), func(ctx context.Context, tx *sql.Tx, item string) error {
						if err := apply(ctx, tx, item); err != nil {
							return err
						}
						maybeKill(item)
						return nil
					}, fanOut[idem.Option](opts)...)
				}
				return idem.Each(context.Background(), l, points, accounts(n), func(ctx context.Context, item string) error {
					eff.Add(nil, item)
					maybeKill(item)
					return nil
				}, fanOut[idem.Option](opts)...)
			}
			exit := idemtest.Fork(t, dir, func(dir string) {
				l, err := idem.OpenLedger(filepath.Join(dir, "ledger.db"))
				if err == nil {
					err = setup(l)
				}
				if err != nil {
					fmt.Println("open:", err)
					os.Exit(2)
				}
				_, err = run(l, true, idem.WithWorkers(1))
				fmt.Println("each returned:", err)
				os.Exit(3)
			})
			if !exit.Killed {
				t.Fatalf("child was not killed: %+v", exit)
			}
			l := openLedger(t, dir)
			if err := setup(l); err != nil {
				t.Fatal(err)
			}
			if c, err := l.CountItems(context.Background(), points); err != nil || c.Running == 0 {
				t.Fatalf("the dead child's items: %+v, %v; want some running", c, err)
			}
			clk := idemtest.NewClock(time.Now()) // never advanced: the child's lease holds throughout
			var res idem.EachResult
			var err error
			within(t, "Each of the dead child's period", time.Minute, nil, func() error {
				res, err = run(l, false, idem.WithClock(clk))
				return nil
			})
			if err != nil || res.Outcome != idem.Ran || res.Counts.Done != n {
				t.Fatalf("Each: %v, %+v; want every item done at once", err, res)
			}
			if variant == "eachtx" {
				var rows, once int
				if err := l.DB().QueryRow(`SELECT count(*), count(*) FILTER (WHERE n = 1) FROM applied`).Scan(&rows, &once); err != nil {
					t.Fatal(err)
				}
				if rows != n || once != n {
					t.Fatalf("%d items applied, %d of them once; want %d, each once", rows, once, n)
				}
				return
			}
			counts := newEffects(dir).Counts(t)
			for i := range n {
				if it := fmt.Sprintf("acct-%06d", i); counts[it] < 1 {
					t.Errorf("%s was never applied", it)
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
