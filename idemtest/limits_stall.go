package idemtest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/internal/testwait"
	"github.com/idemgo/idem/limit"
)

// claimGate is a store (the one it wraps, and its limits) whose claims
// wait while the gate is shut, as they do while a store does not answer
// and its client retries; everything else goes through.
type claimGate struct {
	idemstore.Store
	idemstore.LimitStore
	mu      sync.Mutex
	open    chan struct{} // closed while the gate is open
	waiting atomic.Int64  // claims waiting at the gate
}

func (g *claimGate) shut() {
	g.mu.Lock()
	g.open = make(chan struct{})
	g.mu.Unlock()
}

func (g *claimGate) reopen() {
	g.mu.Lock()
	close(g.open)
	g.mu.Unlock()
}

func (g *claimGate) Claim(ctx context.Context, req idemstore.ClaimRequest) (idemstore.Claim, error) {
	if err := g.wait(ctx); err != nil {
		return idemstore.Claim{}, err
	}
	return g.Store.Claim(ctx, req)
}

// wait waits at the gate: while it is shut, until it opens or ctx ends.
func (g *claimGate) wait(ctx context.Context) error {
	g.mu.Lock()
	open := g.open
	g.mu.Unlock()
	g.waiting.Add(1)
	defer g.waiting.Add(-1)
	select {
	case <-open:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// txGate is a claimGate for RunTx: a transaction (the claim of a fresh
// key in it, or the done mark of a claimed one) waits at the gate before
// it begins, as it does while the store does not answer.
type txGate[Tx any] struct {
	*claimGate
	tx idemstore.FreshTxStore[Tx]
}

func (g txGate[Tx]) FinishTx(ctx context.Context, key idemstore.Key, attempt int64, now time.Time, cursor bool, fn func(Tx) ([]byte, error)) error {
	if err := g.wait(ctx); err != nil {
		return err
	}
	return g.tx.FinishTx(ctx, key, attempt, now, cursor, fn)
}

func (g txGate[Tx]) ClaimFinishTx(ctx context.Context, req idemstore.ClaimRequest, cursor bool, fn func(Tx) ([]byte, error)) (idemstore.Claim, bool, error) {
	if err := g.wait(ctx); err != nil {
		return idemstore.Claim{}, false, err
	}
	return g.tx.ClaimFinishTx(ctx, req, cursor, fn)
}

func (g txGate[Tx]) RunTx(ctx context.Context, key idem.Key, fn func(context.Context, Tx) error, opts ...idem.Option) error {
	return idem.RunTx[Tx](ctx, g, key, fn, opts...)
}

// itemsGate is a store whose EachTx windows wait at the gate before their
// transaction begins, as they do while the store does not answer.
type itemsGate[Tx any] struct {
	idemstore.ItemTxStore[Tx]
	idemstore.LimitStore
	g *claimGate
}

func (g itemsGate[Tx]) FinishItemsTx(ctx context.Context, key idemstore.Key, step idemstore.ItemStep, claims []idemstore.ItemClaim,
	fn func(Tx, idemstore.ItemClaim) error, failed func(idemstore.ItemClaim, error) idemstore.ItemEnd) ([]idemstore.ItemEnd, []string, error) {
	if err := g.g.wait(ctx); err != nil {
		return nil, nil, err
	}
	return g.ItemTxStore.FinishItemsTx(ctx, key, step, claims, fn, failed)
}

func (g itemsGate[Tx]) RunTx(ctx context.Context, key idem.Key, fn func(context.Context, Tx) error, opts ...idem.Option) error {
	return idem.RunTx[Tx](ctx, g, key, fn, opts...)
}

// TestRateAcrossStallEachTx is [TestRateAcrossStall] for the items of
// idem.EachTx on s, an idemstore.ItemTxStore: four calls (a worker and
// windows of one item each) whose windows' transactions wait at the gate
// before they begin, with the window's start reserved.
func TestRateAcrossStallEachTx[Tx any](t *testing.T, s idem.Store) {
	g := newClaimGate(t, s)
	st, _ := idemstore.Of(s)
	its, ok := st.(idemstore.ItemTxStore[Tx])
	if !ok {
		t.Fatalf("%T is not an idemstore.ItemTxStore[%T]", st, *new(Tx))
	}
	ig := itemsGate[Tx]{ItemTxStore: its, LimitStore: g.LimitStore, g: g}
	rateAcrossStall(t, g, func(ctx context.Context, key idem.Key, fn func(context.Context) error, opts ...idem.Option) error {
		const items = 1000 // more than the test runs: its context ends the call
		_, err := idem.EachTx(ctx, ig, key, idem.Items(func(yield func(string) bool) {
			for i := range items {
				if !yield(fmt.Sprintf("i%04d", i)) {
					return
				}
			}
		}), func(ctx context.Context, _ Tx, _ string) error { return fn(ctx) },
			append(opts, idem.WithWorkers(1), idem.WithBatch(1))...)
		return err
	})
}

// TestRateAcrossStall checks a rate limit of package limit whose runs'
// claims stall after their starts were reserved (a store outage, its
// client retrying): workers run keys of their own under
// limit.NewRate(s, "api", 2, 2) until each waits at the shut claim with
// a start reserved; the limit refills meanwhile; the claims go through.
// No window of a second may hold more than rate + burst starts of fn:
// the starts reserved before the stall must not go together with the
// burst that refilled. s must keep limits (idemstore.LimitStore) on the
// clock of this host.
//
// The bound holds by design, not by timing: a start goes no later than a
// quarter of the interval (125 ms) after the instant it was reserved for,
// and the rest of the interval (375 ms) is room for the time between the
// limit's check and fn's reading of the clock.
func TestRateAcrossStall(t *testing.T, s idem.Store) {
	g := newClaimGate(t, s)
	rateAcrossStall(t, g, func(ctx context.Context, key idem.Key, fn func(context.Context) error, opts ...idem.Option) error {
		return idem.RunOn(ctx, g, key, fn, opts...)
	})
}

// TestRateAcrossStallTx is [TestRateAcrossStall] for RunTx on s, a
// FreshTxStore: the transaction that claims a fresh key and runs fn, or
// marks a claimed one done with fn's writes, waits at the gate before it
// begins (the store's claims too), with a start reserved.
func TestRateAcrossStallTx[Tx any](t *testing.T, s idem.Store) {
	g := newClaimGate(t, s)
	st, _ := idemstore.Of(s)
	ts, ok := st.(idemstore.FreshTxStore[Tx])
	if !ok {
		t.Fatalf("%T is not an idemstore.FreshTxStore[%T]", st, *new(Tx))
	}
	tg := txGate[Tx]{claimGate: g, tx: ts}
	rateAcrossStall(t, g, func(ctx context.Context, key idem.Key, fn func(context.Context) error, opts ...idem.Option) error {
		return idem.RunTx(ctx, tg, key, func(ctx context.Context, _ Tx) error { return fn(ctx) }, opts...)
	})
}

func newClaimGate(t *testing.T, s idem.Store) *claimGate {
	st, err := idemstore.Of(s)
	if err != nil {
		t.Fatal(err)
	}
	ls, ok := st.(idemstore.LimitStore)
	if !ok {
		t.Fatalf("%T keeps no limits", st)
	}
	g := &claimGate{Store: st, LimitStore: ls, open: make(chan struct{})}
	close(g.open)
	return g
}

func rateAcrossStall(t *testing.T, g *claimGate, run func(ctx context.Context, key idem.Key, fn func(context.Context) error, opts ...idem.Option) error) {
	const (
		perSecond = 2
		burst     = 2
		workers   = 4
	)
	r, err := limit.NewRate(g, "api", perSecond, burst)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var starts []time.Time
	var n atomic.Int64
	var wg sync.WaitGroup
	job := fmt.Sprintf("stall-%d", time.Now().UnixNano())
	for w := range workers {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				key := idem.Key{Job: job, Period: fmt.Sprintf("w%d-%d", w, i)}
				err := run(ctx, key, func(context.Context) error {
					now := time.Now()
					mu.Lock()
					starts = append(starts, now)
					mu.Unlock()
					n.Add(1)
					return nil
				}, idem.WithLimits(r))
				if err != nil && ctx.Err() == nil {
					t.Logf("run %s: %v", key, err)
				}
			}
		})
	}
	defer testwait.Group(t, &wg, "the workers to end")
	defer cancel()
	testwait.Until(t, func() bool { return n.Load() >= 2*burst }, "the workers to start %d runs", 2*burst)
	g.shut()
	testwait.Until(t, func() bool { return g.waiting.Load() == workers }, "all %d workers to wait at the shut gate", workers)
	// Every worker holds a reserved start; nobody asks for more: the
	// limit refills (its burst, after burst intervals past its last
	// reservation, at most a second ahead).
	time.Sleep(time.Second + burst*time.Second/perSecond)
	before := n.Load()
	g.reopen()
	testwait.Until(t, func() bool { return n.Load() >= before+workers+2*perSecond }, "%d more runs after the stall", workers+2*perSecond)
	cancel()
	testwait.Group(t, &wg, "the workers to end")

	mu.Lock()
	defer mu.Unlock()
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	most, at := 0, 0
	for i := range starts {
		j, _ := slices.BinarySearchFunc(starts[i:], starts[i].Add(time.Second), func(a, b time.Time) int { return a.Compare(b) })
		if j > most {
			most, at = j, i
		}
	}
	var in []string
	for _, s := range starts[at : at+most] {
		in = append(in, s.Sub(starts[at]).Round(time.Millisecond).String())
	}
	t.Logf("%d starts of fn; at most %d in a second (%v); the limit %d/s, burst %d", len(starts), most, in, perSecond, burst)
	if most > perSecond+burst {
		t.Fatalf("%d starts of fn in a second (%v from the first of them), more than rate %d + burst %d: the starts reserved before the store stalled went with the burst that refilled",
			most, in, perSecond, burst)
	}
}
