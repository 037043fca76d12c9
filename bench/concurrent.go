package main

import (
	"context"
	"path/filepath"
	"sync"

	"github.com/idemgo/idem"
)

// concurrency is how many goroutines the concurrent_ comparisons run at
// once, on each side.
const concurrency = 16

// concurrently runs fn over keys from concurrency goroutines, each taking
// the next key not yet taken, and returns the first error.
func concurrently(ctx context.Context, keys []idem.Key, fn func(context.Context, idem.Key) error) error {
	var (
		mu    sync.Mutex
		next  int
		first error
		wg    sync.WaitGroup
	)
	take := func() (idem.Key, bool) {
		mu.Lock()
		defer mu.Unlock()
		if next == len(keys) || first != nil {
			return idem.Key{}, false
		}
		next++
		return keys[next-1], true
	}
	for range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k, ok := take(); ok; k, ok = take() {
				if err := fn(ctx, k); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}

// concurrentSide runs n new keys a round through run, from concurrency
// goroutines.
func concurrentSide(n int, run func(context.Context, idem.Key) error) side {
	return side{ops: func(ctx context.Context, round int) (int, error) {
		keys := roundKeys("fresh", round, n)
		return len(keys), concurrently(ctx, keys, run)
	}}
}

// concurrentFreshRunVsFloor: Ledger.Run (AtLeastOnce) of new keys from 16
// goroutines at once against fresh_run_vs_floor's floor run from 16
// goroutines at once. SQLite has one writer at a time: the floor's claims
// and done marks take turns on one mutex, as idem queues its writers on a
// mutex (SQLite's busy handler would make a waiting writer sleep). Neither
// side shares a commit between keys.
func concurrentFreshRunVsFloor(ctx context.Context, cfg config) (result, error) {
	dir, l, cleanup, err := ledgerInTempDir(ctx, "concurrent")
	if err != nil {
		return result{}, err
	}
	defer cleanup()
	fl, err := newFreshFloor(ctx, filepath.Join(dir, "floor.db"))
	if err != nil {
		return result{}, err
	}
	defer fl.close()
	var writer sync.Mutex // one writer at a time, as SQLite allows: no wait in its busy handler
	floorRun := func(ctx context.Context, k idem.Key) error {
		writer.Lock()
		err := fl.claim(ctx, k)
		writer.Unlock()
		if err != nil {
			return err
		}
		if err := noop(ctx); err != nil {
			return err
		}
		writer.Lock()
		defer writer.Unlock()
		return execOne(ctx, fl.done, nowMicros(), k.Job, k.Period)
	}
	idemRun := func(ctx context.Context, k idem.Key) error { return l.Run(ctx, k, noop) }
	return alternate(ctx, cfg, concurrentSide(cfg.n, idemRun), concurrentSide(cfg.n, floorRun))
}

// concurrent16RoundMin is the fewest fresh Runs a round of
// concurrent16_fresh_run_vs_sequential_floor makes on each side (flag
// -concurrent16-round-min; the module's tests, which check that each line
// runs, set none). Only the idem side has a start and an end within a
// round: its 16 goroutines start together and, as the round's keys run
// out, finish one by one, so its last groups are smaller than 16 callers
// make them; the sequential floor has neither. At the default -n (200
// keys, about 10 ms on the idem side, 12 Runs a goroutine) that start and
// end are a large part of the round, and one slow fsync swings it: three
// runs alternated, the same binary, read 3.32, 3.28 and 2.99 at 200 Runs a
// round (idem 16,036-18,903/s) and 3.66, 3.73 and 3.63 at 2,000 (idem
// 21,250-21,604/s; the floor 4,835-5,901/s at either size).
const concurrent16RoundMin = 2000

// concurrent16FreshRunVsSequentialFloor: Ledger.Run (AtLeastOnce) of new
// keys from 16 goroutines at once against fresh_run_vs_floor's floor run
// one key after the other: what 16 concurrent callers gain from the
// ledger's group commit (their done marks share a COMMIT, so an fsync),
// against the least a sequential caller can pay for the same durability;
// max(cfg.n, cfg.c16RoundMin) Runs a round on each side.
func concurrent16FreshRunVsSequentialFloor(ctx context.Context, cfg config) (result, error) {
	n := max(cfg.n, cfg.c16RoundMin)
	dir, l, cleanup, err := ledgerInTempDir(ctx, "concurrent16")
	if err != nil {
		return result{}, err
	}
	defer cleanup()
	fl, err := newFreshFloor(ctx, filepath.Join(dir, "floor.db"))
	if err != nil {
		return result{}, err
	}
	defer fl.close()
	floorSide := side{ops: func(ctx context.Context, round int) (int, error) {
		keys := roundKeys("fresh", round, n)
		for _, k := range keys {
			if err := fl.run(ctx, k, noop); err != nil {
				return 0, err
			}
		}
		return len(keys), nil
	}}
	idemRun := func(ctx context.Context, k idem.Key) error { return l.Run(ctx, k, noop) }
	return alternate(ctx, cfg, concurrentSide(n, idemRun), floorSide)
}

// pgConcurrentFreshRunVsFloor: pgledger's Run (AtLeastOnce) of new keys
// from 16 goroutines at once against pg_fresh_run_vs_floor's floor from 16
// goroutines at once; each side's pool holds up to 16 connections.
func pgConcurrentFreshRunVsFloor(ctx context.Context, cfg config) (result, error) {
	e, why, err := openPGWith(ctx, cfg, pgOptions{floor: true, maxConns: concurrency})
	if err != nil || e == nil {
		return result{skipped: why}, err
	}
	defer e.close(ctx)
	f := newPGFloor(e)
	idemRun := func(ctx context.Context, k idem.Key) error { return e.ledger.Run(ctx, k, noop) }
	floorRun := func(ctx context.Context, k idem.Key) error { return f.run(ctx, k, noop) }
	return alternate(ctx, cfg, concurrentSide(cfg.n, idemRun), concurrentSide(cfg.n, floorRun))
}
