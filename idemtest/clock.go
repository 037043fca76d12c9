package idemtest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/idemgo/idem/internal/testwait"
)

// Clock is a fake [idem.Clock] for tests: time moves only when the test
// calls Advance or Set, so leases expire and backoffs elapse without real
// sleeping. The zero Clock is not usable; call NewClock.
type Clock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []waiter
	auto    bool
	changed chan struct{} // closed and replaced whenever waiters change

	// onMove, set by the conformance suite, is told how far the clock
	// moved, so a store on its own clock can follow (Harness.Shift).
	onMove func(d time.Duration)
}

type waiter struct {
	at time.Time
	ch chan time.Time
}

// NewClock returns a fake clock reading start.
func NewClock(start time.Time) *Clock {
	return &Clock{now: start, changed: make(chan struct{})}
}

// NewAutoClock returns a fake clock that advances by itself whenever
// something waits on it, so a Run's backoff sleeps return at once while its
// records still show the delays.
func NewAutoClock(start time.Time) *Clock {
	c := NewClock(start)
	c.auto = true
	return c
}

// Now returns the fake time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// After returns a channel that receives when the clock has been advanced by d.
func (c *Clock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if c.auto && d > 0 {
		c.now = c.now.Add(d)
		if c.onMove != nil {
			c.mu.Unlock()
			c.onMove(d) // outside the lock: it may read the clock
			c.mu.Lock()
		}
	}
	if d <= 0 || c.auto {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, waiter{c.now.Add(d), ch})
	c.notify()
	return ch
}

// Advance moves the clock forward by d and fires every timer that is due.
func (c *Clock) Advance(d time.Duration) { c.Set(c.Now().Add(d)) }

// Set moves the clock to t (forward or back) and fires every timer due at t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	if c.onMove != nil && t.After(c.now) {
		d, move := t.Sub(c.now), c.onMove
		c.mu.Unlock()
		move(d) // outside the lock: it may read the clock
		c.mu.Lock()
	}
	defer c.mu.Unlock()
	c.now = t
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if !w.at.After(t) {
			w.ch <- t
			continue
		}
		kept = append(kept, w)
	}
	c.waiters = kept
	c.notify()
}

// Waiters returns how many timers are pending.
func (c *Clock) Waiters() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}

// BlockUntil waits until at least n timers are pending: use it to know that
// a goroutine has reached its sleep before advancing the clock. If they are
// not pending within 3 minutes it panics, with the goroutines of the process
// in the message: a test waiting for a sleep that never comes fails instead
// of hanging. In a goroutine that may outlive what it waits for (one that
// cancels a Run when the Run sleeps, say), use [Clock.BlockUntilContext].
func (c *Clock) BlockUntil(n int) {
	ctx, cancel := context.WithTimeout(context.Background(), blockLimit)
	defer cancel()
	if err := c.BlockUntilContext(ctx, n); err != nil {
		panic(fmt.Sprintf("idemtest: Clock.BlockUntil(%d): %d timers pending after %s (in a goroutine that may outlive its test, use BlockUntilContext); goroutines:\n%s",
			n, c.Waiters(), blockLimit, testwait.Goroutines()))
	}
}

// blockLimit is how long BlockUntil waits (a variable for its own test).
var blockLimit = testwait.Max

// BlockUntilContext is BlockUntil that gives up when ctx ends, returning
// ctx's error.
func (c *Clock) BlockUntilContext(ctx context.Context, n int) error {
	for {
		c.mu.Lock()
		got, ch := len(c.waiters), c.changed
		c.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (c *Clock) notify() {
	close(c.changed)
	c.changed = make(chan struct{})
}
