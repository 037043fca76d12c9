package idemtest

// The fake clock of TestModel's Runs (mclock), which moves only when the
// driver moves it, firing the heartbeat's timers or not; and goroutines,
// the stacks a stuck wait prints.

import (
	"bytes"
	"fmt"
	"runtime/pprof"
	"sync"
	"time"
)

// mclock is the fake clock of the model's Runs. Time moves only when the
// driver moves it; a move either fires the timers that are due (the
// heartbeat renews) or not (the process stalled: its heartbeat did not
// run).
type mclock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []waiter
	changed chan struct{}
	// auto, while set, is called with every wait of at most mAutoWait
	// (the engine's retry of a failed store call), after the waiter is
	// kept: it moves the clock by the wait, firing it. The heartbeat's
	// waits (a third of the lease) are longer.
	auto func(d time.Duration)
}

// mAutoWait bounds the waits that mclock.auto moves the clock through.
const mAutoWait = 5 * time.Second

func newMClock(t time.Time) *mclock { return &mclock{now: t, changed: make(chan struct{})} }

func (c *mclock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *mclock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, waiter{c.now.Add(d), ch})
	close(c.changed)
	c.changed = make(chan struct{})
	if auto := c.auto; auto != nil && d <= mAutoWait {
		c.mu.Unlock()
		auto(d)
		c.mu.Lock()
	}
	return ch
}

// setAuto sets (nil: clears) the function that moves the clock through
// short waits.
func (c *mclock) setAuto(f func(d time.Duration)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.auto = f
}

func (c *mclock) move(d time.Duration, fire bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	if !fire {
		return
	}
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if !w.at.After(c.now) {
			w.ch <- c.now
			continue
		}
		kept = append(kept, w)
	}
	c.waiters = kept
}

// clear forgets every timer: between runs, only finished heartbeats' are
// left.
func (c *mclock) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.waiters = nil
}

// waitArmed waits until a timer is pending (the running attempt's
// heartbeat waits for its next renewal), for at most timeout.
func (c *mclock) waitArmed(what string, timeout time.Duration) error {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		c.mu.Lock()
		n, ch := len(c.waiters), c.changed
		c.mu.Unlock()
		if n > 0 {
			return nil
		}
		select {
		case <-ch:
		case <-timer.C:
			return fmt.Errorf("idemtest: model: waited %s for %s; goroutines:\n%s", timeout, what, goroutines())
		}
	}
}

func goroutines() string {
	var b bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&b, 2)
	return b.String()
}
