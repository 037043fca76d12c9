// Package limit keeps limits shared by every process that names them: a
// rate of starts ([Rate]: runs or items per second, with a burst) and a
// maximum of runs at once ([AtOnce]), kept in the store the jobs already
// use — the SQLite ledger (the processes of one host), Postgres, Redis.
// Three replicas that each name the rate "mail" of 200 a second send 200 a
// second together, not 600.
//
//	mail, err := limit.NewRate(ledger, "mail", 200, 20)
//	...
//	err = idem.Each(ctx, ledger, key, merchants, send, idem.WithLimits(mail))
//
// [idem.WithLimits] makes a call wait for its limits: Run, RunTx, a catch-up's
// periods and a Scheduler's jobs take one start of each rate per start of
// fn (a retry takes another) and hold a place of each AtOnce limit while
// they run; Each and EachTx hold a place for the whole call and take one
// start of each rate per item (EachTx: a window's together). A key that
// is done (or parked) takes nothing. Waiting for a limit is not failing:
// nothing is claimed before the limit lets the run go, and a run whose
// context ends while it waits, or whose limit's store fails, is deferred
// ([idem.ErrDeferred], with a [idem.Deferral] whose Reason is "limit" and
// the limit's name), as a guard's refusal would be: no attempt counted,
// nothing written.
//
// The store reserves each start for an instant on its clock, at most
// PerSecond + Burst in any second of it. fn starts no earlier than that
// instant and no later than [StartWithin] or a quarter of the rate's
// interval after it, whichever is longer, measured on the process's clock
// from before it asked (so never later by the store's). A start that
// cannot go by then (its claim stalled through a store outage) is void,
// and fn takes another right before it starts: Run after its claim,
// holding it; RunTx before its transaction (a start that goes void in it
// fails the attempt with nothing done: its retry takes a new one); Each
// before each item; EachTx at a window's first item, in its transaction
// (a window whose starts went void runs none of its items: they are
// claimed again, their failure counts unchanged). If the run's context
// ends then, or the store fails, the attempt fails with nothing done
// (counted, retried by its backoff), as the claim has been made. So in
// any second of the store's clock fewer than PerSecond + Burst +
// max(¼, PerSecond × StartWithin) fns start: at most PerSecond + Burst
// for a whole rate of up to 100 a second, at most 1 % more above.
//
// What is not promised: a rate counts starts, not how long the work takes;
// a start reserved by a process that then died or was cancelled is lost
// (the limit errs on the side of fewer starts); every process must name a
// limit with the same numbers (each takes by its own — during a rolling
// change the limit is, at most, the larger); a place of an AtOnce limit
// held by a process that stopped without dying (a hung process, a lost
// network) comes back only when its lease ends; a store's clock that
// jumps moves the limit with it; the bound on starts is on the store's
// clock, with the process's running at the same rate, and says nothing of
// when the work arrives at a receiver on another host; a process that
// stalls between the check and fn starts fn that much later; and the
// items of an EachTx window of more than one start one after another
// after its first (docs/limits.md).
package limit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/internal/storeof"
)

// ErrSlotLost is the cause of a held run's context (context.Cause) when
// its place of an AtOnce limit was lost: the store could not renew it for
// a whole lease, or found it taken by another after its lease ended.
var ErrSlotLost = errors.New("limit: place of an at-once limit lost")

// store returns s's limit store, or an error naming call and s's type.
func store(call string, s idem.Store, name string) (idemstore.LimitStore, error) {
	if s == nil {
		return nil, fmt.Errorf("%w: %s(%s): no store", idem.ErrInvalidOption, call, idemstore.QuotePart(name))
	}
	st, err := idemstore.Of(s)
	if err != nil {
		return nil, err
	}
	ls, ok := st.(idemstore.LimitStore)
	if !ok {
		return nil, fmt.Errorf("%w: %s(%s): the store %s keeps no limits shared by processes (idemstore.LimitStore): use the SQLite ledger, Postgres or Redis",
			idem.ErrInvalidOption, call, idemstore.QuotePart(name), storeof.TypeName(s))
	}
	if err := idemstore.ValidatePart("limit name", name); err != nil {
		return nil, fmt.Errorf("%w: %s(%s): %v", idem.ErrInvalidOption, call, idemstore.QuotePart(name), err)
	}
	return ls, nil
}

// Rate is a rate of starts shared by every process that names it in the
// same store: PerSecond starts a second and, after a quiet time, Burst at
// once. It is the generic cell rate algorithm on the store's clock
// ([idemstore.TakeRate]): each start costs a round trip to the store.
type Rate struct {
	s    idemstore.LimitStore
	name string
	r    idemstore.Rate
}

// maxReserve is how far ahead a Rate reserves a start: a wait longer than
// that asks again later, so that a process does not hold starts it may
// never use.
const maxReserve = 2 * time.Second

// StartWithin is how late, at least, a start of a [Rate] may go after the
// time the store reserved it for: a start may go StartWithin or a quarter
// of the rate's interval late, whichever is longer. The time is measured
// by the process's own clock from before it asked the store, so that it
// is never shorter by the store's clock. A start that cannot go by then
// (the store did not answer the claim in time, the process stalled) is
// void and lost, and the run reserves another (see the package's
// comment).
const StartWithin = 10 * time.Millisecond

// lateness is how late a start of r may go.
func lateness(r idemstore.Rate) time.Duration { return max(StartWithin, r.Interval()/4) }

// NewRate returns the rate limit named name in s: perSecond starts a
// second (above 0), burst at once (at least 1).
func NewRate(s idem.Store, name string, perSecond float64, burst int) (*Rate, error) {
	ls, err := store("limit.NewRate", s, name)
	if err != nil {
		return nil, err
	}
	if !(perSecond > 0) || perSecond > 1e9 || burst < 1 {
		return nil, fmt.Errorf("%w: limit.NewRate(%s, %v, %d): the rate must be above 0 (and at most 1e9) and the burst at least 1",
			idem.ErrInvalidOption, idemstore.QuotePart(name), perSecond, burst)
	}
	return &Rate{s: ls, name: name, r: idemstore.Rate{PerSecond: perSecond, Burst: burst}}, nil
}

// Name returns the limit's name.
func (r *Rate) Name() string { return r.name }

// String describes the limit: "rate mail: 200/s, burst 20".
func (r *Rate) String() string {
	return fmt.Sprintf("rate %s: %v/s, burst %d", r.name, r.r.PerSecond, r.r.Burst)
}

// Wait waits until one more start may go. See WaitN.
func (r *Rate) Wait(ctx context.Context) error { return r.WaitN(ctx, 1) }

// WaitN waits until n more starts may go, or ctx ends (its error; the
// starts reserved are then lost), or the store fails (its error). It
// returns no later than [StartWithin] (or a quarter of the interval, if
// longer) after the time the starts were reserved for (a wait that
// overslept reserves again): the caller starts them at once.
func (r *Rate) WaitN(ctx context.Context, n int) error {
	_, err := r.take(ctx, n)
	return err
}

// take is WaitN: it returns the time by which the starts must go, by this
// process's clock (a reading with its monotonic clock), after which they
// are void.
func (r *Rate) take(ctx context.Context, n int) (time.Time, error) {
	if n <= 0 {
		return time.Time{}, nil
	}
	// More starts than the burst wait for the ones beyond it even when the
	// limit is idle: reserve that far ahead too, or they never would be.
	ahead := maxReserve + time.Duration(max(n-r.r.Burst, 0))*r.r.Interval()
	for {
		// The store reserves the starts for its now plus wait, and its now
		// is after asked: by asked+wait+late on this process's clock,
		// they are at most late on the store's.
		asked := time.Now()
		wait, ok, err := r.s.TakeRate(ctx, r.name, r.r, n, ahead)
		if err != nil {
			return time.Time{}, err
		}
		if err := sleep(ctx, wait); err != nil {
			return time.Time{}, err
		}
		by := asked.Add(wait + lateness(r.r))
		if ok && !time.Now().After(by) {
			return by, nil
		}
	}
}

// TakeN waits until n more starts may go, and returns by when they must
// go: what idem's engine asks of a rate ([idem.Limiter]).
func (r *Rate) TakeN(ctx context.Context, n int) (by time.Time, err error) { return r.take(ctx, n) }

// Hold is at once for a rate: what idem's engine asks of an "at once"
// limit ([idem.Limiter]).
func (r *Rate) Hold(ctx context.Context) (held context.Context, release func(), err error) {
	return ctx, func() {}, nil
}

// AtOnce lets at most Max holders at once, across every process that
// names it in the same store. A holder keeps its place by a lease that it
// renews every third of it; a holder whose process died gives it back at
// once when the store can tell ([idemstore.HolderGone]: a process of the
// host that asks, on every store), and otherwise when its lease ends.
type AtOnce struct {
	s     idemstore.LimitStore
	name  string
	max   int
	lease time.Duration

	mu    sync.Mutex
	freed chan struct{} // closed when a place of this process is given back
}

// DefaultLease is an AtOnce limit's lease when NewAtOnce is given 0.
const DefaultLease = 30 * time.Second

// NewAtOnce returns the limit named name in s that lets max holders at
// once (at least 1), each holding its place by a lease of lease
// (DefaultLease for 0; at least a second).
func NewAtOnce(s idem.Store, name string, max int, lease time.Duration) (*AtOnce, error) {
	ls, err := store("limit.NewAtOnce", s, name)
	if err != nil {
		return nil, err
	}
	if lease == 0 {
		lease = DefaultLease
	}
	if max < 1 || lease < time.Second {
		return nil, fmt.Errorf("%w: limit.NewAtOnce(%s, %d, %v): at least one holder, and a lease of at least a second",
			idem.ErrInvalidOption, idemstore.QuotePart(name), max, lease)
	}
	return &AtOnce{s: ls, name: name, max: max, lease: lease, freed: make(chan struct{})}, nil
}

// Name returns the limit's name.
func (a *AtOnce) Name() string { return a.name }

// String describes the limit: "at once mail: 4".
func (a *AtOnce) String() string { return fmt.Sprintf("at once %s: %d", a.name, a.max) }

// pollMax is the longest an Acquire waits before it asks the store again
// (another process may have given a place back).
const pollMax = 200 * time.Millisecond

// Acquire waits for a place and holds it, until ctx ends (its error) or
// the store fails (its error). The Slot must be released.
func (a *AtOnce) Acquire(ctx context.Context) (*Slot, error) {
	for {
		a.mu.Lock()
		freed := a.freed
		a.mu.Unlock()
		s, wait, err := a.try(ctx)
		if err != nil || s != nil {
			return s, err
		}
		d := min(wait, pollMax)
		d = d/2 + rand.N(d/2+1) // replicas polling together do not ask together
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-freed:
		case <-time.After(d):
		}
	}
}

// TryAcquire takes a place if one is free now: ok is false when Max are
// held.
func (a *AtOnce) TryAcquire(ctx context.Context) (s *Slot, ok bool, err error) {
	s, _, err = a.try(ctx)
	return s, s != nil, err
}

func (a *AtOnce) try(ctx context.Context) (*Slot, time.Duration, error) {
	h := idemstore.SlotHolder{Owner: idemstore.Owner(), Token: fmt.Sprintf("%016x", rand.Uint64())}
	n, ok, wait, err := a.s.AcquireSlot(ctx, a.name, a.max, h, a.lease)
	if err != nil || !ok {
		if wait <= 0 {
			wait = pollMax
		}
		return nil, wait, err
	}
	s := &Slot{a: a, n: n, h: h, lost: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	go s.renew(time.Now())
	return s, 0, nil
}

// A Slot is a place held in an AtOnce limit.
type Slot struct {
	a    *AtOnce
	n    int
	h    idemstore.SlotHolder
	lost chan struct{} // closed when the place is lost
	stop chan struct{} // closed by Release
	done chan struct{} // closed when renew returns
	once sync.Once
}

// Number returns the place's number, from 0 to the limit's Max-1.
func (s *Slot) Number() int { return s.n }

// Lost is closed when the place is lost: the store could not renew it for
// a whole lease, or another took it after its lease had ended. A holder
// that goes on after that may be one more than the limit allows.
func (s *Slot) Lost() <-chan struct{} { return s.lost }

// Release gives the place back (once; later calls do nothing). An error
// of the store leaves the place to its lease.
func (s *Slot) Release() error {
	var err error
	s.once.Do(func() {
		close(s.stop)
		<-s.done
		ctx, cancel := context.WithTimeout(context.Background(), s.a.lease)
		defer cancel()
		err = s.a.s.ReleaseSlot(ctx, s.a.name, s.n, s.h)
		s.a.mu.Lock()
		close(s.a.freed)
		s.a.freed = make(chan struct{})
		s.a.mu.Unlock()
	})
	return err
}

// renew renews the lease every third of it, from held (when the place was
// taken), until Release; a renewal that fails is tried again every tenth
// of the lease until the lease has ended.
func (s *Slot) renew(held time.Time) {
	defer close(s.done)
	lease := s.a.lease
	next := lease / 3
	for {
		select {
		case <-s.stop:
			return
		case <-time.After(next):
		}
		ctx, cancel := context.WithTimeout(context.Background(), lease/3)
		start := time.Now()
		ok, err := s.a.s.RenewSlot(ctx, s.a.name, s.n, s.h, lease)
		cancel()
		switch {
		case err == nil && ok:
			held, next = start, lease/3
		case err == nil || time.Since(held) >= lease:
			close(s.lost)
			<-s.stop
			return
		default:
			next = lease / 10
		}
	}
}

// TakeN is at once for an "at once" limit: what idem's engine asks of a
// rate ([idem.Limiter]).
func (a *AtOnce) TakeN(ctx context.Context, n int) (by time.Time, err error) { return time.Time{}, nil }

// Hold takes a place for a run ([idem.Limiter]): the run's context ends
// with cause ErrSlotLost when the place is lost.
func (a *AtOnce) Hold(ctx context.Context) (held context.Context, release func(), err error) {
	s, err := a.Acquire(ctx)
	if err != nil {
		return ctx, nil, err
	}
	hctx, cancel := context.WithCancelCause(ctx)
	stop := make(chan struct{})
	go func() {
		select {
		case <-s.Lost():
			cancel(fmt.Errorf("%w: %s, place %d", ErrSlotLost, a.name, s.n))
		case <-stop:
		}
	}()
	return hctx, func() {
		close(stop)
		cancel(nil)
		_ = s.Release() // an error leaves the place to its lease
	}, nil
}

// sleep waits d, or until ctx ends (its cause).
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}

// Both are limits idem's calls wait for (idem.WithLimits).
var (
	_ idem.Limiter = (*Rate)(nil)
	_ idem.Limiter = (*AtOnce)(nil)
)
