// Package breaker is the circuit breaker of a fan-out: its state machine,
// which the root package's Breaker wraps and its item engine
// drives (consecutive failures, a cool-down, one probe).
package breaker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// A Breaker opens after Failures consecutive failures, for CoolDown.
type Breaker struct {
	Failures int
	CoolDown time.Duration

	mu        sync.Mutex
	run       int           // consecutive failures
	openUntil time.Time     // zero: closed
	probe     chan struct{} // a probe runs; closed when it ends
	gen       uint64        // the number of the last probe let through
}

// State is a Breaker's state.
type State int

// The states.
const (
	Closed   State = iota // items run
	Open                  // calls are deferred until the cool-down ends
	HalfOpen              // the cool-down ended: the next item is a probe
)

// Validate is the error of a breaker made of bad values.
func (b *Breaker) Validate() error {
	switch {
	case b == nil:
		return errors.New("no breaker")
	case b.Failures < 1:
		return fmt.Errorf("NewBreaker(%d, %v): it opens after at least one failure", b.Failures, b.CoolDown)
	case b.CoolDown <= 0:
		return fmt.Errorf("NewBreaker(%d, %v): the cool-down must be above 0", b.Failures, b.CoolDown)
	}
	return nil
}

// State returns the breaker's state at now, and when an open one lets a
// probe through.
func (b *Breaker) State(now time.Time) (State, time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state(now), b.openUntil
}

func (b *Breaker) state(now time.Time) State {
	switch {
	case b.openUntil.IsZero():
		return Closed
	case now.Before(b.openUntil):
		return Open
	}
	return HalfOpen
}

// IsOpen reports whether the breaker is open at now, and until when. A
// half-open breaker is not open: its probe is let through, and the other
// items wait for the probe's end in Acquire.
func (b *Breaker) IsOpen(now time.Time) (bool, time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state(now) == Open, b.openUntil
}

// Acquire lets one item run: it returns the probe's number (not 0) when
// the item is the half-open breaker's probe, or, with open true, when an
// open breaker lets a probe through. While another item probes it waits
// for that probe's end (a reason not to call it inside a database
// transaction).
func (b *Breaker) Acquire(ctx context.Context, now func() time.Time) (probe uint64, open bool, until time.Time, err error) {
	for {
		b.mu.Lock()
		switch b.state(now()) {
		case Closed:
			b.mu.Unlock()
			return 0, false, time.Time{}, nil
		case Open:
			until := b.openUntil
			b.mu.Unlock()
			return 0, true, until, nil
		}
		if b.probe == nil {
			b.probe = make(chan struct{})
			b.gen++
			probe = b.gen
			b.mu.Unlock()
			return probe, false, time.Time{}, nil
		}
		wait := b.probe
		b.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return 0, false, time.Time{}, context.Cause(ctx)
		}
	}
}

// Done records how an item that Acquire let run ended: failed says its
// error counts as a failure, probe is the number Acquire gave it.
func (b *Breaker) Done(now time.Time, probe uint64, ok, failed bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	isProbe := probe != 0 && probe == b.gen && b.probe != nil
	switch {
	case ok:
		b.run = 0
		if isProbe {
			b.openUntil = time.Time{}
		}
	case failed:
		b.run++
		if isProbe || (b.openUntil.IsZero() && b.run >= b.Failures) {
			b.openUntil = now.Add(b.CoolDown)
		}
	}
	if isProbe { // a probe that proved nothing (a permanent error) lets the next item probe
		close(b.probe)
		b.probe = nil
	}
}

// Cancel ends the probe numbered probe if it has not told Done how it
// ended (it did not run: the call stopped first): the next item probes.
func (b *Breaker) Cancel(probe uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if probe != 0 && probe == b.gen && b.probe != nil {
		close(b.probe)
		b.probe = nil
	}
}
