package idemtest

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/internal/testwait"
)

// TestEachMark runs the tests of idem.Each's period mark (the done mark
// written once a period's items are settled) against a store that is an
// [idemstore.FreshMarker]: hosts returns n stores on one new, empty set of
// tables, each through a pool (a connection) of its own, as n hosts would
// open it.
//
//   - Race: four hosts run Each for the same periods at once and settle the
//     last items together; every call returns Ran (or AlreadyDone, for a
//     host that started after the period was marked), each item runs once,
//     and each period is done as attempt 1: the losers of the mark found it
//     done.
//   - WaitsForAHolder: a period that another holder has claimed (a Run of
//     the same key, say) is not marked over it: Each claims it the usual
//     way, finds it held, and waits; once the holder marks it done, Each
//     returns Ran with the holder's attempt.
//   - Crash: a stop at the mark's AfterClaim or AfterFn (every item done,
//     the period not marked) leaves the period without a record; the next
//     Each generates nothing, runs no item, and marks it done.
func TestEachMark(t *testing.T, hosts func(t *testing.T, n int) []idem.Store) {
	t.Run("Race", func(t *testing.T) { t.Parallel(); testEachMarkRace(t, hosts(t, 4)) })
	t.Run("WaitsForAHolder", func(t *testing.T) { t.Parallel(); testEachMarkHolder(t, hosts(t, 1)[0]) })
	for _, at := range []idemstore.Point{idemstore.AfterClaim, idemstore.AfterFn} {
		t.Run("Crash"+string(at), func(t *testing.T) { t.Parallel(); testEachMarkCrash(t, hosts(t, 1)[0], at) })
	}
}

// markItems yields n account ids.
func markItems(n int) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		for i := range n {
			if !yield(fmt.Sprintf("acct-%06d", i), nil) {
				return
			}
		}
	}
}

// markCtx is a context that ends at the test's deadline (testwait.Limit),
// so that an Each that never returns fails the test instead of hanging it.
func markCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Limit(t))
	t.Cleanup(cancel)
	return ctx
}

// markRecord returns key's record in s, failing t if it has none.
func markRecord(t *testing.T, s idem.Store, key idem.Key) idemstore.Record {
	t.Helper()
	rec, ok, err := s.Lookup(context.Background(), key)
	if err != nil || !ok {
		t.Fatalf("record of %s: found %v, %v", key, ok, err)
	}
	return rec
}

func testEachMarkRace(t *testing.T, hosts []idem.Store) {
	ctx := markCtx(t)
	for p := range 5 {
		key := idem.Key{Job: "daily_points", Period: fmt.Sprintf("2026-10-%02d", p+1)}
		var mu sync.Mutex
		applied := map[string]int{}
		errs := make([]error, len(hosts))
		outcomes := make([]idem.Outcome, len(hosts))
		var wg sync.WaitGroup
		for i, h := range hosts {
			wg.Go(func() {
				res, err := idem.Each(ctx, h, key, markItems(40), func(_ context.Context, it string) error {
					mu.Lock()
					applied[it]++
					mu.Unlock()
					return nil
				}, idem.WithWorkers(2))
				errs[i], outcomes[i] = err, res.Outcome
			})
		}
		testwait.Group(t, &wg, "the %d hosts' Each of %s", len(hosts), key)
		ran := 0
		for i := range hosts {
			if errs[i] != nil || outcomes[i] != idem.Ran && outcomes[i] != idem.AlreadyDone {
				t.Fatalf("%s: host %d: %v, %v; want nil, Ran or AlreadyDone", key, i, errs[i], outcomes[i])
			}
			if outcomes[i] == idem.Ran {
				ran++
			}
		}
		if ran == 0 {
			t.Fatalf("%s: no host returned Ran", key)
		}
		if len(applied) != 40 {
			t.Fatalf("%s: %d items ran, want 40", key, len(applied))
		}
		for it, n := range applied {
			if n != 1 {
				t.Fatalf("%s: item %s ran %d times", key, it, n)
			}
		}
		if rec := markRecord(t, hosts[0], key); rec.Status != idemstore.StatusDone || rec.Attempt != 1 {
			t.Fatalf("%s: record %+v; want done, attempt 1", key, rec)
		}
	}
}

func testEachMarkHolder(t *testing.T, l idem.Store) {
	ctx := markCtx(t)
	key := idem.Key{Job: "daily_points", Period: "2026-10-27"}
	s, err := idemstore.Of(l)
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.Claim(ctx, idemstore.ClaimRequest{Key: key, Owner: "another-host", Now: time.Now(), Lease: time.Hour})
	if err != nil || c.State != idemstore.ClaimAcquired {
		t.Fatalf("the holder's claim: %+v, %v", c, err)
	}
	var claims atomic.Int64 // the mark's claims: the first, and each one after a wait
	claimed := make(chan struct{}, 8)
	watch := idemstore.WithTrace(ctx, &idemstore.Trace{Checkpoint: func(_ context.Context, at idemstore.Point, k idem.Key) error {
		if at == idemstore.BeforeClaim && k == key {
			claims.Add(1)
			select {
			case claimed <- struct{}{}:
			default:
			}
		}
		return nil
	}})
	var finished atomic.Bool
	type result struct {
		res idem.EachResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := idem.Each(watch, l, key, markItems(30), func(context.Context, string) error { return nil })
		done <- result{res, err}
	}()
	deadline := time.After(testwait.Limit(t))
	for claims.Load() < 2 { // a claim after a wait: the first found the key held
		select {
		case r := <-done:
			t.Fatalf("Each returned while another holder had the period: %v, %v", r.err, r.res.Outcome)
		case <-claimed:
		case <-deadline:
			t.Fatalf("Each did not claim the period twice in %v (%d claims)", testwait.Limit(t), claims.Load())
		}
	}
	finished.Store(true)
	if err := s.Finish(ctx, key, c.Attempt, idemstore.End{Status: idemstore.StatusDone, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	r := testwait.Recv(t, done, "Each to return after the holder's done mark")
	if r.err != nil || r.res.Outcome != idem.Ran || !finished.Load() {
		t.Fatalf("Each: %v, %v; want nil, Ran, after the holder's done mark", r.err, r.res.Outcome)
	}
	if rec := markRecord(t, l, key); rec.Status != idemstore.StatusDone || rec.Attempt != c.Attempt || rec.Owner != "another-host" {
		t.Fatalf("record %+v; want done by the holder's attempt %d", rec, c.Attempt)
	}
}

func testEachMarkCrash(t *testing.T, l idem.Store, at idemstore.Point) {
	ctx := markCtx(t)
	key := idem.Key{Job: "daily_points", Period: "2026-10-27"}
	var applied atomic.Int64
	var marking atomic.Bool // only the mark claims the period itself: the items pass no BeforeClaim
	crash := CrashWhen(ctx, func(p idemstore.Point, k idem.Key) bool {
		if p == idemstore.BeforeClaim && k == key {
			marking.Store(true)
		}
		return p == at && marking.Load()
	})
	_, err := idem.Each(crash, l, key, markItems(50), func(context.Context, string) error {
		applied.Add(1)
		return nil
	}, idem.WithWorkers(1))
	if !errors.Is(err, ErrCrashed) || applied.Load() != 50 {
		t.Fatalf("Each: %v, %d items applied; want the stop at %s after all 50", err, applied.Load(), at)
	}
	if _, ok, err := l.Lookup(ctx, key); ok || err != nil {
		t.Fatalf("the period has a record after a stop at %s: %v, %v", at, ok, err)
	}
	res, err := idem.Each(ctx, l, key, func(yield func(string, error) bool) { t.Error("items generated again") },
		func(context.Context, string) error { t.Error("an item ran again"); return nil })
	if err != nil || res.Outcome != idem.Ran || res.Counts.Done != 50 {
		t.Fatalf("Each after the stop: %v, %+v; want nil, Ran, 50 done", err, res)
	}
	if rec := markRecord(t, l, key); rec.Status != idemstore.StatusDone || rec.Attempt != 1 {
		t.Fatalf("record %+v; want done, attempt 1", rec)
	}
}
