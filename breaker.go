package idem

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Breaker is a circuit breaker on fn's errors, for fanout.Each and fanout.EachTx
// (fanout.WithBreaker): after Failures consecutive failures of fn it opens for
// CoolDown, and a call that finds it open is deferred ([ErrDeferred]): it
// claims nothing, and a call that is running stops claiming, so that a
// downstream outage does not make every item fail, back off and park.
// After the cool-down it is half-open: one item runs as a probe while the
// other workers wait for it; success closes the breaker, failure opens it
// for another cool-down.
//
// What counts as a failure: an error of fn, except a [Permanent] one (the
// item's own fault: it parks as without a breaker) and the end of the
// call's context. Items that failed before the breaker opened keep their
// failure (they back off as usual): at most Failures of them in a row, plus
// one for each other worker whose item was running when it opened.
//
// A Breaker keeps its state in memory, for the process: give the same one
// to every call of a job (every trigger), so that the next trigger finds it
// open or probing. It takes time from the call's clock ([WithClock]). Safe
// for concurrent use; the zero Breaker is not usable, call NewBreaker.
//
// Why not sony/gobreaker: the core module depends only on SQLite, renameio
// and golang.org/x, and gobreaker reads the wall clock (time.Now) where
// idem's tests need the call's clock. This one is the part Each needs:
// consecutive failures, cool-down, one probe.
type Breaker struct {
	failures int
	coolDown time.Duration

	mu        sync.Mutex
	run       int           // consecutive failures
	openUntil time.Time     // zero: closed
	probe     chan struct{} // a probe runs; closed when it ends
	gen       uint64        // the number of the last probe let through
}

// BreakerState is a Breaker's state.
type BreakerState int

// The states of a Breaker.
const (
	BreakerClosed   BreakerState = iota // items run
	BreakerOpen                         // calls are deferred until the cool-down ends
	BreakerHalfOpen                     // the cool-down ended: the next item is a probe
)

func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "closed"
	case BreakerOpen:
		return "open"
	case BreakerHalfOpen:
		return "half_open"
	}
	return fmt.Sprintf("BreakerState(%d)", int(s))
}

// NewBreaker returns a closed Breaker that opens after failures consecutive
// failures, for coolDown. A failures below 1 or a coolDown not above 0 makes
// fanout.WithBreaker fail with [ErrInvalidOption].
func NewBreaker(failures int, coolDown time.Duration) *Breaker {
	return &Breaker{failures: failures, coolDown: coolDown}
}

func (b *Breaker) validate() error {
	switch {
	case b == nil:
		return errors.New("no breaker")
	case b.failures < 1:
		return fmt.Errorf("NewBreaker(%d, %v): it opens after at least one failure", b.failures, b.coolDown)
	case b.coolDown <= 0:
		return fmt.Errorf("NewBreaker(%d, %v): the cool-down must be above 0", b.failures, b.coolDown)
	}
	return nil
}

// State returns the breaker's state at now, and when an open one lets a
// probe through.
func (b *Breaker) State(now time.Time) (BreakerState, time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state(now), b.openUntil
}

func (b *Breaker) state(now time.Time) BreakerState {
	switch {
	case b.openUntil.IsZero():
		return BreakerClosed
	case now.Before(b.openUntil):
		return BreakerOpen
	}
	return BreakerHalfOpen
}

// open returns the deferral of a breaker that is open at now, or nil. A
// half-open breaker is not open: its probe is let through, and the other
// items wait for the probe's end in acquire.
func (b *Breaker) open(now time.Time) *Deferral {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state(now) == BreakerOpen {
		return &Deferral{Reason: ReasonBreaker, Until: b.openUntil}
	}
	return nil
}

// acquire lets one item run: it returns the probe's number (not 0) when
// the item is the half-open breaker's probe, or the deferral of an open
// breaker. While another item probes it waits for that probe's end (a
// reason not to call it inside a database transaction).
func (b *Breaker) acquire(ctx context.Context, clock Clock) (probe uint64, d *Deferral, err error) {
	for {
		b.mu.Lock()
		switch b.state(clock.Now()) {
		case BreakerClosed:
			b.mu.Unlock()
			return 0, nil, nil
		case BreakerOpen:
			d := &Deferral{Reason: ReasonBreaker, Until: b.openUntil}
			b.mu.Unlock()
			return 0, d, nil
		}
		if b.probe == nil {
			b.probe = make(chan struct{})
			b.gen++
			probe = b.gen
			b.mu.Unlock()
			return probe, nil, nil
		}
		wait := b.probe
		b.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return 0, nil, context.Cause(ctx)
		}
	}
}

// done records how an item that acquire let run ended: err is fn's error,
// probe the number acquire gave it.
func (b *Breaker) done(ctx context.Context, now time.Time, probe uint64, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	isProbe := probe != 0 && probe == b.gen && b.probe != nil
	counts := err != nil && !isPermanent(err) && ctx.Err() == nil && !errors.Is(err, ErrLeaseLost)
	switch {
	case err == nil:
		b.run = 0
		if isProbe {
			b.openUntil = time.Time{}
		}
	case counts:
		b.run++
		if isProbe || (b.openUntil.IsZero() && b.run >= b.failures) {
			b.openUntil = now.Add(b.coolDown)
		}
	}
	if isProbe { // a probe that proved nothing (a permanent error) lets the next item probe
		close(b.probe)
		b.probe = nil
	}
}

// cancel ends the probe numbered probe if it has not told done how it
// ended (it did not run: the call stopped first): the next item probes.
func (b *Breaker) cancel(probe uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if probe != 0 && probe == b.gen && b.probe != nil {
		close(b.probe)
		b.probe = nil
	}
}
