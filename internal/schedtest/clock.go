package schedtest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/testwait"
)

// Clock is a fake idem.Clock whose wall clock (Now) and monotonic clock
// (the timers of After) move apart, as on a real machine: Advance moves
// both, as time passing does; Jump moves the wall clock only, as a clock
// step (NTP, a person) or a suspend does: a machine that sleeps for three
// days wakes with its wall clock three days on and its monotonic timers
// where they were.
type Clock struct {
	mu      sync.Mutex
	wall    time.Time
	mono    time.Duration
	waiters []monoWaiter
	changed chan struct{}
}

type monoWaiter struct {
	at time.Duration
	ch chan time.Time
}

// NewClock returns a Clock whose wall clock reads wall.
func NewClock(wall time.Time) *Clock { return &Clock{wall: wall, changed: make(chan struct{})} }

// Now returns the wall clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.wall
}

// After fires once the monotonic clock has moved d.
func (c *Clock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.wall
		return ch
	}
	c.waiters = append(c.waiters, monoWaiter{c.mono + d, ch})
	c.notify()
	return ch
}

// Advance moves both clocks forward by d, firing the timers due.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wall = c.wall.Add(d)
	c.mono += d
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if w.at <= c.mono {
			w.ch <- c.wall
			continue
		}
		kept = append(kept, w)
	}
	c.waiters = kept
	c.notify()
}

// Jump moves the wall clock by d (back, if d < 0) and leaves the timers
// where they are.
func (c *Clock) Jump(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wall = c.wall.Add(d)
	c.notify()
}

func (c *Clock) notify() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// FileClock is idemtest's clock shared across processes through a file.
type FileClock = idemtest.FileClock

// SetFileClock writes now into a FileClock's file (idemtest.SetFileClock).
func SetFileClock(t testing.TB, path string, now time.Time) {
	t.Helper()
	idemtest.SetFileClock(t, path, now)
}

// Idle waits until s has looked at its jobs at the wall time now, runs
// nothing, and has nothing due at now: what it does at now, it has done.
func Idle(t testing.TB, s *idem.Scheduler, now time.Time) {
	t.Helper()
	var last lastStatus
	testwait.Until(t, func() bool {
		st := s.Status()
		last.st = st
		if st.Checked.Before(now) {
			return false
		}
		for _, j := range st.Jobs {
			// A job waiting for a slot (WithMaxRunning) has a NextRun
			// that has come; one a guard deferred waits for a later one.
			if j.Running || !j.NextRun.After(st.Checked) {
				return false
			}
		}
		return true
	}, "the scheduler to be idle at %v; its last status: %v", now, &last)
}

type lastStatus struct{ st idem.SchedulerStatus }

func (l *lastStatus) String() string { return fmt.Sprintf("%+v", l.st) }
