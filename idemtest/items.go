package idemtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/internal/testledger"
	"github.com/idemgo/idem/internal/testwait"
)

// itemDownstream is the item suite's fake downstream: it counts each
// item's effects.
type itemDownstream struct {
	mu   sync.Mutex
	seen map[string]int
}

func newItemDownstream() *itemDownstream { return &itemDownstream{seen: map[string]int{}} }

func (d *itemDownstream) apply(_ context.Context, item string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.seen[item]++
	return nil
}

func (d *itemDownstream) has(ctx context.Context, _ idem.Key) (bool, error) {
	info, ok := idem.InfoFrom(ctx)
	if !ok || info.Item == "" {
		return false, errors.New("idemtest: the check's context names no item")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.seen[info.Item] > 0, nil
}

func (d *itemDownstream) counts() map[string]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	m := make(map[string]int, len(d.seen))
	for k, v := range d.seen {
		m[k] = v
	}
	return m
}

// itemIDs streams n item ids.
func itemIDs(n int) func(yield func(string, error) bool) {
	return func(yield func(string, error) bool) {
		for i := range n {
			if !yield(fmt.Sprintf("item-%05d", i), nil) {
				return
			}
		}
	}
}

// testItems is the part of the suite for stores that implement
// idemstore.ItemStore ([idem.Each]).
func testItems(t *testing.T, h Harness) {
	t.Run("Once", func(t *testing.T) { testItemsOnce(t, h) })
	t.Run("CrashPoints", func(t *testing.T) { testItemsCrash(t, h) })
	t.Run("Poison", func(t *testing.T) { testItemsPoison(t, h) })
	t.Run("MarkAbandoned", func(t *testing.T) { testItemsMarkAbandoned(t, h) })
	t.Run("Cancelled", func(t *testing.T) { testItemsCancelled(t, h) })
	t.Run("Model", func(t *testing.T) { testItemsModel(t, h) })
}

func itemStore(t *testing.T, s idemstore.Store) idemstore.ItemStore {
	is, ok := s.(idemstore.ItemStore)
	if !ok {
		t.Fatalf("%T is not an idemstore.ItemStore", s)
	}
	return is
}

// testItemsOnce: every item once in every mode, the set generated again
// (in another order, with new and repeated ids) adding only what is new,
// and a later Each of the done period generating nothing.
func testItemsOnce(t *testing.T, h Harness) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			clk := NewClock(start)
			s := itemStore(t, h.open(t, clk))
			ctx := context.Background()
			k := idem.Key{Job: "items", Period: "2026-10-27"}
			// A first generation that stopped half-way: 150 of the items, in reverse.
			var half []string
			for i := 149; i >= 0; i-- {
				half = append(half, fmt.Sprintf("item-%05d", i*2))
			}
			if err := s.AddItems(ctx, k, half); err != nil {
				t.Fatal(err)
			}
			d := newItemDownstream()
			res, err := idem.Each(ctx, s, k, itemIDs(300), d.apply, m.opt(d.has), idem.WithBatch(40))
			if err != nil || res.Outcome != idem.Ran || res.Counts.Done != 300 || res.Counts.Total() != 300 {
				t.Fatalf("Each: %v, %+v", err, res)
			}
			got := d.counts()
			for i := range 300 {
				if it := fmt.Sprintf("item-%05d", i); got[it] != 1 {
					t.Fatalf("%s applied %d times", it, got[it])
				}
			}
			res, err = idem.Each(ctx, s, k, func(yield func(string, error) bool) { t.Error("items generated for a done period") },
				d.apply, m.opt(d.has))
			if err != nil || res.Outcome != idem.AlreadyDone {
				t.Fatalf("Each of a done period: %v, %s", err, res.Outcome)
			}
		})
	}
}

// testItemsCrash stops Each at a point of the item protocol, as a SIGKILL
// would, lets the leases expire, and checks each mode's promise for every
// item after a second Each.
func testItemsCrash(t *testing.T, h Harness) {
	const n = 400
	crashes := []struct {
		name string
		at   idemstore.Point
		nth  int  // the nth passing of at
		mark bool // or the first passing once every item took effect: the period's done mark
	}{
		{"after-claim", idemstore.AfterClaim, 1, false},
		{"after-fn", idemstore.AfterFn, 150, false},
		{"after-done", idemstore.AfterDone, 2, false},
		// The period's done mark, claimed and not yet written, in every
		// mode: its body has no effect, so the next Each marks it as
		// AtLeastOnce would, whatever the items' mode.
		{"mark-after-claim", idemstore.AfterClaim, 0, true},
		{"mark-after-fn", idemstore.AfterFn, n + 1, true},
	}
	for _, m := range modes {
		for _, c := range crashes {
			t.Run(m.name+"/"+c.name, func(t *testing.T) {
				clk := NewClock(start)
				s := itemStore(t, h.open(t, clk))
				k := idem.Key{Job: "items-crash", Period: "2026-10-27"}
				d := newItemDownstream()
				opts := []idem.Option{m.opt(d.has), idem.WithBatch(50), idem.WithWorkers(1)}
				seen := 0
				ctx := CrashWhen(context.Background(), func(p idemstore.Point, _ idem.Key) bool {
					if p == c.at {
						seen++
					}
					if c.mark && len(d.counts()) < n {
						return false
					}
					return p == c.at && (seen == c.nth || c.nth == 0)
				})
				if _, err := idem.Each(ctx, s, k, itemIDs(n), d.apply, opts...); !errors.Is(err, ErrCrashed) {
					t.Fatalf("crashing Each: %v, want ErrCrashed", err)
				}
				h.expire(t, s, clk)
				res, err := idem.Each(context.Background(), s, k, itemIDs(n), d.apply, opts...)
				got := d.counts()
				applied := 0
				for i := range n {
					it := fmt.Sprintf("item-%05d", i)
					switch e := got[it]; {
					case e > 0:
						applied++
						if e > 1 && m.name != "at-least-once" {
							t.Fatalf("%s applied %d times", it, e)
						}
					case m.name != "at-most-once":
						t.Fatalf("%s never applied", it)
					}
				}
				cn := res.Counts
				if cn.Total() != n || cn.Pending+cn.Running+cn.Failed != 0 {
					t.Fatalf("counts %+v: want %d items, all settled", cn, n)
				}
				if m.name == "at-most-once" {
					if int64(applied) < cn.Done || int64(applied) > cn.Done+cn.Unknown {
						t.Fatalf("%d items applied, %d done, %d unknown", applied, cn.Done, cn.Unknown)
					}
					if (cn.Unknown > 0) != errors.Is(err, idem.ErrUnknownOutcome) {
						t.Fatalf("recovery: %v with %d items unknown", err, cn.Unknown)
					}
				} else if err != nil || cn.Done != n {
					t.Fatalf("recovery: %v, counts %+v", err, cn)
				}
				// One more Each changes nothing.
				before := d.counts()
				if _, err := idem.Each(context.Background(), s, k, itemIDs(n), d.apply, opts...); err != nil && !errors.Is(err, idem.ErrUnknownOutcome) {
					t.Fatalf("Each after recovery: %v", err)
				}
				for it, e := range d.counts() {
					if before[it] != e {
						t.Fatalf("Each after recovery applied %s again", it)
					}
				}
			})
		}
	}
}

// testItemsPoison: an item that keeps failing backs off and is parked after
// the Backoff's last attempt, and reported; the others are done, and so is
// the period.
func testItemsPoison(t *testing.T, h Harness) {
	clk := NewAutoClock(start) // backoffs pass at once
	s := itemStore(t, h.open(t, clk))
	k := idem.Key{Job: "items-poison", Period: "2026-10-27"}
	d := newItemDownstream()
	tries := 0
	res, err := idem.Each(context.Background(), s, k, itemIDs(60), func(ctx context.Context, item string) error {
		if item == "item-00017" {
			tries++
			return idem.NothingHappened(errors.New("account frozen"))
		}
		return d.apply(ctx, item)
	}, idem.WithBackoff(idem.MaxAttempts(3, idem.Constant(time.Minute))), idem.WithBatch(10))
	if err != nil || res.Outcome != idem.Ran || res.Counts.Parked != 1 || res.Counts.Done != 59 ||
		len(res.Parked) != 1 || res.Parked[0] != "item-00017" {
		t.Fatalf("Each: %v, %+v", err, res)
	}
	if tries != 3 {
		t.Fatalf("the poison item ran %d times, want 3 (the Backoff's attempts)", tries)
	}
	if len(d.counts()) != 59 {
		t.Fatalf("%d items applied, want 59", len(d.counts()))
	}
	if rec, ok, err := s.Lookup(context.Background(), k); err != nil || !ok || rec.Status != idem.StatusDone {
		t.Fatalf("period: %+v, %v, %v", rec, ok, err)
	}
}

// testItemsMarkAbandoned: calls stopped between the period's done mark's
// claim and its write, more times than the Backoff allows attempts, in
// every mode. The mark has no effect of its own, so the next Each writes
// it: the period is not parked, nothing is unknown, and the items'
// downstream check is never asked about the period.
func testItemsMarkAbandoned(t *testing.T, h Harness) {
	const n = 30
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			clk := NewClock(start)
			s := itemStore(t, h.open(t, clk))
			k := idem.Key{Job: "items-mark", Period: "2026-10-27"}
			d := newItemDownstream()
			opts := []idem.Option{m.opt(d.has), idem.WithBatch(7), idem.WithBackoff(idem.MaxAttempts(2, idem.Constant(time.Minute)))}
			// Each call ends by the test's deadline, naming what it was doing.
			limit, cancel := context.WithTimeout(context.Background(), testwait.Limit(t))
			defer cancel()
			for i := range 3 {
				ctx := CrashWhen(limit, func(p idemstore.Point, _ idem.Key) bool {
					return p == idemstore.AfterClaim && len(d.counts()) == n // every item took effect: the mark's claim
				})
				if _, err := idem.Each(ctx, s, k, itemIDs(n), d.apply, opts...); !errors.Is(err, ErrCrashed) {
					t.Fatalf("Each %d, stopped at the mark's claim: %v, want ErrCrashed", i+1, err)
				}
				h.expire(t, s, clk)
			}
			res, err := idem.Each(limit, s, k, itemIDs(n), d.apply, opts...)
			if err != nil || res.Outcome != idem.Ran || res.Counts.Done != n {
				t.Fatalf("Each after three abandoned marks: %v, %+v; want Ran with %d items done", err, res, n)
			}
			if rec, ok, err := s.Lookup(context.Background(), k); err != nil || !ok || rec.Status != idem.StatusDone {
				t.Fatalf("period: %+v, %v, %v", rec, ok, err)
			}
			for it, e := range d.counts() {
				if e != 1 {
					t.Fatalf("%s applied %d times", it, e)
				}
			}
		})
	}
}

// testItemsCancelled: an Each whose context ends (a SIGTERM's
// signal.NotifyContext, say) starts no item after it, in every mode: fn
// is not called with a context that has ended, and the items its worker
// had claimed and not started are handed back (the store records them
// although the context has ended): claimable at once, not in doubt, no
// failure counted, none unknown. Each returns ctx's error, Failed.
func testItemsCancelled(t *testing.T, h Harness) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			clk := NewAutoClock(start)
			s := itemStore(t, h.open(t, clk))
			k := idem.Key{Job: "items-cancelled", Period: "2026-10-27"}
			d := newItemDownstream()
			limit, stop := context.WithTimeout(context.Background(), testwait.Limit(t))
			defer stop()
			ctx, cancel := context.WithCancel(limit)
			defer cancel()
			var calls []string
			res, err := idem.Each(ctx, s, k, itemIDs(10), func(ctx context.Context, item string) error {
				if ctx.Err() != nil {
					t.Errorf("%s started after the call's context ended", item)
				}
				calls = append(calls, item)
				if len(calls) == 4 {
					cancel() // this item's call ends as it would: done
				}
				return d.apply(ctx, item)
			}, m.opt(d.has), idem.WithWorkers(1), idem.WithBatch(10))
			if !errors.Is(err, context.Canceled) || res.Outcome != idem.Failed {
				t.Fatalf("Each cancelled in its 4th item: %v, outcome %s; want context.Canceled, Failed", err, res.Outcome)
			}
			if len(calls) != 4 || res.Counts.Done != 4 || res.Counts.Unknown != 0 || res.Counts.Parked != 0 {
				t.Fatalf("fn called for %v, counts %+v; want 4 calls, 4 done, none unknown or parked", calls, res.Counts)
			}
			rest := testledger.ClaimAll(t, s, k, clk.Now())
			if len(rest) != 6 {
				t.Fatalf("claimable right after the call: %+v; want the 6 items not started", rest)
			}
			for _, c := range rest {
				if c.Doubt || c.Failures != 0 || slices.Contains(calls, c.Item) {
					t.Fatalf("handed back %+v; want an item that did not run, not in doubt, no failure", c)
				}
			}
		})
	}
}
